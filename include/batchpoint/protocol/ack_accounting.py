"""Ack accounting (Flink's PendingCheckpoint.acknowledgeTask and declineCheckpoint): each
expected task writes one ack record, create-once; anything but a SUCCESS cleans up the
files the attempt brought, and a decline aborts the checkpoint at once.

Acks are write-once (invariant 3): a second ack of the same task by another attempt is
DUPLICATE, an ack of a task the checkpoint does not expect is UNKNOWN, an ack of an
aborted checkpoint is DISCARDED, and none of them changes the checkpoint.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

from batchpoint.errors import ObjectAlreadyExists
from batchpoint.protocol.checkpoint import (
    AckRecord,
    CheckpointFailureReason,
    CheckpointOutcome,
    CheckpointStatus,
    DeclineRecord,
    DeclineResult,
    FileHandle,
    PendingCheckpoint,
    TaskAcknowledgeResult,
    TaskMetrics,
)
from batchpoint.protocol.layout import PipelineLayout, TaskId
from batchpoint.protocol.ports import Clock
from batchpoint.protocol.reads import CheckpointReads
from batchpoint.protocol.settlement import Abort
from batchpoint.storage.base import ObjectStore

#: Decide an abort of a pending checkpoint and settle it (`CheckpointFinalizer.decide_abort`):
#: whether this call's outcome won, and the outcome that holds.
DecideAbort = Callable[[PendingCheckpoint, Abort], tuple[bool, CheckpointOutcome]]


class AckAccounting:
    def __init__(
        self,
        *,
        store: ObjectStore,
        layout: PipelineLayout,
        reads: CheckpointReads,
        clock: Clock,
        decide_abort: DecideAbort,
    ) -> None:
        self._store = store
        self._layout = layout
        self._reads = reads
        self._clock = clock
        self._decide_abort = decide_abort

    def acknowledge(
        self,
        checkpoint_id: int,
        task: TaskId,
        attempt: str,
        handles: Iterable[FileHandle] = (),
        metrics: TaskMetrics | None = None,
    ) -> TaskAcknowledgeResult:
        """On anything but SUCCESS the files this attempt brought are deleted: no
        checkpoint will ever reference them."""
        handles = tuple(handles)
        pending = self._reads.get_pending(checkpoint_id)
        # the operator's uid as the trigger recorded it: what later checkpoints find
        # this task's state by, whatever the operator is called then
        uid = pending.operator_uid(task.operator) if pending is not None else ""
        ack = AckRecord(
            checkpoint_id, task, attempt, handles, metrics or TaskMetrics(), self._clock(), uid
        )
        if pending is None:
            result = self._ack_after_outcome(ack)
        elif task not in pending.expected_tasks:
            result = TaskAcknowledgeResult.UNKNOWN
        else:
            result = self._write_ack(ack)
            if result is TaskAcknowledgeResult.SUCCESS:
                outcome = self._reads.get_outcome(checkpoint_id)
                if outcome is not None and outcome.status is CheckpointStatus.ABORTED:
                    result = TaskAcknowledgeResult.DISCARDED
        if result is not TaskAcknowledgeResult.SUCCESS:
            self._discard_attempt_files(ack)
        return result

    def _write_ack(self, ack: AckRecord) -> TaskAcknowledgeResult:
        key = self._layout.ack(ack.checkpoint_id, ack.task)
        try:
            self._store.create(key, ack.encode())
            return TaskAcknowledgeResult.SUCCESS
        except ObjectAlreadyExists:
            existing = AckRecord.decode(key, self._store.get(key).data)
            if existing.attempt == ack.attempt:
                return TaskAcknowledgeResult.SUCCESS  # the same attempt, acking again
            return TaskAcknowledgeResult.DUPLICATE

    def _ack_after_outcome(self, ack: AckRecord) -> TaskAcknowledgeResult:
        outcome = self._reads.get_outcome(ack.checkpoint_id)
        if outcome is None or outcome.status is CheckpointStatus.ABORTED:
            return TaskAcknowledgeResult.DISCARDED
        if ack.task not in outcome.pending.expected_tasks:
            return TaskAcknowledgeResult.UNKNOWN
        assert outcome.completed is not None
        winner = outcome.completed.ack_for(ack.task)
        if winner is not None and winner.attempt == ack.attempt:
            return TaskAcknowledgeResult.SUCCESS
        return TaskAcknowledgeResult.DUPLICATE

    def _discard_attempt_files(self, ack: AckRecord) -> None:
        # Only this attempt's own files: under its operator's data folder in this
        # checkpoint, in a folder named by the attempt id. A handle pointing anywhere else
        # is another checkpoint's, another attempt's or another task's file (a sink
        # references its input channel's files), which is never ours to delete.
        data = self._layout.operator_data_prefix(ack.checkpoint_id, ack.task.operator)
        own = [
            h.path
            for h in ack.handles
            if h.path.startswith(data) and ack.attempt in h.path[len(data) :].split("/")[:-1]
        ]
        self._store.delete_many(own)

    def decline(self, checkpoint_id: int, task: TaskId, attempt: str, reason: str) -> DeclineResult:
        """A task cannot take part: abort the checkpoint at once rather than waiting for
        the timeout (Flink's declineCheckpoint)."""
        pending = self._reads.get_pending(checkpoint_id)
        if pending is None:
            outcome = self._reads.get_outcome(checkpoint_id)
            if outcome is None:
                return DeclineResult.UNKNOWN
            return _declined_too_late(outcome)
        if task not in pending.expected_tasks:
            return DeclineResult.UNKNOWN
        if self._store.exists(self._layout.ack(checkpoint_id, task)):
            return DeclineResult.IGNORED_ACKNOWLEDGED
        record = DeclineRecord(checkpoint_id, task, attempt, reason, self._clock())
        with contextlib.suppress(ObjectAlreadyExists):
            self._store.create(self._layout.decline(checkpoint_id, task, attempt), record.encode())
        declined = Abort(CheckpointFailureReason.DECLINED, f"task {task} declined: {reason}")
        won, outcome = self._decide_abort(pending, declined)
        return DeclineResult.ABORTED if won else _declined_too_late(outcome)


def _declined_too_late(outcome: CheckpointOutcome) -> DeclineResult:
    if outcome.status is CheckpointStatus.COMPLETED:
        return DeclineResult.IGNORED_COMPLETED
    return DeclineResult.ALREADY_ABORTED
