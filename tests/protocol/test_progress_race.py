"""A reviewer's finding (invariants 1, 8): `progress` read the outcome, then the pending
record; another actor that settled the checkpoint between the two reads left both empty,
and the ack sensor failed a COMPLETED checkpoint as "does not exist". A real local store,
with the other actor run at the exact moment between the two reads."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from batchpoint.protocol.checkpoint import CheckpointStatus, FileHandle
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.storage.local import LocalObjectStore


class InterleavingStore(LocalObjectStore):
    """The real local store; runs `hook` once, right before a read of `key`."""

    hook: tuple[str, Callable[[], Any]] | None = None

    def get(self, key: str, *args: Any, **kwargs: Any) -> Any:
        hook = self.hook
        if hook is not None and key == hook[0]:
            self.hook = None
            hook[1]()
        return super().get(key, *args, **kwargs)


def ack(c: CheckpointCoordinator, checkpoint_id: int, task: TaskId) -> None:
    key = c.layout.task_data_prefix(checkpoint_id, task, "a1") + "f"
    c.store.put(key, b"x")
    c.acknowledge(checkpoint_id, task, "a1", [FileHandle(key, 1, hashlib.sha256(b"x").hexdigest())])


def test_progress_of_a_checkpoint_settled_between_its_reads_is_its_outcome(tmp_path: Path):
    root = tmp_path / "store"
    store = InterleavingStore(root)
    reader = CheckpointCoordinator(store, "p")
    reader.register(simple_pipeline("p", [("op", 2)]))
    other = CheckpointCoordinator(LocalObjectStore(root), "p")  # the next run's trigger
    pending = other.trigger({})
    cid = pending.checkpoint_id
    for subtask in (0, 1):
        ack(other, cid, TaskId("op", subtask))
    # after the reader found no outcome, before it reads the pending record
    store.hook = (reader.layout.active(cid), other.settle)
    progress = reader.progress(cid)
    assert store.hook is None, "the other actor did not run between the reads"
    assert progress.status is CheckpointStatus.COMPLETED
    assert progress.outcome is not None and progress.outcome.completed is not None
    assert progress.missing == () and len(progress.acknowledged) == 2
    assert progress.deadline == other.get_checkpoint(cid).deadline  # as stored


def test_progress_of_a_checkpoint_that_does_not_exist_says_so(tmp_path: Path):
    c = CheckpointCoordinator(LocalObjectStore(tmp_path / "store"), "p")
    c.register(simple_pipeline("p", [("op", 2)]))
    progress = c.progress(42)
    assert (progress.status, progress.outcome, progress.deadline) == (None, None, None)


def test_progress_carries_the_pending_checkpoints_own_deadline(tmp_path: Path):
    c = CheckpointCoordinator(LocalObjectStore(tmp_path / "store"), "p")
    c.register(simple_pipeline("p", [("op", 2)]))
    pending = c.trigger({})
    progress = c.progress(pending.checkpoint_id)
    assert progress.status is CheckpointStatus.PENDING
    assert progress.deadline == c.get_checkpoint(pending.checkpoint_id).deadline  # as stored
