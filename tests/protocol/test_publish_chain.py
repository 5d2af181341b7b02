"""What a notify publishes: the checkpoint and the unpublished part of its chain, per
sink. A sink added by a deploy starts at the epoch that added it: its first publish
neither records the epochs before it nor reads their records (seed 10027 of the deploy
model checker: a newer release's record among them failed every epoch after the add)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchpoint.errors import RecordError
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline import OperatorKind, simple_pipeline
from batchpoint.protocol.sinks import SinkPublisher
from batchpoint.protocol.topology import NodeTopology, Topology
from batchpoint.storage.base import ObjectStore
from batchpoint.storage.local import LocalObjectStore
from support.faulty_store import Crash, Fault, FaultyStore
from support.hooks import HookStore, once
from support.protocol_steps import NAME, SINKS, ack_all, coordinator

LATE = ("late", "append", ["k"])


def _add_late_sink(c: CheckpointCoordinator) -> None:
    c.register(simple_pipeline(NAME, [("keyed", 2), ("sink", 1), ("late", 1)]))


def _topology(*sinks: str) -> Topology:
    """What the runtime records: here, which sinks the checkpoint's code had."""
    nodes = [NodeTopology("src", "src", OperatorKind.SOURCE)]
    nodes.append(NodeTopology("keyed", "keyed", OperatorKind.OPERATOR, 2))
    nodes += [NodeTopology(s, s, OperatorKind.SINK) for s in sinks]
    return Topology(tuple(nodes))


def _finish(c: CheckpointCoordinator, *sinks: str) -> int:
    cid = c.trigger({"src": {"p0": 1}}, topology=_topology(*sinks)).checkpoint_id
    ack_all(c, cid)
    outcome = c.try_finalize(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    return cid


def complete(c: CheckpointCoordinator, publish: bool = True) -> int:
    """A checkpoint of the code before the late sink, published unless told not to."""
    cid = _finish(c, "sink")
    if publish:
        c.notify_checkpoint_complete(cid, SINKS)
    return cid


def _stamp_unknown_version(store: ObjectStore, c: CheckpointCoordinator, cid: int) -> None:
    key = c.layout.outcome(cid)
    document = json.loads(store.get(key).data)
    document["version"] = 99
    store.put(key, json.dumps(document).encode())


def _epochs(store: ObjectStore, c: CheckpointCoordinator, sink: str) -> list[int]:
    manifest = SinkPublisher(store, c.layout).manifest(sink)
    assert manifest is not None
    return sorted(manifest.epochs)


def test_a_sink_added_later_publishes_from_the_epoch_that_added_it(
    local_store: ObjectStore,
) -> None:
    c = coordinator(local_store)
    before = [complete(c), complete(c)]
    _add_late_sink(c)
    added = _finish(c, "sink", "late")
    c.notify_checkpoint_complete(added, [*SINKS, LATE])
    assert _epochs(local_store, c, "late") == [added]
    assert _epochs(local_store, c, "sink") == [*before, added]


def test_a_newer_release_record_before_the_sink_was_added_is_never_read(
    local_store: ObjectStore,
) -> None:
    c = coordinator(local_store)
    complete(c)
    newer = complete(c)
    complete(c)  # the base of the add: read, and it had no late sink
    _add_late_sink(c)
    added = _finish(c, "sink", "late")
    _stamp_unknown_version(local_store, c, newer)
    fresh = coordinator(local_store)  # reads the records again, the stamped one unread
    _add_late_sink(fresh)
    fresh.notify_checkpoint_complete(added, [*SINKS, LATE])
    assert _epochs(local_store, c, "late") == [added]


def test_an_unpublished_ancestor_a_newer_release_wrote_is_refused_not_skipped(
    local_store: ObjectStore,
) -> None:
    """Skipping it would hide every epoch before it from an append sink's readers."""
    c = coordinator(local_store)
    complete(c)
    newer = complete(c, publish=False)
    latest = complete(c, publish=False)
    _stamp_unknown_version(local_store, c, newer)
    fresh = coordinator(local_store)
    with pytest.raises(RecordError, match="version 99"):
        fresh.notify_checkpoint_complete(latest, SINKS)


@pytest.mark.parametrize("killed", [False, True])
def test_a_restore_to_a_checkpoint_never_published_leaves_readers_at_its_ancestor(
    tmp_path: Path, killed: bool
) -> None:
    """A reviewer's sequence: 1 and 2 published, 3 completed but its finalize died
    before its publish, then a restore to 3. The rewind set the sink to no epoch at
    all, so readers saw it empty until the restore's publish, and for good where the
    restore's process died before it (every roll-forward rewinds, none publishes). The
    rewind now leaves readers at 3's nearest published ancestor, as before 3 completed;
    the restore's publish (or the next checkpoint's) publishes 3 after it."""
    store = FaultyStore(LocalObjectStore(str(tmp_path)))
    c = coordinator(store)
    for publish in (True, True, False):
        cid = c.trigger({"src": {"p0": 1}}).checkpoint_id
        ack_all(c, cid)
        assert c.try_finalize(cid).status is CheckpointStatus.COMPLETED
        if publish:
            c.notify_checkpoint_complete(cid, SINKS)
    three = cid
    if killed:  # the restore's process dies after the rewind, before its publish
        store.arm(Fault.CRASH_BEFORE, op="put", key_contains="/restores/gen-")
        with pytest.raises(Crash):
            c.restorer.restore(c.restorer.choose(three).target)
        c = coordinator(store.inner)  # any actor's roll-forward: a trigger, GC, a publish
        c.finish_restore()
    else:
        c.restorer.restore(c.restorer.choose(three).target)
    manifest = SinkPublisher(c.store, c.layout).manifest("sink")
    assert manifest is not None and manifest.current == three - 1
    assert [e.checkpoint_id for e in manifest.chain()] == [1, 2]

    assert c.notify_checkpoint_complete(three, SINKS).published  # the restore's own publish
    manifest = SinkPublisher(c.store, c.layout).manifest("sink")
    assert manifest is not None and [e.checkpoint_id for e in manifest.chain()] == [1, 2, 3]


def test_a_publish_that_meets_such_a_restore_leaves_readers_at_the_ancestor_too(
    tmp_path: Path,
) -> None:
    """The reviewer of the fix above: a retried publish of 2 that a restore to 3 (never
    published) overtook re-applies the restore's rewind itself, and did so without the
    walk to the ancestor; the restore's own roll-forward then found the manifest in its
    generation already, so readers saw an empty sink."""
    store = LocalObjectStore(str(tmp_path))
    c = coordinator(store)
    _one, two, three = complete(c), complete(c), complete(c, publish=False)
    other = coordinator(store)

    def restore_meanwhile() -> None:  # its CAS lands; its roll-forward comes later
        real, other.restorer.finish = other.restorer.finish, lambda: None
        try:
            other.restorer.restore(other.restorer.choose(three).target)
        finally:
            other.restorer.finish = real

    hook = once(restore_meanwhile, lambda op, key: op == "get" and "/sinks/" in key)
    late = coordinator(HookStore(store, hook))
    assert late.notify_checkpoint_complete(two, SINKS).stale  # the retry of 2's publish
    assert hook.fired
    coordinator(store).finish_restore()
    manifest = SinkPublisher(store, c.layout).manifest("sink")
    assert manifest is not None and manifest.current == two
    assert [e.checkpoint_id for e in manifest.chain()] == [1, 2]
