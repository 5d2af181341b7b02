"""A decision overtaken between its two reads (no outcome yet, then no pending record):
an abort (a cleanup task, an expiry) by a finalize, a finalize by an expiry, a read by
either. The outcome written meanwhile holds and is what each returns."""

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


def test_a_finalize_overtaken_by_an_abort_returns_the_aborted_outcome(
    store: ObjectStore,
) -> None:
    """The mirror race (seen in CI as test_finalize_races_expire): the finalize found no
    outcome, the expiry aborts and settles the pending record before the finalize reads
    it; the finalize said there was no such checkpoint."""
    c = coordinator(store)
    cid = c.trigger({"src": {"p0": 1}}).checkpoint_id
    ack_all(c, cid)
    aborted = []

    def expire() -> None:
        aborted.append(c.abort(cid, CheckpointFailureReason.EXPIRED, "deadline passed"))

    hook = once(expire, lambda op, key: op == "get" and key == c.layout.active(cid))
    finalizer = CheckpointCoordinator(HookStore(store, hook), c.pipeline, c.config, c.clock)

    outcome = finalizer.try_finalize(cid)

    assert hook.fired and aborted[0].status is CheckpointStatus.ABORTED
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    assert finalizer.get_checkpoint(cid).checkpoint_id == cid
    assert c.head.get().checkpoint_id != cid


def test_reading_a_checkpoint_settled_between_two_reads_finds_it(store: ObjectStore) -> None:
    c = coordinator(store)
    cid = c.trigger({"src": {"p0": 1}}).checkpoint_id
    ack_all(c, cid)
    hook = once(
        lambda: c.try_finalize(cid), lambda op, key: op == "get" and key == c.layout.active(cid)
    )
    reader = CheckpointCoordinator(HookStore(store, hook), c.pipeline, c.config, c.clock)

    assert reader.get_checkpoint(cid).checkpoint_id == cid
    assert hook.fired and c.head.get().checkpoint_id == cid
