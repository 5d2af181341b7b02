"""batchpoint beside its peer, Spark Structured Streaming, on one keyed running aggregate.

Each epoch adds F Parquet files of N events (key, amount) over K keys. batchpoint's engine
runs it without Airflow (`LocalEpochRunner`: trigger, the one operator, finalize) with
state count and sum per key; Structured Streaming runs the same aggregate with
``trigger(availableNow=True)``, the RocksDB state store provider (changelog checkpointing
on, as Spark recommends) and a local checkpoint location. Both read the same files, on
one local Spark session (``local[2]``, 2 shuffle partitions, batchpoint parallelism 2),
alternating epoch by epoch. Per epoch it prints the wall time of each and the bytes and
files each one's checkpointing added; then the time to load the whole state again in a
fresh process (a new JVM each: batchpoint reads the head's state, Structured Streaming
reads its state store through the ``statestore`` data source). batchpoint's restore is
also timed the way its default runtime (connect mode) runs one: a fresh Python process
that is a Spark Connect client of a warm local server (started, and warmed by one
untimed restore, before the timed one; its JVM start is not counted, as a deployment's
server is already up).

Last, batchpoint's storage requests per epoch by kind and per GB written (its acks). Before
any figure is printed both final states are compared with an independent computation (numpy
over every generated event); if either differs the script says so and exits 1 without figures.

    .venv/bin/python bench/bench_peer.py                 # small: 10k keys, 100k events, 4 files
    .venv/bin/python bench/bench_peer.py --size medium   # 1M keys, 2M events, 8 files
    .venv/bin/python bench/bench_peer.py --size sparse   # 1M keys, 1% touched per epoch
    .venv/bin/python bench/bench_peer.py --epochs 5 --keep

Targets (issue 11): warm epoch wall at most 0.5x the peer's; checkpoint bytes per epoch at
most the peer's (and at most 0.1x the state when 1% of keys change); restore at most 0.5x.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (the checkout's demo/ and devstack/)
from peer_data import SIZES, Size, expected_totals, write_epoch
from peer_engines import (
    SOURCE_ROOT,
    BatchpointEngine,
    StreamingEngine,
    read_batchpoint_state,
    read_streaming_state,
    spark_session,
)
from peer_restore import fresh_restore, restore_child, warm_server_restore
from spark_jobs import jobs, last_job, median_work
from storage_requests import print_requests

# -- measuring ------------------------------------------------------------------------------


def tree(path: Path) -> dict[str, int]:
    found = path.rglob("*") if path.exists() else ()
    return {str(p): p.stat().st_size for p in found if p.is_file()}


def added(before: dict[str, int], after: dict[str, int]) -> tuple[int, int]:
    new = {p: s for p, s in after.items() if before.get(p) != s}
    return sum(new.values()), len(new)


def timed(run: Any) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def as_dict(df: Any) -> dict[str, tuple[int, int]]:
    return {r["key"]: (int(r["count"]), int(r["sum"])) for r in df.collect()}


def differences(name: str, got: dict, expected: dict) -> list[str]:
    if got == expected:
        return []
    missing = len(expected.keys() - got.keys())
    extra = len(got.keys() - expected.keys())
    wrong = sum(1 for k in expected.keys() & got.keys() if got[k] != expected[k])
    return [f"{name}: {missing} keys missing, {extra} extra, {wrong} with other totals"]


def run(size_name: str, epochs: int, keep: bool, driver_memory: str | None = None) -> int:
    size = SIZES[size_name]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    work = Path(tempfile.mkdtemp(prefix="bench-peer-"))
    root, ss_checkpoint = work / "store", work / "ss-checkpoint"
    source_dir = root / SOURCE_ROOT / "p0"
    source_dir.mkdir(parents=True)
    spark = spark_session(driver_memory)
    spark.sparkContext.setLogLevel("ERROR")
    bp = BatchpointEngine(spark, root)
    ss = StreamingEngine(spark, source_dir, ss_checkpoint)
    engines: dict[str, Any] = {"batchpoint": bp, "structured streaming": ss}
    print(f"size {size_name}: {size.keys:,} keys, {size.events:,} events an epoch in "
          f"{size.files} files, {epochs} epochs; work dir {work}", file=sys.stderr)  # fmt: skip
    try:
        rows = [run_epoch(engines, source_dir, size, epoch) for epoch in range(epochs)]
        expected = expected_totals(size, epochs)
        problems = differences("batchpoint", as_dict(read_batchpoint_state(spark, root)), expected)
        problems += differences(
            "structured streaming", as_dict(read_streaming_state(spark, ss_checkpoint)), expected
        )
        spark.stop()
        if problems:
            print("refusing to print figures: a result differs from the independent computation:")
            for line in problems:
                print(f"  {line}")
            return 1
        restores = time_restores(root, ss_checkpoint, work, len(expected), driver_memory)
        if restores is None:
            return 1
        report(size_name, size, rows, expected, restores, bp.full_state_bytes)
        print_phases(bp.phases[1:])
        print_requests(bp.requests, bp.requests[1:])
        return 0
    finally:
        if keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def run_epoch(engines: dict[str, Any], source_dir: Path, size: Size, epoch: int) -> dict[str, Any]:
    """One epoch's files, then each engine's epoch: its seconds, and the bytes and files
    its checkpointing added, the Spark jobs and stages it ran (a progress line on stderr)."""
    write_epoch(source_dir, size, epoch)
    row: dict[str, Any] = {"epoch": epoch}
    for name, engine in engines.items():
        before, last = tree(engine.checkpoint_dir()), last_job(engine.spark)
        row[f"{name} s"] = timed(engine.epoch)
        row[f"{name} jobs"], row[f"{name} stages"] = engine.spark_work(last)
        row[f"{name} bytes"], row[f"{name} files"] = added(before, tree(engine.checkpoint_dir()))
    print(f"epoch {epoch}: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else
          f"{k} {v}" for k, v in row.items() if k != "epoch"), file=sys.stderr)  # fmt: skip
    return row


def time_restores(
    root: Path, ss_checkpoint: Path, work: Path, keys: int, driver_memory: str | None = None
) -> dict[str, float] | None:
    """Each engine's restore in a fresh process, and batchpoint's as a Connect client of
    a warm server; None (said on stdout) unless each read all `keys` keys."""
    bp_restore, bp_rows = fresh_restore("bp", root, driver_memory=driver_memory)
    ss_restore, ss_rows = fresh_restore("ss", ss_checkpoint, driver_memory=driver_memory)
    bp_warm, warm_rows = warm_server_restore(root, work / "spark-connect", driver_memory)
    if {bp_rows, ss_rows, warm_rows} != {keys}:
        print(f"refusing to print figures: restores read {bp_rows}, {ss_rows} and "
              f"{warm_rows} keys, expected {keys}")  # fmt: skip
        return None
    return {"batchpoint": bp_restore, "batchpoint_connect": bp_warm, "ss": ss_restore}


def print_phases(phases: list[dict[str, float]]) -> None:
    """Where batchpoint's warm epochs spent their time, as medians by phase."""
    print("batchpoint warm epochs, median seconds by phase: " + ", ".join(
        f"{k} {statistics.median(p[k] for p in phases):.2f}" for k in phases[0]
    ))  # fmt: skip


def print_epochs(rows: list[dict[str, Any]]) -> None:
    bp, ss = "batchpoint", "structured streaming"
    header = f"{'epoch':>5} {'bp s':>8} {'ss s':>8} {'bp/ss':>6} {'bp bytes':>12} {'ss bytes':>12} {'bp files':>8} {'ss files':>8} {'bp jobs/stg':>11} {'ss jobs/stg':>11}"  # noqa: E501
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['epoch']:>5} {r[f'{bp} s']:>8.2f} {r[f'{ss} s']:>8.2f} "
            f"{r[f'{bp} s'] / r[f'{ss} s']:>6.2f} {r[f'{bp} bytes']:>12,} {r[f'{ss} bytes']:>12,} "
            f"{r[f'{bp} files']:>8} {r[f'{ss} files']:>8} {jobs(r, bp):>11} {jobs(r, ss):>11}"
        )


def report(
    size_name: str,
    size: Size,
    rows: list[dict[str, Any]],
    expected: dict[str, tuple[int, int]],
    restores: dict[str, float],
    full_state: int,
) -> None:
    bp, ss = "batchpoint", "structured streaming"
    print(f"\nKeyed running aggregate, size {size_name}: both equal the independent computation "
          f"({len(expected):,} keys)")  # fmt: skip
    print_epochs(rows)
    warm = rows[1:] or rows  # epoch 0 pays for starting
    wall_ratio = statistics.median(r[f"{bp} s"] for r in warm) / statistics.median(
        r[f"{ss} s"] for r in warm
    )
    bytes_ratio = statistics.median(r[f"{bp} bytes"] for r in warm) / max(
        1, statistics.median(r[f"{ss} bytes"] for r in warm)
    )
    state_bytes = rows[-1][f"{bp} bytes"]
    share = statistics.median(r[f"{bp} bytes"] for r in warm) / max(1, full_state)
    print(f"warm epochs (median), bp/ss: wall {wall_ratio:.2f}x (target <= 0.5), "
          f"checkpoint bytes {bytes_ratio:.2f}x (target <= 1)")  # fmt: skip
    (bp_jobs, bp_stages), (ss_jobs, ss_stages) = median_work(warm, bp), median_work(warm, ss)
    print(f"Spark jobs/stages per warm epoch (median): bp {bp_jobs:g}/{bp_stages:g} (its acks), "
          f"ss {ss_jobs:g}/{ss_stages:g} (every job of its epoch)")  # fmt: skip
    print(f"batchpoint bytes added per warm epoch / full state ({full_state:,} bytes): "
          f"{share:.3f}x (target <= 0.1 when 1% of keys change)")  # fmt: skip
    bp_restore, bp_warm, ss_restore = (
        restores[k] for k in ("batchpoint", "batchpoint_connect", "ss")
    )
    print(f"restore in a fresh process: bp {bp_restore:.1f} s, ss {ss_restore:.1f} s, "
          f"{bp_restore / ss_restore:.2f}x (target <= 0.5); bp as a Connect client of a warm "
          f"server {bp_warm:.1f} s, {bp_warm / ss_restore:.2f}x")  # fmt: skip
    print(
        json.dumps(
            {
                "bench": "peer",
                "size": size_name,
                "keys": size.keys,
                "events_per_epoch": size.events,
                "files_per_epoch": size.files,
                "epochs": rows,
                "warm_wall_ratio": round(wall_ratio, 3),
                "warm_bytes_ratio": round(bytes_ratio, 3),
                "last_epoch_bp_bytes": state_bytes,
                "bp_full_state_bytes": full_state,
                "bp_added_to_full_ratio": round(share, 4),
                "restore_s": {k: round(v, 2) for k, v in restores.items()},
                "restore_ratio": round(bp_restore / ss_restore, 3),
                "restore_ratio_connect": round(bp_warm / ss_restore, 3),
                "warm_spark_jobs_stages": {n: median_work(warm, n) for n in (bp, ss)},
            },
            default=lambda v: round(v, 3) if isinstance(v, float) else v,
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--epochs", type=int, default=4, help="epochs (default: 4)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument(
        "--driver-memory", help="spark.driver.memory of every session (default: Spark's)"
    )
    parser.add_argument(
        "--restore-child", nargs="+", metavar="ENGINE PATH [REMOTE]", help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.restore_child:
        return restore_child(*args.restore_child, driver_memory=args.driver_memory)
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (the first one warms up)")
    return run(args.size, args.epochs, args.keep, args.driver_memory)


if __name__ == "__main__":
    raise SystemExit(main())
