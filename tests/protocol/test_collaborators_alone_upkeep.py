"""Each protocol collaborator built alone, continued (see test_collaborators_alone.py):
what keeps a pipeline's storage in order between checkpoints (savepoints going out and
coming in, GC, repair) and what reads its history (statistics). Real parts, records
written by hand (tests/support/collaborator_parts.py), a recording function for each
port to another collaborator."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import pytest

from batchpoint.errors import CheckpointError
from batchpoint.protocol.checkpoint import (
    AckRecord,
    CheckpointOutcome,
    CheckpointStatus,
    CheckpointType,
    CompletedCheckpoint,
    FileHandle,
    PendingCheckpoint,
    TaskAcknowledgeResult,
    TaskMetrics,
)
from batchpoint.protocol.completed_store import CompletedCheckpointStore
from batchpoint.protocol.control import PendingEntry, RetainedEntry
from batchpoint.protocol.failures import CheckpointFailureManager
from batchpoint.protocol.gc import GarbageCollector
from batchpoint.protocol.ids import CheckpointIDCounter
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.quarantine import QuarantineStore
from batchpoint.protocol.repair import Repairer, RepairStatus
from batchpoint.protocol.savepoint_paths import SavepointLocation
from batchpoint.protocol.savepoint_transfer import ImportSteps, Savepoints
from batchpoint.protocol.sinks import SinkPublisher
from batchpoint.protocol.stats import CheckpointStatsTracker
from support.collaborator_parts import (
    K0,
    TASKS,
    TIMEOUT,
    Parts,
    write_aborted,
    write_ack,
    write_completed,
    write_file,
    write_pending,
)

Asked = list[tuple[object, ...]]
GRACE = 60.0


@pytest.fixture
def parts(tmp_path: Path) -> Parts:
    return Parts.at(tmp_path)


# == Savepoints: export, import through the protocol's steps, dispose =====================


def savepoints_of(parts: Parts, asked: Asked, imported_id: int = 7) -> Savepoints:
    """Savepoints whose import steps record what they are asked: an import is admitted
    as `imported_id`, its pending record is written through the records port, every ack
    succeeds, and the finalize completes what was acked."""
    acked: list[AckRecord] = []

    def admit_import(now: float) -> PendingEntry:
        asked.append(("admit_import",))
        return PendingEntry(imported_id, CheckpointType.SAVEPOINT, None, 0, now + TIMEOUT, True)

    def acknowledge(
        checkpoint_id: int,
        task: TaskId,
        attempt: str,
        handles: Iterable[FileHandle],
        metrics: TaskMetrics | None,
    ) -> TaskAcknowledgeResult:
        asked.append(("acknowledge", checkpoint_id, task, attempt))
        uid = task.operator
        ack = AckRecord(checkpoint_id, task, attempt, tuple(handles), metrics, parts.clock(), uid)
        acked.append(ack)
        return TaskAcknowledgeResult.SUCCESS

    def write_pending(pending: PendingCheckpoint) -> None:
        asked.append(("write_pending", pending.checkpoint_id))
        parts.records.create_pending(pending)

    def finalize(checkpoint_id: int) -> CheckpointOutcome | None:
        asked.append(("finalize", checkpoint_id))
        pending = parts.reads.get_pending(checkpoint_id)
        assert pending is not None
        completed = CompletedCheckpoint(pending, tuple(acked), parts.clock())
        kept = RetainedEntry(checkpoint_id, CheckpointType.SAVEPOINT, parts.clock())
        # retained, as the real settle admits it (an import a restore abandoned is not)
        parts.change_control(lambda c: replace(c, retained=(*c.retained, kept)))
        return CheckpointOutcome(
            CheckpointStatus.COMPLETED, pending, parts.clock(), completed=completed
        )

    return Savepoints(
        store=parts.store,
        layout=parts.layout,
        completed=CompletedCheckpointStore(parts.store, parts.layout, parts.control),
        control=parts.control,
        clock=parts.clock,
        roll_forward=lambda: asked.append(("roll_forward",)),
        steps=ImportSteps(admit_import, write_pending, acknowledge, finalize),
    )


def test_savepoints_import_asks_admission_one_ack_per_task_then_the_finalize(
    parts: Parts,
) -> None:
    source = write_completed(parts, 1, checkpoint_type=CheckpointType.SAVEPOINT)
    asked: Asked = []
    subject = savepoints_of(parts, asked)
    folder = SavepointLocation(parts.store, "savepoints/sp")
    exported = subject.export(1, folder)
    assert (exported.files, parts.store.exists(folder.metadata_key)) == (len(TASKS), True)
    assert asked == []  # an export asks nothing of the others
    imported = subject.import_folder(folder)
    acks = [("acknowledge", 7, task, "savepoint-import") for task in TASKS]
    admitted = [("admit_import",), ("write_pending", 7)]
    assert asked == [("roll_forward",), *admitted, *acks, ("finalize", 7)]
    assert imported.checkpoint_id == 7
    pending = parts.reads.get_pending(7)
    assert pending is not None and pending.type is CheckpointType.SAVEPOINT
    assert (pending.properties.imported_from, pending.properties.savepoint_checkpoint_id) == (
        folder.uri,
        1,
    )
    for copy, original in zip(imported.handles, source.handles, strict=True):
        assert copy.path.startswith(parts.layout.data_prefix(7))  # its own folder
        assert parts.store.get(copy.path).data == parts.store.get(original.path).data


def test_savepoints_dispose_refuses_the_head_and_releases_an_older_savepoint(
    parts: Parts,
) -> None:
    write_completed(parts, 1, checkpoint_type=CheckpointType.SAVEPOINT)
    write_completed(parts, 2)
    write_completed(parts, 3, checkpoint_type=CheckpointType.SAVEPOINT, base=2)
    asked: Asked = []
    subject = savepoints_of(parts, asked)
    with pytest.raises(CheckpointError, match="it is the head"):
        subject.dispose(3)
    with pytest.raises(CheckpointError, match="not a retained savepoint"):
        subject.dispose(2)
    subject.dispose(1)
    control = parts.control.load()
    assert (control.retained_ids(), control.is_discarded(1)) == ([2, 3], True)
    assert asked == []


# == GarbageCollector: only what nothing references, fenced by the control record ========


def gc_of(parts: Parts, asked: Asked) -> GarbageCollector:
    return GarbageCollector(
        reads=parts.reads,
        files=parts.files,
        control=parts.control,
        sinks=SinkPublisher(parts.store, parts.layout),
        clock=parts.clock,
        grace=GRACE,
        roll_forward=lambda: asked.append(("roll_forward",)),
    )


def test_gc_deletes_unreferenced_files_and_keeps_referenced_ones(parts: Parts) -> None:
    kept = write_completed(parts, 1)
    zombie = parts.layout.task_data_prefix(1, K0, "zombie") + "part-0.parquet"
    stray = write_file(parts, zombie, "a losing attempt's file, never acked")
    write_aborted(parts, 2)
    [aborted_file] = parts.reads.acks(2)[K0].handles
    asked: Asked = []
    subject = gc_of(parts, asked)
    report = subject.collect()
    assert asked == [("roll_forward",)]  # a restore in flight is finished first
    assert sorted(report.deleted_files) == sorted([stray.path, aborted_file.path])
    assert all(parts.store.exists(h.path) for h in kept.handles)
    assert report.dequeued == []  # the aborted folder waits out the grace for late writers
    parts.clock.advance(GRACE)
    assert subject.collect().dequeued == [2]
    control = parts.control.load()
    assert (control.is_discarded(2), control.collected) == (False, (2,))


def test_gc_keeps_a_discarded_file_that_a_pending_checkpoint_acked(parts: Parts) -> None:
    write_aborted(parts, 1)
    [shared] = parts.reads.acks(1)[K0].handles
    write_pending(parts, 2)
    ack = AckRecord(2, K0, "a1", (shared,), TaskMetrics(), parts.clock(), "keyed")
    parts.store.create(parts.layout.ack(2, K0), ack.encode())
    parts.clock.advance(GRACE)
    report = gc_of(parts, []).collect()
    assert report.deleted_files == [] and report.dequeued == []
    assert parts.store.exists(shared.path)
    assert parts.control.load().is_discarded(1)  # held in the queue while it is read


# == Repairer: a control record rebuilt from the records that remain ======================


def repairer_of(parts: Parts, asked: Asked) -> Repairer:
    return Repairer(
        reads=parts.reads,
        files=parts.files,
        control=parts.control,
        quarantine=QuarantineStore(parts.store, parts.layout),
        sinks=SinkPublisher(parts.store, parts.layout),
        failures=CheckpointFailureManager(parts.store, parts.layout, 0),
        clock=parts.clock,
        num_retained=3,
        roll_forward=lambda: asked.append(("roll_forward",)),
    )


def test_repairer_rebuilds_a_missing_control_record(parts: Parts) -> None:
    write_completed(parts, 1)
    write_completed(parts, 2, base=1)
    write_aborted(parts, 3)
    parts.store.delete(parts.layout.head)
    asked: Asked = []
    subject = repairer_of(parts, asked)
    report = subject.repair()
    assert report.status is RepairStatus.WRITTEN, report.reason
    control = parts.control.load()
    assert (control.head, control.retained_ids(), control.is_discarded(3)) == (2, [1, 2], True)
    assert asked == [("roll_forward",)]  # the sinks follow the head it proved
    again = subject.repair()  # the records agree with the record it wrote: nothing to do
    assert again.status is RepairStatus.UNCHANGED and again.agrees
    assert asked == [("roll_forward",)]


# == CheckpointStatsTracker: the history, derived from the records ========================


def test_stats_tracker_reads_the_history_from_the_records(parts: Parts) -> None:
    ids = CheckpointIDCounter(parts.store, parts.layout)
    for _ in range(3):
        ids.get_and_increment()
    done = write_completed(parts, 1)
    write_aborted(parts, 2)
    write_pending(parts, 3)
    write_ack(parts, 3, K0)
    tracker = CheckpointStatsTracker(parts.reads, ids)
    history = tracker.history()
    assert [(s.checkpoint_id, s.status, s.acknowledged) for s in history] == [
        (1, CheckpointStatus.COMPLETED, 3),
        (2, CheckpointStatus.ABORTED, 1),
        (3, CheckpointStatus.PENDING, 1),
    ]
    first, tasks = tracker.checkpoint(1)
    assert [t.task for t in tasks] == list(map(str, TASKS))  # TaskStats keeps text: UI JSON
    assert (first.duration_s, first.state_size) == (10.0, sum(h.size for h in done.handles))
    assert history[1].failure_reason == "expired"
    summary = tracker.summary(history)
    assert (summary.count, summary.completed, summary.failed, summary.in_progress) == (3, 1, 1, 1)
    page = tracker.page(limit=2)
    assert ([s.checkpoint_id for s in page.checkpoints], page.older) == ([3, 2], 2)
