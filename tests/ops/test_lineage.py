"""`batchpoint lineage`'s use case over the records of three chained pipelines
(`ledger` -> `reports` -> `trends`, support/fake_chain.py: real records, barriers and
published manifests, fake acks, no Spark): what a checkpoint read of its upstreams and
what they read in turn, a read a restore of the upstream took back, and the downstream
checkpoints computed from a checkpoint, proven by the timelines the manifests recorded
(unproven without one). tests/runtime/test_lineage_chain.py runs it through Spark."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from batchpoint.errors import CheckpointError, CheckpointNotFound
from batchpoint.ops.lineage import HistoryOf, downstream_lineage, upstream_lineage
from batchpoint.ops.lineage_values import (
    Derivation,
    DownstreamLineage,
    ReadState,
    UpstreamLineage,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.protocol.sink_manifest import SinkManifest
from batchpoint.storage import ObjectStore
from support.fake_chain import FakeChain


@pytest.fixture
def chain(tmp_path: Path) -> FakeChain:
    """ledger 1, reports 1 (read 1), trends 1; ledger 2 and 3, reports 2 (read 3),
    trends 2 (read reports 2); then ledger restored to 2, which took 3 back, and ledger
    4 on it. Every id is the n-th checkpoint of its pipeline."""
    chain = FakeChain.on((tmp_path / "store").as_uri())
    for driver in (chain.ledger, chain.reports, chain.trends, chain.ledger, chain.ledger):
        chain.epoch(driver)
    chain.epoch(chain.reports)
    chain.epoch(chain.trends)
    chain.restore(chain.ledger, 2)
    assert chain.epoch(chain.ledger) == 4
    return chain


def histories(store: ObjectStore) -> HistoryOf:
    def history_of(name: str) -> PipelineHistory:
        return CheckpointCoordinator(store, name, CheckpointConfig())

    return history_of


def reads(lineage: UpstreamLineage) -> list[tuple[Any, ...]]:
    return [
        (
            *(r.depth, r.reader, r.reader_checkpoint, r.source, r.pipeline, r.sink),
            *(r.read_from, r.read_upto, r.state, r.retained),
        )
        for r in lineage.reads
    ]


def derivations(lineage: DownstreamLineage) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """(depth, pipeline, checkpoint, source) -> (derivation, via)."""
    return {
        (r.depth, r.pipeline, r.checkpoint_id, r.source): (r.derivation, r.via)
        for r in lineage.reads
    }


def test_upstream_reads_go_back_through_each_pipeline_read(chain: FakeChain) -> None:
    store = chain.ledger.store
    found = upstream_lineage(store, histories(store), "trends")  # the head: 2
    assert found.checkpoint_id == 2
    assert reads(found) == [
        (1, "trends", 2, "regions", "reports", "by_region", 1, 2, ReadState.KEPT, True),
        # what reports 2 read: ledger after 1 up to 3, which the restore to 2 took back
        (2, "reports", 2, "balances", "ledger", "totals_out", 1, 3, ReadState.TAKEN_BACK, True),
        (2, "reports", 2, "moves", "ledger", "movements", 1, 3, ReadState.TAKEN_BACK, True),
    ]
    taken = found.reads[1]
    assert "'ledger' was restored to checkpoint 2" in taken.problem
    assert "`batchpoint restore --pipeline reports`" in taken.problem
    assert taken.state_text() == "taken back by a restore of 'ledger'"
    assert found.reads[0].range_text() == "after checkpoint 1 up to checkpoint 2"

    first = upstream_lineage(store, histories(store), "reports", 1)
    assert [(r.read_from, r.read_upto, r.state) for r in first.reads] == [
        (None, 1, ReadState.KEPT),
        (None, 1, ReadState.KEPT),
    ]
    assert first.reads[0].range_text() == "from the start up to checkpoint 1"
    # ledger reads no pipeline: nothing upstream
    assert upstream_lineage(store, histories(store), "ledger").reads == ()


def test_an_upstream_checkpoint_no_longer_retained_is_said_so(chain: FakeChain) -> None:
    store = chain.ledger.store
    # reports 3, after following the restore to reports 1, reads ledger 4
    chain.restore(chain.reports, 1)
    assert chain.epoch(chain.reports) == 3
    config = CheckpointConfig(skip_idle=False, num_retained=1)
    chain.ledger = type(chain.ledger)(chain.ledger.pipeline, chain.ledger.store_ref, config)
    chain.epoch(chain.ledger)  # ledger 5: retention of one drops 4
    found = upstream_lineage(store, histories(store), "reports", 3)
    assert [(r.read_from, r.read_upto, r.state, r.retained) for r in found.reads] == [
        (1, 4, ReadState.KEPT, False),
        (1, 4, ReadState.KEPT, False),
    ]
    assert found.reads[0].state_text().endswith("no longer retained by 'ledger'")


def test_downstream_checkpoints_computed_from_one_by_its_timeline(chain: FakeChain) -> None:
    store = chain.ledger.store
    two = downstream_lineage(store, histories(store), "ledger", 2)
    assert two.completed and two.notes == ()
    assert derivations(two) == {
        (1, "reports", 1, "balances"): (Derivation.NOT_COMPUTED, None),  # read only 1
        (1, "reports", 1, "moves"): (Derivation.NOT_COMPUTED, None),
        # read 3, which was built on 2 (3 was taken back later: reports 2 still read 2)
        (1, "reports", 2, "balances"): (Derivation.COMPUTED, 2),
        (1, "reports", 2, "moves"): (Derivation.COMPUTED, 2),
        (2, "trends", 1, "regions"): (Derivation.NOT_COMPUTED, None),
        (2, "trends", 2, "regions"): (Derivation.COMPUTED, 2),  # via reports 2
    }

    # reports follows the restore: reports 3 reads ledger 4, whose timeline passes
    # through 2 but not through 3 (taken back)
    chain.restore(chain.reports, 1)
    chain.epoch(chain.reports)
    chain.restore(chain.trends, 1)
    chain.epoch(chain.trends)
    two = derivations(downstream_lineage(store, histories(store), "ledger", 2))
    assert two[(1, "reports", 3, "balances")] == (Derivation.COMPUTED, 2)
    assert two[(2, "trends", 3, "regions")] == (Derivation.COMPUTED, 3)
    three = downstream_lineage(store, histories(store), "ledger", 3)
    got = derivations(three)
    assert got[(1, "reports", 2, "moves")] == (Derivation.COMPUTED, 3)
    assert got[(1, "reports", 3, "moves")] == (Derivation.NOT_COMPUTED, None)
    assert got[(2, "trends", 2, "regions")] == (Derivation.COMPUTED, 2)
    assert got[(2, "trends", 3, "regions")] == (Derivation.NOT_COMPUTED, None)
    why = next(r.why for r in three.reads if (r.pipeline, r.checkpoint_id) == ("reports", 3))
    assert "whose timeline does not pass through 3" in why
    assert {(r.pipeline, r.checkpoint_id) for r in three.computed} == {
        ("reports", 2),
        ("trends", 2),
    }


def test_without_a_recorded_timeline_reading_past_it_is_unproven(chain: FakeChain) -> None:
    store = chain.ledger.store
    # manifests as a release before timelines wrote them
    for sink in ("totals_out", "movements"):
        key = PipelineLayout("ledger").sink_manifest(sink)
        manifest = SinkManifest.decode(key, store.get(key).data)
        epochs = {c: replace(e, timeline=()) for c, e in manifest.epochs.items()}
        store.put(key, replace(manifest, epochs=epochs).encode())
    two = derivations(downstream_lineage(store, histories(store), "ledger", 2))
    assert two[(1, "reports", 2, "balances")] == (Derivation.UNPROVEN, 2)
    # unproven may be computed: what read it is followed, and stays unproven
    assert two[(2, "trends", 2, "regions")] == (Derivation.UNPROVEN, 2)
    # reading up to the checkpoint itself needs no timeline
    three = derivations(downstream_lineage(store, histories(store), "ledger", 3))
    assert three[(1, "reports", 2, "balances")] == (Derivation.COMPUTED, 3)
    assert three[(2, "trends", 2, "regions")] == (Derivation.COMPUTED, 2)


def test_a_checkpoint_that_did_not_complete_has_nothing_downstream(chain: FakeChain) -> None:
    store = chain.ledger.store
    pending = chain.ledger.trigger()  # ledger 5, never finished
    found = downstream_lineage(store, histories(store), "ledger", pending.checkpoint_id)
    assert not found.completed and found.computed == ()
    assert "did not complete" in found.notes[0]
    assert found.reads  # the readers are listed, each not computed from it


def test_an_unknown_checkpoint_or_no_head_is_an_error_naming_it(
    chain: FakeChain, tmp_path: Path
) -> None:
    store = chain.ledger.store
    with pytest.raises(CheckpointNotFound, match="pipeline 'ledger' has no checkpoint 99"):
        upstream_lineage(store, histories(store), "ledger", 99)
    with pytest.raises(CheckpointNotFound, match="has no checkpoint 99"):
        downstream_lineage(store, histories(store), "ledger", 99)
    empty = FakeChain.on((tmp_path / "empty").as_uri())
    with pytest.raises(CheckpointError, match="'trends' has no head checkpoint"):
        upstream_lineage(empty.trends.store, histories(empty.trends.store), "trends")
