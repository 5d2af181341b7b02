"""A cascade restore of three chained pipelines through real Spark epochs, on each store
(ledger -> reports -> trends, tests/support/chained.py): the dry run's plan, lineage before and
after, and the chain going on exactly once afterwards, each pipeline against its pandas
reference. tests/ops/test_cascade.py covers the refusals and the crash on fake epochs."""

from __future__ import annotations

from typing import Any

import pytest

from batchpoint.ops.cascade import CascadeContext, cascade_restore
from batchpoint.ops.lineage import downstream_lineage, upstream_lineage
from batchpoint.ops.lineage_values import Derivation, ReadState
from batchpoint.protocol.cascade import CascadeStatus, CascadeStore
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.runtime.cascade_plan import MemberAction
from batchpoint.storage import StoreRef
from support.chained import Chain

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_a_cascade_follows_the_restore_down_the_chain(spark: Any, table_store: StoreRef) -> None:
    chain = Chain.on(spark, table_store, trends=True)
    trends = chain.trends
    assert trends is not None
    runners = (chain.ledger, chain.reports, trends)
    store = chain.store_ref.open()

    def history_of(name: str) -> PipelineHistory:
        return CheckpointCoordinator(store, name, CheckpointConfig())

    def upstream(pipeline: str, cid: int | None = None) -> list[tuple[Any, ...]]:
        found = upstream_lineage(store, history_of, pipeline, cid)
        return [(r.depth, r.reader_checkpoint, r.source, r.read_from, r.read_upto, r.state)
                for r in found.reads]  # fmt: skip

    def computed_from(cid: int) -> set[tuple[str, int]]:
        found = downstream_lineage(store, history_of, "ledger", cid)
        return {(r.pipeline, r.checkpoint_id) for r in found.reads
                if r.derivation is Derivation.COMPUTED}  # fmt: skip

    def heads() -> dict[str, int | None]:
        return {r.driver.pipeline.name: r.driver.coordinator.control_record().head for r in runners}

    def round(events: int, settle: int = 0) -> tuple[int, int, int]:
        chain.add_events(events, settle=settle)
        return chain.epoch(chain.ledger), chain.epoch(chain.reports), chain.epoch(trends)

    up1, rep1, tr1 = round(30)
    up2, rep2, tr2 = round(20, settle=2)
    assert chain.assert_exactly_once(rep2) == up2
    assert chain.assert_trends_exactly_once(tr2) == rep2
    assert computed_from(up2) == {("reports", rep2), ("trends", tr2)}

    code = {r.driver.pipeline.name: r.driver.pipeline for r in runners}
    context = CascadeContext(code, chain.store_ref, CheckpointConfig(skip_idle=False))
    dry = cascade_restore(context, "ledger", up1, dry_run=True)
    assert dry.plan is not None
    assert [(m.pipeline, m.action, m.target) for m in dry.plan.members] == [
        ("ledger", MemberAction.RESTORE, up1),
        ("reports", MemberAction.RESTORE, rep1),
        ("trends", MemberAction.RESTORE, tr1),
    ]
    assert heads() == {"ledger": up2, "reports": rep2, "trends": tr2}  # nothing moved

    run = cascade_restore(context, "ledger", up1)
    assert run.record is not None and run.record.status is CascadeStatus.DONE, run.render()
    assert heads() == {"ledger": up1, "reports": rep1, "trends": tr1}
    assert CascadeStore(store).active() is None
    # what reports 2 read is taken back, and lineage says so
    taken = ReadState.TAKEN_BACK
    assert upstream("reports", rep2) == [
        (1, rep2, "balances", up1, up2, taken),
        (1, rep2, "moves", up1, up2, taken),
    ]

    up3, rep3, tr3 = round(15, settle=1)
    assert chain.assert_exactly_once(rep3) == up3
    assert chain.assert_trends_exactly_once(tr3) == rep3
    kept = ReadState.KEPT
    assert upstream("trends", tr3) == [
        (1, tr3, "regions", rep1, rep3, kept),
        (2, rep3, "balances", up1, up3, kept),
        (2, rep3, "moves", up1, up3, kept),
    ]
    # up2 went into reports 2 and trends 2 only, never into what followed the cascade
    assert computed_from(up2) == {("reports", rep2), ("trends", tr2)}
    assert {("reports", rep3), ("trends", tr3)} <= computed_from(up1)
