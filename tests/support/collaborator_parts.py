"""The real parts the composition root (protocol/coordinator.py) builds each protocol
collaborator from, and the records a collaborator starts from, written by hand, for
tests that build one collaborator alone (tests/protocol/test_collaborators_alone*.py).

Nothing here builds a collaborator: the records are written straight to storage and the
control record is changed with one `ControlStore.update`, so a test shows exactly which
state its one collaborator starts from and what it asks of the others.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from batchpoint.protocol.checkpoint import (
    AckRecord,
    CheckpointFailureReason,
    CheckpointOutcome,
    CheckpointStatus,
    CheckpointType,
    CompletedCheckpoint,
    FileHandle,
    PendingCheckpoint,
    TaskMetrics,
)
from batchpoint.protocol.checkpoint_files import CheckpointFiles
from batchpoint.protocol.checkpoint_records import CheckpointRecords
from batchpoint.protocol.control import ControlRecord, PendingEntry, RetainedEntry
from batchpoint.protocol.control_store import ControlStore
from batchpoint.protocol.head import HeadMoveCause
from batchpoint.protocol.layout import PipelineLayout, TaskId
from batchpoint.protocol.reads import CheckpointReads
from batchpoint.storage.local import LocalObjectStore
from support.clock import FakeClock

PIPELINE = "alone"
#: The expected tasks of every hand-written checkpoint: a keyed operator of two
#: subtasks and a sink (what `simple_pipeline(PIPELINE, [("keyed", 2), ("sink", 1)])`
#: expects).
K0, K1, S0 = TaskId("keyed", 0), TaskId("keyed", 1), TaskId("sink", 0)
TASKS = (K0, K1, S0)
TIMEOUT = 600.0


@dataclass
class Parts:
    """A real local store in a test's folder, the pipeline's layout, the fake clock,
    and the control store, the records port and the files port over them."""

    store: LocalObjectStore
    layout: PipelineLayout
    clock: FakeClock
    control: ControlStore
    records: CheckpointRecords
    files: CheckpointFiles

    @classmethod
    def at(cls, folder: Path) -> Parts:
        store = LocalObjectStore(folder / "store")
        layout = PipelineLayout(PIPELINE)
        clock = FakeClock()
        control = ControlStore(store, layout, clock)
        records = CheckpointRecords(store, layout, control)
        return cls(store, layout, clock, control, records, CheckpointFiles(store, layout))

    @property
    def reads(self) -> CheckpointReads:
        """The records port's read side: what a test reads its outcome back through."""
        return self.records

    def change_control(self, change: Callable[[ControlRecord], ControlRecord]) -> None:
        self.control.update(lambda current: change(current or ControlRecord()))


def write_pending(
    parts: Parts,
    checkpoint_id: int,
    *,
    base: int | None = None,
    checkpoint_type: CheckpointType = CheckpointType.CHECKPOINT,
    generation: int = 0,
) -> PendingCheckpoint:
    """A triggered checkpoint: its admitted entry in the control record, then its
    pending record (what `CheckpointTrigger.trigger` leaves behind)."""
    now = parts.clock()
    pending = PendingCheckpoint(
        pipeline=PIPELINE,
        checkpoint_id=checkpoint_id,
        type=checkpoint_type,
        base_checkpoint_id=base,
        restore_generation=generation,
        barrier={"src": {"p0": checkpoint_id}},
        base_barrier={},
        expected_tasks=TASKS,
        trigger_time=now,
        deadline=now + TIMEOUT,
    )
    entry = PendingEntry.of(pending)
    parts.change_control(lambda c: replace(c, pending=(*c.pending, entry)))
    parts.store.create(parts.layout.active(checkpoint_id), pending.encode())
    return pending


def write_file(parts: Parts, key: str, text: str, stream: str = "state-main") -> FileHandle:
    """A stored file and the handle an ack gives it."""
    data = text.encode() * 8
    parts.store.put(key, data)
    return FileHandle(key, len(data), hashlib.sha256(data).hexdigest(), rows=1, name=stream)


def write_ack(parts: Parts, checkpoint_id: int, task: TaskId, attempt: str = "a1") -> AckRecord:
    """One task's state file and its ack record (what `AckAccounting.acknowledge` writes)."""
    key = parts.layout.task_data_prefix(checkpoint_id, task, attempt) + "part-0.parquet"
    operator = task.operator
    stream = "sink" if operator == "sink" else "state-main"  # a sink stages its output
    handle = write_file(parts, key, f"{task} of {checkpoint_id}", stream)
    ack = AckRecord(
        checkpoint_id, task, attempt, (handle,), TaskMetrics(sync_ms=5.0), parts.clock(), operator
    )
    parts.store.create(parts.layout.ack(checkpoint_id, task), ack.encode())
    return ack


def write_completed(
    parts: Parts,
    checkpoint_id: int,
    *,
    checkpoint_type: CheckpointType = CheckpointType.CHECKPOINT,
    base: int | None = None,
) -> CompletedCheckpoint:
    """A completed checkpoint as a finalize settles it: every ack, the COMPLETED
    outcome, retained and the head in the control record, its pending marker gone."""
    pending = write_pending(parts, checkpoint_id, base=base, checkpoint_type=checkpoint_type)
    acks = tuple(write_ack(parts, checkpoint_id, task) for task in TASKS)
    parts.clock.advance(10)
    now = parts.clock()
    completed = CompletedCheckpoint(pending, acks, now)
    outcome = CheckpointOutcome(CheckpointStatus.COMPLETED, pending, now, completed=completed)
    parts.store.create(parts.layout.outcome(checkpoint_id), outcome.encode())
    kept = RetainedEntry(checkpoint_id, checkpoint_type, now)

    def settled(c: ControlRecord) -> ControlRecord:
        pending = tuple(p for p in c.pending if p.checkpoint_id != checkpoint_id)
        retained = (*c.retained, kept)
        moved = replace(c, head=checkpoint_id, moved_at=now, cause=HeadMoveCause.COMPLETED)
        return replace(moved, pending=pending, retained=retained)

    parts.change_control(settled)
    parts.store.delete(parts.layout.active(checkpoint_id))
    return completed


def write_aborted(parts: Parts, checkpoint_id: int) -> CheckpointOutcome:
    """An expired checkpoint with one ack in: the ABORTED outcome, queued for GC."""
    pending = write_pending(parts, checkpoint_id)
    write_ack(parts, checkpoint_id, TASKS[0])
    parts.clock.advance(TIMEOUT + 1)
    now = parts.clock()
    reason = CheckpointFailureReason.EXPIRED
    outcome = CheckpointOutcome(
        CheckpointStatus.ABORTED, pending, now, reason=reason, message=reason.message
    )
    parts.store.create(parts.layout.outcome(checkpoint_id), outcome.encode())

    def discarded(c: ControlRecord) -> ControlRecord:
        pending = tuple(p for p in c.pending if p.checkpoint_id != checkpoint_id)
        return replace(c, pending=pending).with_discarded([checkpoint_id], now)

    parts.change_control(discarded)
    parts.store.delete(parts.layout.active(checkpoint_id))
    return outcome
