"""Ack accounting (Flink's PendingCheckpoint.acknowledgeTask and declineCheckpoint): each
expected task writes one ack record, create-once; anything but a SUCCESS cleans up the
files the attempt brought, and a decline aborts the checkpoint at once.

Acks are write-once (invariant 3): a second ack of the same task by another attempt is
DUPLICATE, an ack of a task the checkpoint does not expect is UNKNOWN, an ack of an
aborted checkpoint is DISCARDED, and none of them changes the checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from attrs import define

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
from batchpoint.protocol.checkpoint_files import CheckpointFiles
from batchpoint.protocol.checkpoint_records import CheckpointRecords
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.ports import Clock
from batchpoint.protocol.settlement import Abort

#: Decide an abort of a pending checkpoint and settle it (`CheckpointFinalizer.decide_abort`):
#: whether this call's outcome won, and the outcome that holds.
DecideAbort = Callable[[PendingCheckpoint, Abort], tuple[bool, CheckpointOutcome]]


@define(kw_only=True, slots=False, eq=False)
class AckAccounting:
    _records: CheckpointRecords
    _files: CheckpointFiles
    _clock: Clock
    _decide_abort: DecideAbort

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
        pending = self._records.get_pending(checkpoint_id)
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
                outcome = self._records.get_outcome(checkpoint_id)
                if outcome is not None and outcome.status is CheckpointStatus.ABORTED:
                    result = TaskAcknowledgeResult.DISCARDED
        if result is not TaskAcknowledgeResult.SUCCESS:
            self._files.delete_attempt_files(ack)
        return result

    def _write_ack(self, ack: AckRecord) -> TaskAcknowledgeResult:
        written, holding = self._records.create_ack(ack)
        if written or holding.attempt == ack.attempt:
            return TaskAcknowledgeResult.SUCCESS  # ours, or the same attempt acking again
        return TaskAcknowledgeResult.DUPLICATE

    def _ack_after_outcome(self, ack: AckRecord) -> TaskAcknowledgeResult:
        outcome = self._records.get_outcome(ack.checkpoint_id)
        if outcome is None or outcome.status is CheckpointStatus.ABORTED:
            return TaskAcknowledgeResult.DISCARDED
        if ack.task not in outcome.pending.expected_tasks:
            return TaskAcknowledgeResult.UNKNOWN
        assert outcome.completed is not None
        winner = outcome.completed.ack_for(ack.task)
        if winner is not None and winner.attempt == ack.attempt:
            return TaskAcknowledgeResult.SUCCESS
        return TaskAcknowledgeResult.DUPLICATE

    def decline(self, checkpoint_id: int, task: TaskId, attempt: str, reason: str) -> DeclineResult:
        """A task cannot take part: abort the checkpoint at once rather than waiting for
        the timeout (Flink's declineCheckpoint)."""
        pending = self._records.get_pending(checkpoint_id)
        if pending is None:
            outcome = self._records.get_outcome(checkpoint_id)
            if outcome is None:
                return DeclineResult.UNKNOWN
            return _declined_too_late(outcome)
        if task not in pending.expected_tasks:
            return DeclineResult.UNKNOWN
        if self._records.has_ack(checkpoint_id, task):
            return DeclineResult.IGNORED_ACKNOWLEDGED
        self._records.create_decline(
            DeclineRecord(checkpoint_id, task, attempt, reason, self._clock())
        )
        declined = Abort(CheckpointFailureReason.DECLINED, f"task {task} declined: {reason}")
        won, outcome = self._decide_abort(pending, declined)
        return DeclineResult.ABORTED if won else _declined_too_late(outcome)


def _declined_too_late(outcome: CheckpointOutcome) -> DeclineResult:
    if outcome.status is CheckpointStatus.COMPLETED:
        return DeclineResult.IGNORED_COMPLETED
    return DeclineResult.ALREADY_ABORTED
