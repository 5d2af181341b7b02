"""A cost curve (issue 42): batchpoint, Spark Structured Streaming and a plain Spark job
(the physical floor) on bench_peer's keyed running aggregate, size by size.

Per size the epochs' input is generated once (peer_data.write_epoch, into one folder
per epoch) and each engine then runs every epoch in a child process of its own: its own
``local[2]`` session with bench_peer's settings (2 shuffle partitions; RocksDB state
store and changelog checkpointing for Structured Streaming; batchpoint parallelism 2,
max parallelism 128) and the same ``spark.driver.memory``. Engines run one after
another, so none disturbs another's time or memory. While a child runs, this process
samples the resident memory of its process tree (the Python driver, the JVM, Python
workers) every ``--sample`` seconds; the peak of the JVM and of the whole tree is what
the tables show. The engines:

- batchpoint: bench_peer.BatchpointEngine (``LocalEpochRunner``, local store);
- structured streaming: bench_peer.StreamingEngine (``availableNow``);
- floor: no protocol. Each epoch reads the epoch's input files and the previous
  epoch's state (Parquet, a local folder), counts and sums per key (one groupBy over
  the union, peer_engines.merge_totals, as bench_peer's ``totals`` operator) and
  writes the new state as Parquet to a new folder: what any engine must at least do
  to keep this state in files.

Each engine's final state is then checked against peer_data's numpy computation over
every event (exit 1 without figures on a difference), each is loaded again in a fresh
process (bench_peer's restore; batchpoint also as a Connect client of a warm server),
and the size's table is printed. After the last size: batchpoint's ratios to the other
two per size, and how each engine's figures grow from one size to the next.

The warm epoch is the median of every epoch but the first. Six epochs by default: this
workload changes most of its keys each epoch, so batchpoint's epoch 1 is a changelog
that finds the state churning (runtime/incremental: probes follow after streaks of full
snapshots that double from 4 to 16) and epoch 2 reads that changelog's layer once
before the full snapshots settle in; with three epochs the median would be those two
alone. Every epoch's time is printed.

    .venv/bin/python bench/bench_cost_curve.py --sizes small --epochs 3
    .venv/bin/python bench/bench_cost_curve.py --sizes small medium large xlarge
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curve_engines import ENGINES, MB, EngineRun, engine_child, epoch_inputs, run_engine
from peer_data import SIZES, Size, expected_arrays, write_epoch
from peer_restore import fresh_restore, warm_server_restore

CURVE = ("small", "medium", "large", "xlarge")
#: spark.driver.memory when --driver-memory is not given: in local mode the one heap of
#: the driver and both executor threads. xlarge's 8g is a guess (each of the 2 shuffle
#: partitions holds 5M keys there), not yet measured: the run's first line says so.
MEMORY = {"small": "4g", "medium": "4g", "large": "4g", "xlarge": "8g"}


@dataclass
class SizeRun:
    name: str
    size: Size
    memory: str
    engines: dict[str, EngineRun] = field(default_factory=dict)
    bp_connect_restore_s: float = 0.0
    bp_full_state_bytes: int = 0


# -- checking ---------------------------------------------------------------------------


def differences(name: str, final: Path, count: np.ndarray, total: np.ndarray) -> list[str]:
    """How an engine's final state differs from the numpy totals (none: equal), in
    arrays rather than bench_peer's dicts, which at 10M keys take gigabytes."""
    table = pq.read_table(final)
    keys = table["key"]
    well_formed = pc.all(pc.match_substring_regex(keys, r"^k\d{7}$")).as_py() is not False
    if table.num_rows and not well_formed:
        return [f"{name}: keys not of the generated form k0000000"]
    index = pc.cast(pc.utf8_slice_codeunits(keys, 1), pa.int64()).to_numpy()
    got_count, got_sum = (table[c].to_numpy(zero_copy_only=False) for c in ("count", "sum"))
    known = index < len(count)
    seen = np.zeros(len(count), dtype=bool)
    seen[index[known]] = True
    duplicates = int(known.sum()) - int(seen.sum())
    extra = int((~known).sum()) + int((seen & (count == 0)).sum())
    missing = int(((count > 0) & ~seen).sum())
    right = (got_count[known] == count[index[known]]) & (got_sum[known] == total[index[known]])
    wrong = int((~right & (count[index[known]] > 0)).sum())
    if missing == extra == wrong == duplicates == 0:
        return []
    return [f"{name}: {missing} keys missing, {extra} extra, {duplicates} twice, "
            f"{wrong} with other totals"]  # fmt: skip


# -- one size ---------------------------------------------------------------------------


def run_size(name: str, epochs: int, memory: str, work: Path, interval: float) -> SizeRun | None:
    size = SIZES[name]
    print(f"[{name}] {size.keys:,} keys, {size.events:,} events an epoch in {size.files} "
          f"files, {epochs} epochs, spark.driver.memory {memory}; work dir {work}",
          file=sys.stderr)  # fmt: skip
    for epoch in range(epochs):
        folder = epoch_inputs(work / "inputs", epoch)
        folder.mkdir(parents=True)
        started = time.perf_counter()
        write_epoch(folder, size, epoch)
        seconds = time.perf_counter() - started
        print(f"[{name}] input of epoch {epoch} written in {seconds:.1f} s", file=sys.stderr)
    run = SizeRun(name, size, memory)
    for engine in ENGINES:
        run.engines[engine] = run_engine(engine, name, work, epochs, memory, interval)
    count, total = expected_arrays(size, epochs)
    problems = [
        line
        for engine in ENGINES
        for line in differences(ENGINES[engine], work / engine / "final", count, total)
    ]
    if problems:
        print(f"size {name}: refusing to print figures: a result differs from the "
              "independent computation:")  # fmt: skip
        for line in problems:
            print(f"  {line}")
        return None
    keys = int((count > 0).sum())
    # Each in a fresh process (bench_peer's restore), one after another; the warm Connect
    # server's last, so that its start and stop overlap no other timed restore.
    read: dict[str, int] = {}
    for engine, r in run.engines.items():
        r.restore_s, read[engine] = fresh_restore(engine, r.restore_from, driver_memory=memory)
    bp_store = run.engines["bp"].restore_from
    run.bp_connect_restore_s, read["bp connect"] = warm_server_restore(
        bp_store, work / "spark-connect", memory
    )
    if set(read.values()) != {keys}:
        print(f"size {name}: refusing to print figures: restores read {read} keys, not {keys}")
        return None
    print(
        f"[{name}] restores: "
        + ", ".join(f"{ENGINES[e]} {r.restore_s:.1f} s" for e, r in run.engines.items())
        + f", batchpoint as a Connect client {run.bp_connect_restore_s:.1f} s",
        file=sys.stderr,
    )
    return run


# -- the tables -------------------------------------------------------------------------

#: measure -> (heading, how its figure reads, value of an EngineRun).
MEASURES: dict[str, tuple[str, str, Any]] = {
    "first_s": ("first epoch s", "{:.2f}", lambda r: r.first_s),
    "warm_s": ("warm epoch s", "{:.2f}", lambda r: r.warm_s),
    "warm_bytes": ("bytes/warm epoch", "{:,.0f}", lambda r: r.warm_bytes),
    "jvm_peak": ("JVM peak MB", "{:,.0f}", lambda r: r.jvm_peak / MB),
    "tree_peak": ("tree peak MB", "{:,.0f}", lambda r: r.tree_peak / MB),
    "restore_s": ("restore s", "{:.1f}", lambda r: r.restore_s),
}


def table(header: list[str], rows: list[list[str]]) -> None:
    """Left-aligned first column, the figures right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first, *rest = zip(cells, widths, strict=True)
        return "  ".join([first[0].ljust(first[1]), *(c.rjust(w) for c, w in rest)])

    print(line(header))
    print("-" * len(line(header)))
    for r in rows:
        print(line(r))


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def headings() -> list[str]:
    return [heading for heading, _, _ in MEASURES.values()]


def print_size(run: SizeRun) -> None:
    size = run.size
    print(
        f"\nSize {run.name}: {size.keys:,} keys, {size.events:,} events an epoch in "
        f"{size.files} files; spark.driver.memory {run.memory} for every engine. All three "
        "final states equal the independent computation."
    )
    rows = [
        [
            ENGINES[engine],
            *(fmt.format(get(r)) for _, fmt, get in MEASURES.values()),
            ", ".join(f"{e['s']:.1f}" for e in r.epochs),
        ]
        for engine, r in run.engines.items()
    ]
    table(["engine", *headings(), "epochs s"], rows)
    print(
        f"batchpoint restore as a Connect client of a warm server: {run.bp_connect_restore_s:.1f} s"
    )
    bp = run.engines["bp"]
    ratios = [
        [
            f"bp/{other}",
            *(ratio(get(bp), get(run.engines[other])) for _, _, get in MEASURES.values()),
        ]
        for other in ("ss", "floor")
    ]
    table(["", *headings()], ratios)


def print_curve(runs: list[SizeRun]) -> None:
    names = [r.name for r in runs]
    print(f"\nThe curve: batchpoint's ratios by size ({', '.join(names)})")
    rows = [
        [
            f"{heading}, bp/{other}",
            *(ratio(get(r.engines["bp"]), get(r.engines[other])) for r in runs),
        ]
        for heading, _, get in MEASURES.values()
        for other in ("ss", "floor")
    ]
    table(["measure", *names], rows)
    if len(runs) < 2:
        print("\nGrowth: one size only, nothing to grow from")
        return
    steps = list(itertools.pairwise(runs))
    print("\nGrowth: each figure at a size over the same figure at the size before")
    rows = [
        ["keys", *(ratio(b.size.keys, a.size.keys) for a, b in steps)],
        ["events an epoch", *(ratio(b.size.events, a.size.events) for a, b in steps)],
    ]
    rows += [
        [
            f"{engine_name}: {heading}",
            *(ratio(get(b.engines[engine]), get(a.engines[engine])) for a, b in steps),
        ]
        for engine, engine_name in ENGINES.items()
        for heading, _, get in MEASURES.values()
    ]
    rows.append(
        [
            "batchpoint: restore s, Connect client",
            *(ratio(b.bp_connect_restore_s, a.bp_connect_restore_s) for a, b in steps),
        ]
    )
    table(["figure", *(f"{a.name}->{b.name}" for a, b in steps)], rows)


def as_json(runs: list[SizeRun], epochs: int) -> str:
    return json.dumps(
        {
            "bench": "cost_curve",
            "epochs": epochs,
            "sizes": {
                r.name: {
                    "keys": r.size.keys,
                    "events_per_epoch": r.size.events,
                    "driver_memory": r.memory,
                    "bp_connect_restore_s": round(r.bp_connect_restore_s, 2),
                    "engines": {
                        ENGINES[e]: {k: round(get(er), 3) for k, (_, _, get) in MEASURES.items()}
                        | {"epochs": er.epochs}
                        for e, er in r.engines.items()
                    },
                }
                for r in runs
            },
        },
        default=lambda v: round(v, 3) if isinstance(v, float) else v,
    )


def memory_note(memory: dict[str, str], given: bool) -> str:
    """The heap each size runs with and why, and a warning where the machine is short."""
    total = psutil.virtual_memory().total
    chosen = ", ".join(f"{n} {m}" for n, m in memory.items())
    if given:
        why = "as --driver-memory asked"
    elif "xlarge" in memory:
        why = (
            "raised to 8g at xlarge: a guess that 10M keys outgrow 4g, not measured; "
            "--driver-memory to change"
        )
    else:
        why = "--driver-memory to change"
    note = (
        f"spark.driver.memory, the same for every engine: {chosen} ({why}); "
        f"this machine has {total / 2**30:.0f} GiB"
    )
    # Beside the heap: RocksDB's native memory, Python workers, the page cache for spills.
    short = [n for n, m in memory.items() if 2 * heap_bytes(m) > total]
    if short:
        note += f"\nwarning: less memory than twice the heap for {', '.join(short)}: may not fit"
    return note


def heap_bytes(setting: str) -> int:
    """Bytes of a JVM size such as 4g, 512m or 1024k (a bare number: bytes)."""
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    last = setting[-1].lower()
    return int(setting[:-1]) * units[last] if last in units else int(setting)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=CURVE, default=list(CURVE),
                        help="sizes, in the order given (default: all four)")  # fmt: skip
    parser.add_argument(
        "--epochs", type=int, default=6, help="epochs a size (default: 6; see the module)"
    )
    parser.add_argument("--driver-memory", help="spark.driver.memory of every engine and "
                        "size (default: 4g; 8g at xlarge)")  # fmt: skip
    parser.add_argument("--sample", type=float, default=0.2,
                        help="seconds between memory samples (default: 0.2)")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--engine-child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.engine_child:
        engine, size_name, work, epochs, memory = args.engine_child
        return engine_child(engine, size_name, Path(work), int(epochs), memory)
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (the first one warms up)")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    memory = {n: args.driver_memory or MEMORY[n] for n in args.sizes}
    print(memory_note(memory, bool(args.driver_memory)))
    root = Path(tempfile.mkdtemp(prefix="bench-cost-curve-"))
    runs: list[SizeRun] = []
    try:
        for name in args.sizes:
            run = run_size(name, args.epochs, memory[name], root / name, args.sample)
            if run is None:
                return 1
            print_size(run)
            runs.append(run)
            if not args.keep:  # the next size's disk
                shutil.rmtree(root / name, ignore_errors=True)
        print_curve(runs)
        print(as_json(runs, args.epochs))
        return 0
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
