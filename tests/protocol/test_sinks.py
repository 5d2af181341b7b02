"""Sink manifests: publication is idempotent, follows the checkpoint chain, and rewinds
on restore so readers never see output of an abandoned timeline."""

from __future__ import annotations

import dataclasses
import hashlib

from batchpoint.protocol.checkpoint import CompletedCheckpoint, FileHandle, TaskMetrics
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.pipeline import OperatorKind, OperatorSpec, PipelineSpec
from batchpoint.protocol.sink_manifest import SinkMode
from batchpoint.protocol.sinks import SinkPublisher, visible_files
from batchpoint.storage.base import ObjectStore
from support.restoring import restore

SPEC = PipelineSpec(
    "p",
    (
        OperatorSpec("src", OperatorKind.SOURCE),
        OperatorSpec("out", OperatorKind.SINK, ("src",)),
    ),
)


def _complete(c: CheckpointCoordinator, store: ObjectStore, payload: bytes) -> CompletedCheckpoint:
    pending = c.trigger({"src": {}})
    key = (
        c.layout.task_data_prefix(pending.checkpoint_id, TaskId("out", 0), "a1")
        + "sink/part-0.parquet"
    )
    store.put(key, payload)
    handle = FileHandle(key, len(payload), hashlib.sha256(payload).hexdigest(), 1, name="sink")
    c.acknowledge(pending.checkpoint_id, TaskId("out", 0), "a1", [handle], TaskMetrics())
    outcome = c.try_finalize(pending.checkpoint_id)
    assert outcome is not None and outcome.completed is not None
    return outcome.completed


def test_publish_is_idempotent_and_readers_follow_the_chain(local_store: ObjectStore) -> None:
    c = CheckpointCoordinator(local_store, SPEC)
    c.register(SPEC)
    sinks = SinkPublisher(local_store, c.layout)
    first, second = _complete(c, local_store, b"one"), _complete(c, local_store, b"two")
    assert sinks.publish(first, "out", "append", ["k"])
    assert not sinks.publish(first, "out", "append", ["k"])  # a retried notify: no change
    assert sinks.publish(second, "out", "append", ["k"])
    manifest = sinks.manifest("out")
    assert manifest is not None
    assert [e.checkpoint_id for e in manifest.chain()] == [1, 2]
    assert len(visible_files(manifest)) == 2
    assert len(visible_files(manifest, as_of=1)) == 1
    snapshot = dataclasses.replace(manifest, mode=SinkMode.SNAPSHOT)
    assert [f.path for f in visible_files(snapshot)] == [second.handles[0].path]


def test_restore_rewinds_and_the_next_epoch_continues_from_the_restored_one(
    local_store: ObjectStore,
) -> None:
    c = CheckpointCoordinator(local_store, SPEC)
    c.register(SPEC)
    sinks = SinkPublisher(local_store, c.layout)
    for payload in (b"one", b"two", b"three"):
        sinks.publish(_complete(c, local_store, payload), "out", "append", ["k"])
    restore(c, 1)
    sinks.rewind("out", 1)
    manifest = sinks.manifest("out")
    assert manifest is not None and [e.checkpoint_id for e in manifest.chain()] == [1]
    fourth = _complete(c, local_store, b"four")
    assert fourth.pending.base_checkpoint_id == 1
    sinks.publish(fourth, "out", "append", ["k"])
    manifest = sinks.manifest("out")
    assert manifest is not None
    assert [e.checkpoint_id for e in manifest.chain()] == [1, 4]
    # published files of every epoch stay referenced, so GC never deletes what a
    # reader of an older published checkpoint could still open
    assert len(sinks.referenced_files(["out"])) == 4


def test_an_epoch_gc_dropped_is_never_published_again(local_store: ObjectStore) -> None:
    """A retried notify of 2 walks its chain back to 1, which the snapshot sink had and
    GC dropped (its files may be gone): 1 does not come back into the manifest."""
    c = CheckpointCoordinator(local_store, SPEC)
    c.register(SPEC)
    sinks = SinkPublisher(local_store, c.layout)
    first, second = _complete(c, local_store, b"one"), _complete(c, local_store, b"two")
    assert sinks.publish(first, "out", "snapshot", ["k"])
    assert sinks.publish(second, "out", "snapshot", ["k"])
    assert sinks.prune_unreachable("out", lambda: [2]) == [1]

    assert sinks.publish(first, "out", "snapshot", ["k"]) == "ALREADY_PUBLISHED"
    manifest = sinks.manifest("out")
    assert manifest is not None and sorted(manifest.epochs) == [2]


def test_an_ancestor_gc_dropped_with_its_child_is_never_published_again(
    local_store: ObjectStore,
) -> None:
    """Found by the 1,000-schedule run (seed 88): GC dropped 1 and 2 of the chain
    1 <- 2 <- 3, then a retried notify of 2 walked back to 1. No epoch left is built on
    1 itself, but 3 descends from it through 2: 1 was published before 3, and stays out."""
    c = CheckpointCoordinator(local_store, SPEC)
    c.register(SPEC)
    sinks = SinkPublisher(local_store, c.layout)
    target = [("out", "snapshot", ["k"])]
    ids = [_complete(c, local_store, payload).checkpoint_id for payload in (b"1", b"2", b"3")]
    for cid in ids:
        assert c.notify_checkpoint_complete(cid, target).published == [f"out@{cid}"]
    assert sinks.prune_unreachable("out", lambda: [ids[2]]) == ids[:2]

    retried = c.notify_checkpoint_complete(ids[1], target)

    assert retried.published == []
    manifest = sinks.manifest("out")
    assert manifest is not None and sorted(manifest.epochs) == [ids[2]]
