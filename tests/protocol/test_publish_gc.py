"""GC against the publish of a chain (seed 7738 of the concurrency model's Delta
schedules): the publish of a completed checkpoint also publishes the unpublished epochs
of its chain, so GC keeps their staged sink files while a retained checkpoint can still
publish them; and an epoch GC dropped never comes back, even when the epoch that
descends from it reaches it only through another dropped epoch."""

from __future__ import annotations

from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.sinks import staged_output
from batchpoint.storage.local import LocalObjectStore
from support.protocol_steps import (
    SINKS,
    ack_all,
    complete,
    coordinator,
    manifest,
    sink_epochs,
)

SNAPSHOT = [("sink", "snapshot", ["k"])]


def _finish(c: CheckpointCoordinator) -> int:
    """Completed, but its finalize died before the publish."""
    cid = c.trigger({"src": {"p0": 1}}).checkpoint_id
    ack_all(c, cid)
    outcome = c.try_finalize(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    return cid


def _sink_files_there(c: CheckpointCoordinator, cid: int) -> bool:
    files = staged_output(c.completed.get(cid), "sink")
    return bool(files) and all(c.store.exists(f.path) for f in files)


def test_gc_keeps_an_unpublished_ancestors_sink_files_a_retained_publish_needs(
    local_store: LocalObjectStore,
) -> None:
    """1 completed and its finalize died before publishing; 2 completed on it (1 left
    the retained set) and GC ran: 2's publish then publishes 1 too, from its files."""
    c = coordinator(local_store, num_retained=1)
    zero = complete(c)
    one = _finish(c)
    two = _finish(c)
    assert c.control.load().retained_ids() == [two]
    c.garbage_collector(grace=0).collect()
    assert _sink_files_there(c, one)

    report = c.notify_checkpoint_complete(two, SINKS)

    assert report.published == [f"sink@{one}", f"sink@{two}"]
    assert sink_epochs(c) == [zero, one, two]
    assert _sink_files_there(c, one) and _sink_files_there(c, two)


def test_gc_lets_go_of_an_ancestors_sink_files_once_they_are_published(
    local_store: LocalObjectStore,
) -> None:
    """The files kept for a publish are a manifest's once published, and go with the
    epoch when GC drops it."""
    c = coordinator(local_store, num_retained=1)
    one = _finish(c)
    two = _finish(c)
    c.garbage_collector(grace=0).collect()
    assert c.notify_checkpoint_complete(two, SNAPSHOT).published == ["sink@1", "sink@2"]
    three = _finish(c)
    c.notify_checkpoint_complete(three, SNAPSHOT)
    c.garbage_collector(grace=0).collect()

    assert sorted(manifest(c).epochs) == [three]
    assert not any(c.store.exists(f.path) for f in staged_output(c.completed.get(one), "sink"))


def test_a_retried_publish_never_brings_back_an_epoch_gc_dropped_two_links_back(
    local_store: LocalObjectStore,
) -> None:
    """1, 2 and 3 published in turn to a snapshot sink; GC dropped 1 and 2 (3 retained,
    built on 2). A retried finalize of 1 must not publish 1 again: 3 descends from it,
    if only through 2, which is gone too (seed 88's rule sees a direct base only)."""
    c = coordinator(local_store, num_retained=1)
    one, _, three = (complete(c, publish=False) for _ in range(3))
    for cid in (one, _, three):
        c.notify_checkpoint_complete(cid, SNAPSHOT)
    c.garbage_collector(grace=0).collect()
    assert sorted(manifest(c).epochs) == [three]

    report = c.notify_checkpoint_complete(one, SNAPSHOT)

    assert report.published == []
    assert sorted(manifest(c).epochs) == [three]
