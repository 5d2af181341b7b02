"""The two engines of bench_peer.py and what they share: the local Spark session every
engine runs on (``local[2]``, 2 shuffle partitions, the RocksDB state store with
changelog checkpointing), the keyed running aggregate as a batchpoint pipeline run
through ``LocalEpochRunner`` (BatchpointEngine), the same aggregate in Structured
Streaming with ``availableNow`` (StreamingEngine), and how each one's final state is
read back. A sibling of the scripts (their folder is on sys.path), imported by
bench_peer, peer_restore and curve_engines (bench_cost_curve's engines)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa

import checkout  # noqa: F401  (the checkout's demo/ and devstack/)
from peer_data import EVENTS
from spark_jobs import JobCount, jobs_since
from storage_requests import EpochRequests, epoch_requests

TOTALS = pa.schema(
    [pa.field("key", pa.string()), pa.field("count", pa.int64()), pa.field("sum", pa.int64())]
)
TOTALS_DDL = "key string, count bigint, sum bigint"
SOURCE_ROOT = "sources/events"
PIPELINE = "peer"


# -- the two engines ------------------------------------------------------------------------


def spark_session(driver_memory: str | None = None):
    """The session every engine runs on; `driver_memory` (the one heap of `local[2]`'s
    driver and executors) only takes effect in a process whose JVM is not up yet."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if driver_memory:
        builder = builder.config("spark.driver.memory", driver_memory)
    return (
        builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .getOrCreate()
    )


def merge_totals(events: Any, state: Any | None) -> Any:
    """Count and sum per key of `events` merged into `state` (None: no state yet) in
    one aggregation: each event is a row of count 1 beside the state's rows, so one
    shuffle by key merges both, as Structured Streaming's stateful aggregate does.
    Aggregating the events first and the union after runs a second shuffle: at small
    sizes each stage's fixed cost is most of an epoch (docs/benchmarks.md)."""
    from pyspark.sql import functions as F

    rows = events.select(
        "key", F.lit(1).cast("bigint").alias("count"), F.col("amount").cast("bigint").alias("sum")
    )
    merged = rows if state is None else state.unionByName(rows)
    return merged.groupBy("key").agg(
        F.sum("count").cast("bigint").alias("count"), F.sum("sum").cast("bigint").alias("sum")
    )


def checkpoint_config():
    """As deployed: a state under the changelog floor is written in full."""
    from batchpoint.protocol.config import DEPLOYED_CHANGELOG_MIN_BYTES, CheckpointConfig

    return CheckpointConfig(changelog_min_bytes=DEPLOYED_CHANGELOG_MIN_BYTES)


def build_pipeline():
    from batchpoint.runtime.api import OperatorContext, Pipeline

    pipeline = Pipeline(PIPELINE, max_parallelism=128)
    pipeline.source("events", root=SOURCE_ROOT, format="parquet", schema=EVENTS, key=["key"])

    @pipeline.operator(inputs=["events"], key=["key"], states={"totals": TOTALS}, parallelism=2)
    def totals(ctx: OperatorContext):
        ctx.set_state("totals", merge_totals(ctx.input(), ctx.state("totals")))
        return None

    return pipeline


class BatchpointEngine:
    def __init__(self, spark: Any, root: Path) -> None:
        from batchpoint.ops.local_epoch import LocalEpochRunner
        from batchpoint.storage import StoreRef

        self.root, self.spark = root, spark
        ref = StoreRef.of(root.as_uri())
        self.runner = LocalEpochRunner(build_pipeline(), ref, spark, checkpoint_config())
        self.phases: list[dict[str, float]] = []  # where each epoch's time went
        self.full_state_bytes = 0
        self.work: list[JobCount] = []  # each epoch's Spark jobs and stages, as acked
        self.requests: list[EpochRequests] = []  # and storage requests

    def epoch(self) -> None:
        clock = time.perf_counter
        started = clock()
        pending = self.runner.driver.trigger()
        triggered = clock()
        (report,) = self.runner.run_operators(pending.checkpoint_id)
        operated = clock()
        outcome, _ = self.runner.complete(pending.checkpoint_id)
        if outcome is None or outcome.completed is None:
            raise RuntimeError(f"batchpoint epoch did not complete: {outcome}")
        # What a restore reads (all layers) beside what this epoch wrote.
        self.full_state_bytes = outcome.completed.full_state_size
        metrics = outcome.completed.acks[0].metrics  # each subtask's ack: the attempt's count
        self.work.append(JobCount(metrics.spark_jobs or 0, metrics.spark_stages or 0))
        self.requests.append(epoch_requests(outcome.completed.acks))
        self.phases.append(
            {
                "trigger": triggered - started,
                # sync: restore planned, the function run, the plan built; async: the
                # Spark jobs that compute and write the state (TaskMetrics)
                "operator sync": report.sync_ms / 1000,
                "operator async": report.async_ms / 1000,
                "operator other": (operated - triggered)
                - (report.sync_ms + report.async_ms) / 1000,
                "finalize": clock() - operated,
            }
        )

    def checkpoint_dir(self) -> Path:
        return self.root / "pipelines" / PIPELINE

    def spark_work(self, last: int) -> JobCount:
        """What the last epoch ran, as its acks recorded it (counted by job tag)."""
        return self.work[-1]


def read_batchpoint_state(spark: Any, root: Path) -> Any:
    from batchpoint.protocol.coordinator import CheckpointCoordinator
    from batchpoint.spark import keyed_io
    from batchpoint.storage import StoreRef

    ref = StoreRef.of(root.as_uri())
    coordinator = CheckpointCoordinator(ref.open(), PIPELINE)
    head = coordinator.head.get().checkpoint_id
    files = [h for h in coordinator.completed.get(head).handles if h.name == "state-totals"]
    return keyed_io.read_keyed(spark, ref, files, schema=TOTALS)


class StreamingEngine:
    def __init__(self, spark: Any, source_dir: Path, checkpoint: Path) -> None:
        self.spark, self.source_dir, self.checkpoint = spark, source_dir, checkpoint

    def epoch(self) -> None:
        from pyspark.sql import functions as F

        stream = self.spark.readStream.schema("key string, amount bigint").parquet(
            str(self.source_dir)
        )
        query = (
            stream.groupBy("key")
            .agg(F.count(F.lit(1)).alias("count"), F.sum("amount").alias("sum"))
            .writeStream.outputMode("update")
            .format("noop")
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"Structured Streaming failed: {query.exception()}")

    def checkpoint_dir(self) -> Path:
        return self.checkpoint

    def spark_work(self, last: int) -> JobCount:
        """The jobs since job `last`: the engines take turns, so the epoch's own."""
        return jobs_since(self.spark, last)


def read_streaming_state(spark: Any, checkpoint: Path) -> Any:
    from pyspark.sql import functions as F

    state = spark.read.format("statestore").load(str(checkpoint))
    return state.select(
        F.col("key.key").alias("key"),
        F.col("value.count").alias("count"),
        F.col("value.sum").alias("sum"),
    )
