"""RecomputeSample places the source's keys in the key groups of the state's key type.

A source whose key is a wide decimal (an id exported from a database as DECIMAL(38,0))
and a state that stores it as a bigint: Spark hashes the two types differently, so a
sample drawn by the source's own type picks other keys than the state's sampled key
groups hold, and a good checkpoint was reported as keys missing from the state. The
state is checked against a pandas recomputation first, so the check's verdict is held
against a reference, not against itself."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from batchpoint.ops.local_epoch import LocalEpochRunner
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.quality.checks import RecomputeSample
from batchpoint.quality.findings import Check
from batchpoint.quality.gate import QualityGate
from batchpoint.quality.suites import PipelineQuality, StateQuality, declare_quality
from batchpoint.runtime.api import OperatorContext, Pipeline, State
from batchpoint.runtime.incremental import base_state_files
from batchpoint.storage import StoreRef
from support.clock import FakeClock

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SOURCE = "in/events"
EVENTS = pa.schema(
    [pa.field("account", pa.decimal128(38, 0), nullable=False), pa.field("amount", pa.int64())]
)
TOTALS = pa.schema(
    [
        pa.field("account", pa.int64(), nullable=False),
        pa.field("n", pa.int64()),
        pa.field("total", pa.int64()),
    ]
)
ACCOUNTS = 60


def totals_of(rows: Any) -> Any:
    """Count and sum per account, the account as the state's bigint."""
    from pyspark.sql import functions as F

    return rows.groupBy(F.col("account").cast("bigint").alias("account")).agg(
        F.count("*").alias("n"), F.sum("amount").alias("total")
    )


def fold(ctx: OperatorContext, lose: bool) -> Any:
    from pyspark.sql import functions as F

    merged = (
        ctx.state("totals")
        .unionByName(totals_of(ctx.input()))
        .groupBy("account")
        .agg(F.sum("n").alias("n"), F.sum("total").alias("total"))
    )
    if lose:  # a bug that loses the odd accounts' rows
        merged = merged.where(F.col("account") % 2 == 0)
    ctx.set_state("totals", merged)
    return merged


def build(*, lose: bool = False, source: str = "events") -> Pipeline:
    """`source`: the source's name; its uid is always 'events' (a rename keeps it)."""
    pipeline = Pipeline("wide-keys", max_parallelism=16)
    pipeline.source(source, root=SOURCE, schema=EVENTS, key=["account"], uid="events")
    pipeline.operator(
        "aggregate", inputs=[source], key=["account"], states={"totals": State(TOTALS)}
    )(lambda ctx: fold(ctx, lose))
    pipeline.sink("out", inputs=["aggregate"], key=["account"], mode="snapshot")
    check = RecomputeSample(
        "recount", source=source, recompute=totals_of, compare=("n", "total"), key_groups=8
    )
    declare_quality(
        pipeline, PipelineQuality(states=(StateQuality("aggregate", "totals", checks=(check,)),))
    )
    return pipeline


def run_epochs(runner: LocalEpochRunner, ref: StoreRef, clock: FakeClock, first: int) -> int:
    store = ref.open()
    for epoch in range(first, first + 2):
        rows = [
            {"account": 10**12 + (epoch * 7 + i) % ACCOUNTS, "amount": epoch * 100 + i}
            for i in range(ACCOUNTS)
        ]
        store.put(f"{SOURCE}/p0/e{epoch:05d}.jsonl", "\n".join(map(json.dumps, rows)).encode())
        clock.advance(60)
        result = runner.run_epoch()
        assert result.outcome is not None and result.outcome.status is CheckpointStatus.COMPLETED
    return result.outcome.checkpoint_id


def reference(ref: StoreRef, epochs: int) -> dict[int, tuple[int, int]]:
    store = ref.open()
    out: dict[int, tuple[int, int]] = {}
    for epoch in range(epochs):
        for line in store.get(f"{SOURCE}/p0/e{epoch:05d}.jsonl").data.decode().splitlines():
            row = json.loads(line)
            n, total = out.get(row["account"], (0, 0))
            out[row["account"]] = (n + 1, total + row["amount"])
    return out


def test_a_sample_of_a_wide_decimal_source_key_is_compared_as_the_state_stores_it(
    spark: Any, tmp_path: Any
) -> None:
    from batchpoint.spark import keyed_io

    ref = StoreRef.of((tmp_path / "store").as_uri())
    clock = FakeClock()
    runner = LocalEpochRunner(build(), ref, spark, CheckpointConfig(), clock=clock)
    good = run_epochs(runner, ref, clock, 0)
    head = runner.driver.coordinator.completed.get(good)
    state = keyed_io.read_keyed(spark, ref, base_state_files(head, "aggregate", "totals"))
    stored = {r["account"]: (r["n"], r["total"]) for r in state.collect()}
    assert stored == reference(ref, 2)  # the state is right

    gate = QualityGate(build(), ref, spark=spark, clock=clock)
    report = gate.evaluate(good)
    details = report.checks["aggregate/totals"]["recount"]
    assert report.passed, report.render()
    assert details["keys_compared"] > 0 and details["keys_differing"] == 0

    # and the check still finds what is wrong: the odd accounts lost from the state
    buggy = LocalEpochRunner(build(lose=True), ref, spark, CheckpointConfig(), clock=clock)
    bad = gate.evaluate(run_epochs(buggy, ref, clock, 2))
    assert {f.check for f in bad.findings} == {f"{Check.SAMPLE}:recount"}, bad.render()
    assert "is missing from the state" in bad.findings[0].problem
    differing = bad.checks["aggregate/totals"]["recount"]["keys_differing"]
    odd = sum(1 for account in reference(ref, 4) if account % 2)
    assert 0 < differing <= odd


def test_a_source_renamed_with_its_uid_kept_is_recomputed_from_its_barrier(
    spark: Any, tmp_path: Any
) -> None:
    """The check named the source by its code name and looked the checkpoint's barrier
    up by it; barriers are keyed by uid, so after a rename it read no file and every
    sampled key was "in the state but not in the source" (a reviewer's finding)."""
    ref = StoreRef.of((tmp_path / "store").as_uri())
    clock = FakeClock()
    renamed = build(source="payments_in")
    runner = LocalEpochRunner(renamed, ref, spark, CheckpointConfig(), clock=clock)
    good = run_epochs(runner, ref, clock, 0)
    report = QualityGate(renamed, ref, spark=spark, clock=clock).evaluate(good)
    details = report.checks["aggregate/totals"]["recount"]
    assert report.passed, report.render()
    assert details["keys_compared"] > 0 and details["keys_differing"] == 0
