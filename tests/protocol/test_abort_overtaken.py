"""An abort (a cleanup task, an expiry) that a finalize overtakes between the abort's two
reads: the finalize's outcome holds and is what the abort returns."""

from __future__ import annotations

from tests.support.hooks import HookStore, once

from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointStatus
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.storage.base import ObjectStore
from support.protocol_steps import ack_all, coordinator


def test_an_abort_overtaken_by_a_finalize_returns_the_completed_outcome(
    store: ObjectStore,
) -> None:
    c = coordinator(store)
    cid = c.trigger({"src": {"p0": 1}}).checkpoint_id
    ack_all(c, cid)
    finalized = []

    def finalize() -> None:
        finalized.append(c.try_finalize(cid))

    # The abort found no outcome; the finalize completes and settles the pending record
    # before the abort reads it.
    hook = once(finalize, lambda op, key: op == "get" and key == c.layout.active(cid))
    aborter = CheckpointCoordinator(HookStore(store, hook), c.pipeline, c.config, c.clock)

    outcome = aborter.abort(cid, CheckpointFailureReason.DECLINED, "cleanup")

    assert hook.fired and finalized[0] is not None
    assert finalized[0].status is CheckpointStatus.COMPLETED
    assert outcome.status is CheckpointStatus.COMPLETED
    assert c.head.get().checkpoint_id == cid
