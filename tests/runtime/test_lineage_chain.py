"""Lineage across three pipelines run by real Spark epochs (tests/support/chained.py:
`ledger` -> `reports` -> `trends`, the last reading reports' snapshot sink `by_region`),
on a local store, through a restore of the upstream: what each checkpoint read and what
that read in turn, the read the restore took back, and which downstream checkpoints
were computed from a ledger checkpoint before and after the chain follows the restore.
tests/ops/test_lineage.py covers the same walk on fake epochs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from batchpoint.ops.lineage import downstream_lineage, upstream_lineage
from batchpoint.ops.lineage_values import Derivation, ReadState
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.runtime.restore import restore_checkpoint
from batchpoint.storage import StoreRef
from support.chained import Chain

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_lineage_of_three_chained_pipelines_through_an_upstream_restore(
    spark: Any, tmp_path: Path
) -> None:
    chain = Chain.on(spark, StoreRef.of((tmp_path / "store").as_uri()), trends=True)
    trends = chain.trends
    assert trends is not None
    store = chain.store_ref.open()

    def history_of(name: str) -> PipelineHistory:
        return CheckpointCoordinator(store, name, CheckpointConfig())

    def upstream(pipeline: str, cid: int | None = None) -> list[tuple[Any, ...]]:
        found = upstream_lineage(store, history_of, pipeline, cid)
        return [(r.depth, r.reader_checkpoint, r.source, r.read_from, r.read_upto, r.state)
                for r in found.reads]  # fmt: skip

    def downstream(cid: int) -> dict[tuple[str, int], Derivation]:
        found = downstream_lineage(store, history_of, "ledger", cid)
        return {(r.pipeline, r.checkpoint_id): r.derivation for r in found.reads}

    chain.add_events(30)
    up1 = chain.epoch(chain.ledger)
    rep1 = chain.epoch(chain.reports)
    tr1 = chain.epoch(trends)
    chain.add_events(20, settle=2)
    up2 = chain.epoch(chain.ledger)
    rep2 = chain.epoch(chain.reports)
    tr2 = chain.epoch(trends)
    assert chain.assert_exactly_once(rep2) == up2

    # trends 2 read reports after 1 up to 2, which read ledger after 1 up to 2
    kept = ReadState.KEPT
    assert upstream("trends") == [
        (1, tr2, "regions", rep1, rep2, kept),
        (2, rep2, "balances", up1, up2, kept),
        (2, rep2, "moves", up1, up2, kept),
    ]
    assert downstream(up1) == {
        ("reports", rep1): Derivation.COMPUTED,
        ("reports", rep2): Derivation.COMPUTED,  # up1 is on the timeline of up2
        ("trends", tr1): Derivation.COMPUTED,
        ("trends", tr2): Derivation.COMPUTED,
    }

    # the ledger goes back to up1: what reports 2 read is taken back, and shown so
    restore_checkpoint(chain.ledger.driver, up1)
    taken = ReadState.TAKEN_BACK
    assert upstream("trends") == [
        (1, tr2, "regions", rep1, rep2, kept),
        (2, rep2, "balances", up1, up2, taken),
        (2, rep2, "moves", up1, up2, taken),
    ]
    # reports and trends follow: each restores its newest checkpoint that read only
    # what the upstream kept, then runs on the ledger's new timeline
    assert restore_checkpoint(chain.reports.driver).checkpoint_id == rep1
    assert restore_checkpoint(trends.driver).checkpoint_id == tr1
    chain.add_events(15, settle=1)
    up3 = chain.epoch(chain.ledger)
    rep3 = chain.epoch(chain.reports)
    tr3 = chain.epoch(trends)
    assert chain.assert_exactly_once(rep3) == up3
    assert upstream("trends", tr3) == [
        (1, tr3, "regions", rep1, rep3, kept),
        (2, rep3, "balances", up1, up3, kept),
        (2, rep3, "moves", up1, up3, kept),
    ]
    # up2 was computed into reports 2 and trends 2, never into what followed the restore
    assert downstream(up2) == {
        ("reports", rep1): Derivation.NOT_COMPUTED,
        ("reports", rep2): Derivation.COMPUTED,
        ("reports", rep3): Derivation.NOT_COMPUTED,
        ("trends", tr1): Derivation.NOT_COMPUTED,
        ("trends", tr2): Derivation.COMPUTED,
        ("trends", tr3): Derivation.NOT_COMPUTED,
    }
    assert downstream(up1)[("trends", tr3)] is Derivation.COMPUTED
