"""A cascade restore of a chain of three pipelines through real Spark epochs: ledger ->
reports (tests/support/chained.py) -> digest (reads reports' snapshot sink). Restoring
the ledger restores each downstream pipeline to its newest checkpoint that read only
what the restores keep, and the chain then goes on exactly once; a gate that refuses a
downstream candidate refuses the whole cascade before any head moves; a crash between
two pipelines' restores leaves the rest waiting (their triggers refused) until the next
call finishes it; a downstream with no such checkpoint is named."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from batchpoint.errors import TriggerRefused
from batchpoint.ops.cascade import CascadeContext, cascade_restore
from batchpoint.ops.local_epoch import LocalEpochRunner
from batchpoint.protocol.cascade import CascadeStatus, CascadeStore
from batchpoint.protocol.checkpoint import CheckpointFailureReason
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.runtime.api import OperatorContext, Pipeline
from batchpoint.runtime.cascade_plan import MemberAction
from batchpoint.runtime.restore import RestoreCandidate
from batchpoint.runtime.restore_gate import GateResult
from batchpoint.storage import StoreRef
from support.chained import Chain

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REGIONS = "region STRING NOT NULL, total BIGINT, accounts BIGINT"


def digest_pipeline() -> Pipeline:
    p = Pipeline("digest", max_parallelism=16)
    p.source("regions", upstream="reports", sink="by_region", schema=REGIONS, key=["region"])

    @p.operator(
        inputs=["regions"], key=["scope"], states={"sums": "scope STRING NOT NULL, total BIGINT"}
    )
    def sums(ctx: OperatorContext) -> Any:
        from pyspark.sql import functions as F

        sign = F.when(F.col("_row_kind").isin("+I", "+U"), 1).otherwise(-1)
        delta = ctx.input("regions").select(
            F.lit("all").alias("scope"), (sign * F.col("total")).alias("total")
        )
        merged = (
            ctx.state("sums").unionByName(delta).groupBy("scope").agg(F.sum("total").alias("total"))
        )
        ctx.set_state("sums", merged)
        return merged

    p.sink("overall", inputs=["sums"], key=["scope"], mode="snapshot")
    return p


class Chain3:
    def __init__(self, spark: Any, store_ref: StoreRef) -> None:
        self.chain = Chain.on(spark, store_ref)
        self.digest = LocalEpochRunner(
            digest_pipeline(), store_ref, spark, CheckpointConfig(skip_idle=False),
            clock=self.chain.clock,
        )  # fmt: skip
        code = [self.chain.ledger, self.chain.reports, self.digest]
        self.code = {r.driver.pipeline.name: r.driver.pipeline for r in code}

    def round(self, events: int, settle: int = 0) -> tuple[int, int, int]:
        c = self.chain
        c.add_events(events, settle=settle)
        return c.epoch(c.ledger), c.epoch(c.reports), c.epoch(self.digest)

    def context(self, gate_for: Callable[[Pipeline], Any] = lambda _p: None) -> CascadeContext:
        return CascadeContext(
            self.code, self.chain.store_ref, CheckpointConfig(skip_idle=False), gate_for
        )

    def heads(self) -> dict[str, int | None]:
        out = {}
        for runner in (self.chain.ledger, self.chain.reports, self.digest):
            control = runner.driver.coordinator.control_record()
            out[runner.driver.pipeline.name] = None if control is None else control.head
        return out

    def assert_digest_exactly_once(self, digest_checkpoint: int) -> None:
        outcome = self.digest.driver.coordinator.get_outcome(digest_checkpoint)
        assert outcome is not None
        from batchpoint.sources.upstream import UpstreamPosition

        read = UpstreamPosition.of(outcome.pending.barrier["regions"]).checkpoint_id
        assert read is not None
        regions = self.chain.published("by_region", read, "reports")
        got = self.chain.published("overall", digest_checkpoint, "digest")
        assert got["total"].tolist() == [regions["total"].sum()]


def test_a_cascade_follows_the_restore_down_the_chain(spark: Any, tmp_path: Path) -> None:
    c3 = Chain3(spark, StoreRef.of((tmp_path / "store").as_uri()))
    up1, rep1, dig1 = c3.round(30)
    c3.round(20, settle=2)

    dry = cascade_restore(c3.context(), "ledger", up1, dry_run=True)
    assert [(m.pipeline, m.action, m.target) for m in dry.plan.members] == [
        ("ledger", MemberAction.RESTORE, up1),
        ("reports", MemberAction.RESTORE, rep1),
        ("digest", MemberAction.RESTORE, dig1),
    ]
    before = c3.heads()
    assert CascadeStore(c3.chain.store_ref.open()).active() is None
    run = cascade_restore(c3.context(), "ledger", up1)
    assert not run.refused and run.record is not None
    assert run.record.status is CascadeStatus.DONE, run.render()
    assert c3.heads() == {"ledger": up1, "reports": rep1, "digest": dig1} != before

    up3, rep3, dig3 = c3.round(15, settle=1)
    assert c3.chain.assert_exactly_once(rep3) == up3
    c3.assert_digest_exactly_once(dig3)


def test_a_refusing_gate_downstream_moves_no_head(spark: Any, tmp_path: Path) -> None:
    c3 = Chain3(spark, StoreRef.of((tmp_path / "store").as_uri()))
    up1, _, _ = c3.round(30)
    c3.round(20, settle=2)
    before = c3.heads()

    def refuse(candidate: RestoreCandidate) -> GateResult:
        return GateResult(False, f"test gate refuses {candidate.description}")

    def gate_for(pipeline: Pipeline) -> Any:
        return refuse if pipeline.name == "digest" else None

    run = cascade_restore(c3.context(gate_for), "ledger", up1)
    assert run.refused and run.record is None
    assert "pipeline 'digest'" in run.plan.refusal() and "test gate refuses" in run.plan.refusal()
    assert c3.heads() == before
    assert CascadeStore(c3.chain.store_ref.open()).active() is None


class Crash(Exception):
    pass


def test_a_crash_between_two_restores_is_finished_by_the_next_call(
    spark: Any, tmp_path: Path
) -> None:
    c3 = Chain3(spark, StoreRef.of((tmp_path / "store").as_uri()))
    up1, rep1, dig1 = c3.round(30)
    c3.round(20, settle=2)

    def crash(point: str, pipeline: str) -> None:
        if (point, pipeline) == ("after-restore", "ledger"):
            raise Crash("killed after the ledger's restore")

    with pytest.raises(Crash):
        cascade_restore(c3.context(), "ledger", up1, hook=crash)
    assert c3.heads()["ledger"] == up1 and c3.heads()["reports"] != rep1
    active = CascadeStore(c3.chain.store_ref.open()).active()
    assert active is not None and active[0].status is CascadeStatus.APPLYING
    # a scheduled reports epoch waits, with a reason of its own
    with pytest.raises(TriggerRefused) as refused:
        c3.chain.reports.driver.trigger()
    assert refused.value.reason is CheckpointFailureReason.CASCADE
    assert "batchpoint restore --pipeline ledger --cascade" in str(refused.value)

    run = cascade_restore(c3.context(), "ledger", None)  # any next call finishes it first
    assert run.resumed and run.record is not None and run.record.status is CascadeStatus.DONE
    assert c3.heads() == {"ledger": up1, "reports": rep1, "digest": dig1}
    assert CascadeStore(c3.chain.store_ref.open()).active() is None
    up3, rep3, dig3 = c3.round(10)
    assert c3.chain.assert_exactly_once(rep3) == up3
    c3.assert_digest_exactly_once(dig3)


def test_a_downstream_without_a_matching_checkpoint_is_named(spark: Any, tmp_path: Path) -> None:
    c3 = Chain3(spark, StoreRef.of((tmp_path / "store").as_uri()))
    c3.chain.add_events(30)
    up1 = c3.chain.epoch(c3.chain.ledger)
    c3.round(20)  # reports' and digest's first checkpoints read past up1
    before = c3.heads()
    run = cascade_restore(c3.context(), "ledger", up1)
    assert run.refused
    refused = {m.pipeline for m in run.plan.members if m.action is MemberAction.REFUSED}
    assert "reports" in refused, run.render()
    assert "no retained checkpoint read only what the restores keep" in run.plan.refusal()
    assert c3.heads() == before
    frame = pd.DataFrame([m.to_json() for m in run.plan.members])
    assert list(frame.pipeline) == ["ledger", "reports", "digest"]
