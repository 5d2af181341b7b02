"""What the quality gate costs on a large state, next to a plain Spark count of it.

Generates a balances-like state of `--keys` accounts with Spark, writes it as keyed
state (keyed_io.write_keyed) into a local store (or a SeaweedFS it starts with `--s3`),
completes a checkpoint referencing those files through the coordinator, then times:

  gate       QualityGate.run on that checkpoint: integrity (metadata, every file's size
             and sha256 on executors, key-group coverage), the state's row count against
             its handles, and the demo's `payments_balances` GX suite (not-null, unique
             keys, ranges) on Spark
  integrity  the integrity checks alone (part of gate)
  count      the baseline: the same state files read by executors and counted

and prints the ratio gate / count: medians of `--repeat` rounds, after an untimed gate
run that pays what a process pays once (importing Great Expectations, starting Spark's
Python workers). Neither collects state to the driver, only metrics: the table shows how
much the driver's Python process grew at peak while they ran (a collected state would
show as about its size). Nothing is asserted about time; the table is the output.

    .venv/bin/python bench/bench_quality_gate.py                  # 1,000,000 keys, local
    .venv/bin/python bench/bench_quality_gate.py --keys 2000000 --s3 --repeat 2
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (the checkout's demo/ and devstack/)
from batchpoint.protocol.checkpoint import CheckpointStatus, FileHandle
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId
from batchpoint.quality.gate import QualityGate
from batchpoint.quality.integrity import check_checkpoint
from batchpoint.quality.spark_files import executor_file_checker
from batchpoint.quality.suites import PipelineQuality, StateQuality
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.streams import state_stream
from batchpoint.storage import StoreRef
from demo.payments import BALANCE_SCHEMA
from demo.payments_data import PAYMENTS_SCHEMA
from demo.payments_quality import SUITES_DIR
from harness import timed

PIPELINE = "bench_quality"


def bench_pipeline(parallelism: int, max_parallelism: int) -> Pipeline:
    pipeline = Pipeline(PIPELINE, max_parallelism=max_parallelism)
    pipeline.source("events", root="sources/bench", schema=PAYMENTS_SCHEMA)
    pipeline.operator(
        "balances",
        inputs=["events"],
        key=["account_id"],
        states={"balances": BALANCE_SCHEMA},
        parallelism=parallelism,
    )(lambda ctx: None)
    return pipeline


def generate_state(spark: Any, keys: int) -> Any:
    """Accounts acct-0 .. acct-<keys-1> with deterministic balances, straight in Spark."""
    from pyspark.sql import functions as F

    return spark.range(keys).select(
        F.concat(F.lit("acct-"), F.col("id").cast("string")).alias("account_id"),
        ((F.col("id") * 7919) % 200_000 - 100_000).alias("balance"),
        (F.col("id") % 50 + 1).alias("event_count"),
        (F.lit(1_735_689_600_000) + F.col("id")).alias("last_ts"),
    )


def complete_checkpoint(
    spark: Any, store_ref: StoreRef, pipeline: Pipeline, keys: int
) -> tuple[int, list[FileHandle]]:
    """Write the state through executors and complete a checkpoint that references it."""
    from batchpoint.spark import keyed_io

    coordinator = CheckpointCoordinator(store_ref.open(), PIPELINE)
    coordinator.register(pipeline.spec())
    pending = coordinator.trigger({})
    op = pipeline.operators["balances"]
    spec = keyed_io.WriteSpec(
        base_key=coordinator.layout.operator_data_prefix(pending.checkpoint_id, "balances"),
        stream=state_stream("balances"),
        attempt="bench",
        key_columns=op.key_columns,
        max_parallelism=op.max_parallelism,
        parallelism=op.parallelism,
    )
    written = keyed_io.write_keyed(generate_state(spark, keys), store_ref, spec)
    for subtask, handles in written.items():
        coordinator.acknowledge(
            pending.checkpoint_id, TaskId("balances", subtask), "bench", handles
        )
    outcome = coordinator.try_finalize(pending.checkpoint_id)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED, outcome
    return pending.checkpoint_id, [h for hs in written.values() for h in hs]


def driver_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass(frozen=True)
class Rounds:
    """The median seconds of each measure over the rounds, and how much the driver's
    Python process grew at peak while they ran."""

    gate: float
    integrity: float
    count: float
    driver_grown_mib: float


def run(store_ref: StoreRef, args: argparse.Namespace) -> int:
    from batchpoint.spark.session import spark_session

    spark = spark_session("bench-quality-gate", args.master)
    pipeline = bench_pipeline(args.parallelism, args.max_parallelism)
    say(f"writing {args.keys:,} keys as keyed state ({args.parallelism} subtasks) ...")
    seconds, (cid, handles) = timed(
        lambda: complete_checkpoint(spark, store_ref, pipeline, args.keys)
    )
    size = sum(h.size for h in handles)
    say(f"  checkpoint {cid}: {len(handles)} files, {size / 2**20:.1f} MiB, in {seconds:.1f}s")
    gate = warm_gate(spark, store_ref, pipeline, cid)
    rounds, report = measure(spark, store_ref, pipeline, gate, cid, handles, args)
    print(
        f"{'keys':>10} {'files':>6} {'MiB':>7} {'gate s':>7} {'integ. s':>8} {'count s':>8} "
        f"{'gate/count':>10} {'driver +MiB':>11}"
    )
    print(
        f"{args.keys:>10,} {len(handles):>6} {size / 2**20:>7.1f} {rounds.gate:>7.1f} "
        f"{rounds.integrity:>8.1f} {rounds.count:>8.1f} {rounds.gate / rounds.count:>10.1f} "
        f"{rounds.driver_grown_mib:>11.0f}"
    )
    print()
    print(report.render())
    return 0


def warm_gate(spark: Any, store_ref: StoreRef, pipeline: Pipeline, cid: int) -> QualityGate:
    """The demo's gate, after a first untimed run."""
    quality = PipelineQuality(
        states=(StateQuality("balances", "balances", suite="payments_balances"),),
        suites_dir=SUITES_DIR,
    )
    gate = QualityGate(pipeline, store_ref, spark=spark, quality=quality)
    # Once per process, not per gate run: importing GX, building the suite, starting
    # Spark's Python workers. A first, untimed run pays for all of it.
    seconds, _ = timed(lambda: gate.run(cid, dry_run=True))
    say(f"  warm-up gate run (imports Great Expectations): {seconds:.1f}s")
    return gate


def measure(
    spark: Any,
    store_ref: StoreRef,
    pipeline: Pipeline,
    gate: QualityGate,
    cid: int,
    handles: list[FileHandle],
    args: argparse.Namespace,
) -> tuple[Rounds, Any]:
    """`--repeat` rounds of the gate, the integrity checks alone and the count; the
    medians, and the last gate's report."""
    from batchpoint.spark import keyed_io

    integrity_only = QualityGate(
        pipeline,
        store_ref,
        spark=spark,
        quality=PipelineQuality(count_rows=False),
        checksums=True,
    )
    checker = executor_file_checker(spark, store_ref)
    rss_before = driver_rss_mib()
    rows: list[tuple[float, float, float]] = []
    for i in range(args.repeat):
        gate_s, report = timed(lambda: gate.run(cid, dry_run=True))
        assert report.chosen == cid, report.render()
        integrity_s, found = timed(
            lambda: check_checkpoint(
                integrity_only.store,
                integrity_only.layout,
                cid,
                spec=pipeline.spec(),
                file_checker=checker,
            )
        )
        assert found.passed, found.findings
        count_s, counted = timed(
            lambda: keyed_io.read_keyed(spark, store_ref, handles, schema=BALANCE_SCHEMA).count()
        )
        assert counted == args.keys, counted
        rows.append((gate_s, integrity_s, count_s))
        timings = f"gate {gate_s:.1f}s, integrity {integrity_s:.1f}s, count {count_s:.1f}s"
        say(f"  round {i + 1}: {timings}")
    grown = driver_rss_mib() - rss_before
    gate_s, integrity_s, count_s = (statistics.median(col) for col in zip(*rows, strict=True))
    return Rounds(gate_s, integrity_s, count_s, grown), report


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--max-parallelism", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3, help="rounds (median shown)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--s3", action="store_true", help="on a SeaweedFS it starts")
    parser.add_argument("--keep", action="store_true", help="keep the store's directory")
    args = parser.parse_args(argv)

    data_dir = Path(tempfile.mkdtemp(prefix="bp-bench-quality-"))
    try:
        if not args.s3:
            return run(StoreRef.of((data_dir / "store").as_uri()), args)
        from devstack.seaweed import SeaweedServer

        with SeaweedServer(data_dir / "seaweed") as server:
            uri = server.uri(f"bench-{uuid.uuid4().hex[:8]}")
            return run(StoreRef.of(uri, server.storage_options()), args)
    finally:
        if args.keep:
            say(f"kept {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
