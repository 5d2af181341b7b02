"""Run the deploy model checker for many seeded sequences and report every violation.

Each sequence deploys random versions of a small pipeline (operators, states, sinks
renamed with and without uid, added and dropped; columns added and dropped, nullability
both ways, widened and narrowed; re-keys, parallelism and max_parallelism; value state
on and off; migrate= functions, some that raise; sink modes and Iceberg tables), answers
each refusal as its text advises (or rolls back), and runs epochs on random input,
restores to retained checkpoints and savepoints, exports and imports, stop-with-savepoint
and resume, `repair`, and records as an older or a newer release wrote them, all through
the public engine on one Spark session; a plain-Python reference follows every state and
sink by uid (tests/support/deploy_model). After every step: states and sinks equal the
reference, each refusal was predicted by the plan made just before it and ran no Spark
job, and nothing the plan calls deployable gets stuck.

    .venv/bin/python bench/deploy_check.py --seeds 50                    # local store
    .venv/bin/python bench/deploy_check.py --seeds 5 --store s3          # SeaweedFS
    .venv/bin/python bench/deploy_check.py --start 17 --seeds 1 -v       # replay one
    .venv/bin/python bench/deploy_check.py --exclude rename-sink-uid,migrate
    .venv/bin/python bench/deploy_check.py --pinned                      # the pinned cases
    .venv/bin/python bench/deploy_check.py --scripted                    # every script

Prints one line per seed (its seconds), then sequences, deploys, epochs, restores,
refusals by kind, violations with their seed and the steps that led to them (a table,
then one JSON line); exits 1 on any violation.
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
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import checkout  # noqa: F401  (the checkout's demo/ and devstack/)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

from batchpoint.storage import StoreRef  # noqa: E402
from support.deploy_model.drive import (  # noqa: E402
    ACTIONS,
    FLAGS,
    Options,
    SequenceResult,
    run_sequence,
)
from support.deploy_model.world import CONFIG, MASTER, World  # noqa: E402

CATALOG_ENV = "BATCHPOINT_TABLE_CATALOG"


@contextmanager
def local_stores() -> Iterator[Callable[[int], StoreRef]]:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    root = Path(tempfile.mkdtemp(prefix="bp-deploy-", dir=base))
    try:
        yield lambda seed: StoreRef.of((root / f"s{seed}").as_uri())
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def s3_stores() -> Iterator[Callable[[int], StoreRef]]:
    """A prefix per seed on one SeaweedFS, and a SQLite catalog per seed for the tables
    (an S3 root needs a configured catalog)."""
    from devstack.seaweed import SeaweedServer

    data = Path(tempfile.mkdtemp(prefix="bp-deploy-weed-"))
    run = uuid.uuid4().hex[:8]

    def make(seed: int) -> StoreRef:
        os.environ[CATALOG_ENV] = f"sqlite:///{data / f'catalog-{seed}.db'}"
        return StoreRef.of(f"s3://{server.bucket}/deploy-{run}/s{seed}", server.storage_options())

    try:
        with SeaweedServer(data / "weed") as server:
            yield make
    finally:
        os.environ.pop(CATALOG_ENV, None)
        shutil.rmtree(data, ignore_errors=True)


@dataclass
class DeployTally:
    sequences: int = 0
    deploys: int = 0
    epochs: int = 0
    restores: int = 0
    refusals: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    changes: Counter[str] = field(default_factory=Counter)
    responses: Counter[str] = field(default_factory=Counter)
    rules: Counter[str] = field(default_factory=Counter)
    failed: list[dict] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def add(self, result: SequenceResult, *, verbose: bool) -> None:
        t = result.tally
        self.sequences += 1
        self.deploys += t.deploys
        self.epochs += t.epochs
        self.restores += t.restores
        self.refusals.update(t.refusals)
        self.failures.update(t.failures)
        self.changes.update(t.changes)
        self.responses.update(t.responses)
        self.seconds.append(result.seconds)
        line = (
            f"seed {result.seed}: {result.seconds:.0f}s, {t.deploys} deploys, {t.epochs} "
            f"epochs, {t.restores} restores, {sum(t.refusals.values())} refusals"
        )
        print(line + (f", VIOLATION {t.violations[0]}" if t.violations else ""), flush=True)
        if t.violations:
            self.rules.update(v.rule for v in t.violations)
            self.failed.append(
                {"seed": result.seed, "violation": str(t.violations[0]), "steps": t.log}
            )
            if not verbose:
                for step in t.log:
                    print(f"    {step}")

    @property
    def violations(self) -> int:
        return sum(self.rules.values())


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--deploys", type=int, default=8, help="deploys per sequence")
    parser.add_argument("--store", choices=["local", "s3"], default="local")
    parser.add_argument(
        "--exclude",
        default="",
        help="comma-separated change kinds, actions or switches to leave out (known "
        f"open defects); switches: {', '.join(FLAGS)}; actions: {', '.join(ACTIONS)}",
    )
    parser.add_argument(
        "--changelog-chain",
        type=int,
        default=CONFIG.changelog_chain,
        help="changelog layers per full snapshot (0: every snapshot full)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="every step of each seed")
    parser.add_argument(
        "--pinned", action="store_true", help="run the pinned shortest sequences instead"
    )
    parser.add_argument(
        "--scripted",
        action="store_true",
        help="run the scripted sequences instead (the suite runs two of them)",
    )
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.deploys < 1:
        parser.error("--seeds and --deploys must be >= 1")
    return args


def _report(args: argparse.Namespace, tally: DeployTally, seconds: float) -> None:
    last = args.start + tally.sequences - 1  # fewer than asked when interrupted
    per_seed = sum(tally.seconds) / max(1, len(tally.seconds))
    print()
    print(f"{'store':<24}{args.store}")
    print(f"{'sequences':<24}{tally.sequences} (seeds {args.start}..{last})")
    print(f"{'excluded':<24}{args.exclude or 'nothing'}")
    print(f"{'changelog chain':<24}{args.changelog_chain}")
    print(f"{'deploys':<24}{tally.deploys}")
    print("  " + ", ".join(f"{k} {n}" for k, n in sorted(tally.changes.items())))
    print(f"{'epochs completed':<24}{tally.epochs}")
    print(f"{'restores':<24}{tally.restores}")
    print(f"{'refusals':<24}{sum(tally.refusals.values())}")
    for reason, n in sorted(tally.refusals.items()):
        print(f"  {reason:<38}{n}")
    print(f"{'responses':<24}" + ", ".join(f"{k} {n}" for k, n in sorted(tally.responses.items())))
    print(f"{'expected failures':<24}{sum(tally.failures.values())}")
    for reason, n in sorted(tally.failures.items()):
        print(f"  {reason:<38}{n}")
    print(f"{'violations':<24}{tally.violations} in {len(tally.failed)} sequence(s)")
    for rule, n in tally.rules.most_common():
        print(f"  {rule:<38}{n}")
    for failed in tally.failed:
        print(f"  seed {failed['seed']}: {failed['violation'][:300]}")
    print(f"{'seconds per seed':<24}{per_seed:.1f}")
    print(f"{'seconds':<24}{seconds:.1f}")
    figures = {
        "bench": "deploy_check",
        "store": args.store,
        "sequences": tally.sequences,
        "first_seed": args.start,
        "deploys_per_sequence": args.deploys,
        "excluded": [k for k in args.exclude.split(",") if k],
        "changelog_chain": args.changelog_chain,
        "deploys": tally.deploys,
        "changes": dict(sorted(tally.changes.items())),
        "responses": dict(sorted(tally.responses.items())),
        "epochs": tally.epochs,
        "restores": tally.restores,
        "refusals": dict(sorted(tally.refusals.items())),
        "expected_failures": dict(sorted(tally.failures.items())),
        "violations": tally.violations,
        "rules": dict(tally.rules),
        "failed_seeds": [f["seed"] for f in tally.failed],
        "seconds_per_seed": round(per_seed, 1),
        "seconds": round(seconds, 1),
    }
    print(json.dumps(figures))


def _spark() -> object:
    """One session for every seed: local[2] (a failed task retried once), few shuffle
    partitions, as the test suite's."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from batchpoint.spark.session import spark_session

    return spark_session("deploy-check", MASTER, {"spark.sql.shuffle.partitions": "2"})


def run_pinned(spark: object, stores: AbstractContextManager[Callable[[int], StoreRef]]) -> int:
    """Each pinned sequence (support/deploy_model/pinned.py): held, or its violation."""
    import random

    from support.deploy_model.pinned import PINNED, run_pinned
    from support.deploy_model.sequence import Sequence

    broken = 0
    with stores as make:
        for number, case in enumerate(sorted(PINNED)):
            seq = Sequence(World(spark, make(number)), random.Random(number))
            started = time.monotonic()
            run_pinned(seq, case)
            seconds = time.monotonic() - started
            found = seq.tally.violations
            broken += bool(found)
            print(f"{case:<36}{seconds:5.0f}s  " + (f"VIOLATION {found[0]}" if found else "held"))
    print(json.dumps({"bench": "deploy_check", "pinned": len(PINNED), "broken": broken}))
    return 1 if broken else 0


def run_scripted(spark: object, stores: AbstractContextManager[Callable[[int], StoreRef]]) -> int:
    """Each scripted sequence (support/deploy_model/scripts.py): held, or its violation."""
    from support.deploy_model.changes import KINDS
    from support.deploy_model.scripts import SCRIPTS

    broken = 0
    with stores as make:
        for name, (seed, script) in SCRIPTS.items():
            options = Options(deploys=sum(step in KINDS for step in script), script=script)
            result = run_sequence(World(spark, make(seed)), seed, options)
            found = result.tally.violations
            broken += bool(found)
            print(
                f"{name:<36}{result.seconds:5.0f}s  "
                + (f"VIOLATION {found[0]}" if found else "held")
            )
    print(json.dumps({"bench": "deploy_check", "scripted": len(SCRIPTS), "broken": broken}))
    return 1 if broken else 0


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    options = Options(
        deploys=args.deploys,
        exclude=frozenset(k.strip() for k in args.exclude.split(",") if k.strip()),
        verbose=args.verbose,
    )
    if options.unknown():
        print(f"--exclude: unknown {options.unknown()}", file=sys.stderr)
        return 2
    spark = _spark()
    stores = local_stores() if args.store == "local" else s3_stores()
    if args.pinned:
        return run_pinned(spark, stores)
    if args.scripted:
        return run_scripted(spark, stores)
    started = time.monotonic()
    tally = DeployTally()
    with stores as make:
        seed = args.start
        try:
            for seed in range(args.start, args.start + args.seeds):
                ref = make(seed)
                if args.verbose:
                    print(f"seed {seed}:", flush=True)
                world = World(spark, ref, replace(CONFIG, changelog_chain=args.changelog_chain))
                tally.add(run_sequence(world, seed, options), verbose=args.verbose)
                if args.store == "local":
                    shutil.rmtree(ref.uri.removeprefix("file://"), ignore_errors=True)
        except KeyboardInterrupt:
            # a long run stopped by hand still reports the seeds it finished
            print(f"interrupted in seed {seed}: it is not counted", flush=True)
    _report(args, tally, time.monotonic() - started)
    return 1 if tally.violations else 0


if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    sys.exit(main())
