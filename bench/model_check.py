"""Run the concurrency model for many seeded schedules and report every violation.

Each schedule runs trigger / task acks (with retries, duplicates and zombies) /
finalize + publish + table sync / settle / GC (with the table sink's expiry) / restore
(latest, by id, from a savepoint folder) / savepoint export / repair (forced or not, on a
readable or damaged control record) / late table syncs as concurrent actors against one
store and a real Iceberg catalog (SQLite), interleaved by a seeded step scheduler (every
storage and catalog call a step), with storage faults (5xx, throttling, lost replies),
crash points, catalog outages and stalls and a lagging table; then an independent
checker reads the store and the catalog (see tests/support/model.py and checker.py).
With `--table-format delta` the `sums` table is a Delta table instead (delta-rs's calls
scheduler steps, with outages, stalls, crash points, commits that fail between their
copies and their log write or land unheard, read raw by the checker:
tests/support/faulty_delta.py, delta_checker.py); `mixed` draws the format per seed.

    .venv/bin/python bench/model_check.py --schedules 1000            # local store
    .venv/bin/python bench/model_check.py --schedules 50 --store s3   # SeaweedFS
    .venv/bin/python bench/model_check.py --seed 417 --schedules 1 -v # replay one
    .venv/bin/python bench/model_check.py --seed 7000 --table-format delta  # Delta tables

Prints schedules, steps, faults by kind and violations (a table, then one JSON line);
exits 1 on any violation. A schedule is a function of its seed (the interpreter's string hashing is
pinned to PYTHONHASHSEED=0 by re-executing itself).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import checkout  # noqa: F401  (the checkout's demo/ and devstack/)

ROOT = Path(__file__).resolve().parents[1]
# The model and its checker are the test suite's own (tests/support), shared as `support`.
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

from batchpoint.storage.base import ObjectStore  # noqa: E402
from batchpoint.storage.local import LocalObjectStore  # noqa: E402
from support.model import ModelOptions, ScheduleResult, run_schedule  # noqa: E402
from support.model_setup import TABLE_FORMATS, catalog_file  # noqa: E402


@contextmanager
def local_stores() -> Iterator[Callable[[int], ObjectStore]]:
    # tmpfs when there is one: the model is about orderings, not about fsync.
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    root = Path(tempfile.mkdtemp(prefix="bp-model-", dir=base))
    try:
        yield lambda seed: LocalObjectStore(root / f"s{seed}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def s3_stores() -> Iterator[Callable[[int], ObjectStore]]:
    from batchpoint.storage.s3 import S3ObjectStore, S3Settings
    from devstack.seaweed import SeaweedServer

    data = Path(tempfile.mkdtemp(prefix="bp-model-weed-"))
    run = uuid.uuid4().hex[:8]
    try:
        with SeaweedServer(data) as server:
            # botocore's own retries (5 tries) under the fault wrapper: a real SeaweedFS
            # hiccup is retried, an injected fault is the model's and reaches the actor.
            settings = S3Settings.from_options({**server.storage_options(), "max_attempts": "5"})
            yield lambda seed: S3ObjectStore(server.bucket, f"model-{run}/s{seed}", settings)
    finally:
        shutil.rmtree(data, ignore_errors=True)


@dataclass
class ModelTally:
    """What the schedules of one run add up to."""

    steps: int = 0
    injected: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    rules: Counter[str] = field(default_factory=Counter)
    failed_seeds: list[int] = field(default_factory=list)
    formats: Counter[str] = field(default_factory=Counter)  # schedules by table format

    def add(self, seed: int, result: ScheduleResult, *, verbose: bool) -> None:
        self.steps += result.steps
        self.formats[result.table_format] += 1
        self.injected += result.injected
        self.kinds.update(result.faults)
        if verbose:
            print(
                f"seed {seed} ({result.table_format}): {result.steps} steps, "
                f"{result.injected} faults, "
                f"actors {','.join(result.actors)}, {len(result.violations)} violation(s)"
                + (f"  [{'; '.join(result.notes)}]" if result.notes else ""),
                flush=True,
            )
        for v in result.violations:
            self.rules[v.rule] += 1
            print(f"  VIOLATION {v}", flush=True)
        if result.violations:
            self.failed_seeds.append(seed)

    @property
    def violations(self) -> int:
        return sum(self.rules.values())


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--store", choices=["local", "s3"], default="local")
    parser.add_argument("--no-faults", action="store_true", help="interleavings only")
    parser.add_argument(
        "--table-format",
        choices=TABLE_FORMATS,
        default="iceberg",
        help="the sums table's format (mixed: drawn per seed; default iceberg)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per schedule")
    args = parser.parse_args(argv)
    if args.schedules < 1:
        parser.error("--schedules must be >= 1")
    return args


def _report(args: argparse.Namespace, tally: ModelTally, seconds: float) -> None:
    last = args.seed + args.schedules - 1
    print()
    print(f"{'store':<22}{args.store}")
    formats = ", ".join(f"{k} {n}" for k, n in sorted(tally.formats.items()))
    print(f"{'table format':<22}{args.table_format} ({formats})")
    print(f"{'schedules':<22}{args.schedules} (seeds {args.seed}..{last})")
    print(f"{'steps':<22}{tally.steps}")
    print(f"{'faults injected':<22}{tally.injected}")
    for kind, n in sorted(tally.kinds.items()):
        print(f"  {kind:<24}{n}")
    print(f"{'violations':<22}{tally.violations} in {len(tally.failed_seeds)} schedule(s)")
    for rule, n in tally.rules.most_common():
        print(f"  {rule:<20}{n}")
    print(f"{'seconds':<22}{seconds:.1f}")
    figures = {
        "bench": "model_check",
        "store": args.store,
        "table_format": args.table_format,
        "formats": dict(sorted(tally.formats.items())),
        "schedules": args.schedules,
        "first_seed": args.seed,
        "steps": tally.steps,
        "faults_injected": tally.injected,
        "faults": dict(sorted(tally.kinds.items())),
        "violations": tally.violations,
        "failed_schedules": tally.failed_seeds,
        "rules": dict(tally.rules),
        "seconds": round(seconds, 1),
    }
    print(json.dumps(figures))


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    options = ModelOptions(faults=not args.no_faults, table_format=args.table_format)
    stores = local_stores() if args.store == "local" else s3_stores()
    started = time.monotonic()
    tally = ModelTally()
    with stores as make:
        for seed in range(args.seed, args.seed + args.schedules):
            store = make(seed)
            result = run_schedule(seed, store, options)
            store.close()
            tally.add(seed, result, verbose=args.verbose)
            if args.store == "local" and isinstance(store, LocalObjectStore):
                shutil.rmtree(store.root, ignore_errors=True)
                catalog_file(store)[0].unlink(missing_ok=True)
    _report(args, tally, time.monotonic() - started)
    return 1 if tally.violations else 0


if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    sys.exit(main())
