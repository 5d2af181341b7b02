"""Checkpoint statistics, like Flink's web UI: per checkpoint, per task, and a summary.
Derived from the records themselves, so they can never disagree with them."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from batchpoint.errors import CheckpointNotFound, CorruptRecord, RecordError
from batchpoint.protocol.checkpoint import (
    AckRecord,
    CheckpointStatus,
    CheckpointType,
    PendingCheckpoint,
)
from batchpoint.protocol.control import known_trigger_time
from batchpoint.protocol.history_status import HistoryStatus, Standing, history_status
from batchpoint.protocol.ids import CheckpointIDCounter
from batchpoint.protocol.reads import CheckpointReads


@dataclass(frozen=True)
class TaskStats:
    task: str
    attempt: str
    ack_time: float
    end_to_end_s: float  # trigger to ack
    sync_ms: float
    async_ms: float
    state_size: int
    rows: int
    records_in: int = 0
    records_out: int = 0
    full_state_size: int = 0  # what a restore reads: state_size plus the files it shares
    spark_jobs: int | None = None  # the Spark jobs its attempt ran (None: not counted)
    spark_stages: int | None = None
    # the storage requests its subtask's writes made, by kind (None: not counted)
    storage_requests: dict[str, int] | None = None

    @classmethod
    def of(cls, pending: PendingCheckpoint, ack: AckRecord) -> TaskStats:
        requests = ack.metrics.storage_requests
        return cls(
            str(ack.task),
            ack.attempt,
            ack.acked_at,
            ack.acked_at - pending.trigger_time,
            ack.metrics.sync_ms,
            ack.metrics.async_ms,
            ack.state_size,
            ack.rows,
            ack.metrics.records_in,
            ack.metrics.records_out,
            ack.full_state_size,
            ack.metrics.spark_jobs,
            ack.metrics.spark_stages,
            requests.by_kind() if requests is not None else None,
        )


@dataclass(frozen=True)
class CheckpointStats:
    checkpoint_id: int
    type: CheckpointType
    status: CheckpointStatus  # what its records say; `shown_status` is what it is now
    trigger_time: float | None  # None: never recorded (an admission whose trigger died)
    end_time: float | None
    state_size: int
    rows: int
    acknowledged: int
    expected: int
    base_checkpoint_id: int | None
    failure_reason: str = ""
    failure_message: str = ""
    # Flink's "full checkpoint data size": state_size is what this checkpoint wrote, this
    # is what restoring it reads (an incremental checkpoint shares its base's files).
    full_state_size: int = 0
    # Judged against the pipeline's head, retention and quarantine marks when read
    # (None: read without them; `shown_status` then says what the outcome alone says).
    history_status: HistoryStatus | None = None

    @classmethod
    def unreadable(cls, checkpoint_id: int, problem: RecordError | str) -> CheckpointStats:
        """The row of a checkpoint whose records cannot be read: damage is a finding in
        the history, named, never an error that hides every other checkpoint."""
        return cls(
            checkpoint_id=checkpoint_id,
            type=CheckpointType.CHECKPOINT,
            status=CheckpointStatus.UNREADABLE,
            trigger_time=None,
            end_time=None,
            state_size=0,
            rows=0,
            acknowledged=0,
            expected=0,
            base_checkpoint_id=None,
            failure_reason="unreadable",
            failure_message=str(problem),
            history_status=HistoryStatus.UNREADABLE,
        )

    @property
    def shown_status(self) -> HistoryStatus:
        """The status every front end shows (protocol/history_status.py)."""
        if self.history_status is not None:
            return self.history_status
        return history_status(self.checkpoint_id, self.status, Standing.unknown(()))

    @property
    def duration_s(self) -> float | None:
        """From trigger to outcome; None when either is unknown, and never negative (an
        outcome stamped by a clock behind the trigger's says nothing true)."""
        if self.end_time is None or not self.trigger_time:
            return None
        took = self.end_time - self.trigger_time
        return took if took >= 0 else None

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint_id": self.checkpoint_id,
            "type": self.type.value,
            "status": self.shown_status.label,
            "outcome": self.status.value,
            "trigger_time": self.trigger_time,
            "end_time": self.end_time,
            "duration_s": self.duration_s,
            "state_size": self.state_size,
            "full_state_size": self.full_state_size,
            "rows": self.rows,
            "acknowledged": self.acknowledged,
            "expected": self.expected,
            "base_checkpoint_id": self.base_checkpoint_id,
            "failure_reason": self.failure_reason,
            "failure_message": self.failure_message,
        }


@dataclass(frozen=True)
class Summary:
    count: int
    completed: int
    failed: int
    in_progress: int
    duration_s: tuple[float, float, float] | None  # min, avg, max of completed
    state_size: tuple[float, float, float] | None


@dataclass(frozen=True)
class HistoryPage:
    """Newest first: `checkpoints` with ids below the page's `before`, and the id to
    pass as `before` for the next (older) page, None when there is none."""

    checkpoints: list[CheckpointStats]
    older: int | None


#: Reads of one page run at once: a page of 50 on S3 is 50-150 small GETs.
_PAGE_READERS = 16


class CheckpointStatsTracker:
    def __init__(
        self,
        reads: CheckpointReads,
        ids: CheckpointIDCounter,
        standing: Callable[[], Standing] | None = None,
    ) -> None:
        self._reads = reads
        self._ids = ids
        # The head, the retained and the quarantined, read once per view (None: not
        # known here, and a completed checkpoint shows as completed).
        self._standing = standing

    def standing(self) -> Standing | None:
        return None if self._standing is None else self._standing()

    def checkpoint(
        self, checkpoint_id: int, standing: Standing | None = None
    ) -> tuple[CheckpointStats, list[TaskStats]]:
        """One checkpoint's statistics and its tasks'; `standing`: as read for a whole
        page (read here when not given)."""
        standing = standing if standing is not None else self.standing()
        outcome = self._reads.get_outcome(checkpoint_id)
        pending = self._reads.get_checkpoint(checkpoint_id)
        if outcome is not None and outcome.completed is not None:
            acks = list(outcome.completed.acks)
        else:
            acks = list(self._reads.acks(checkpoint_id).values())
        tasks = [TaskStats.of(pending, a) for a in acks]
        status = outcome.status if outcome else CheckpointStatus.PENDING
        stats = CheckpointStats(
            checkpoint_id=checkpoint_id,
            type=pending.type,
            status=status,
            trigger_time=known_trigger_time(pending),
            end_time=outcome.decided_at if outcome else None,
            state_size=sum(t.state_size for t in tasks),
            rows=sum(t.rows for t in tasks),
            acknowledged=len(tasks),
            expected=len(pending.expected_tasks),
            base_checkpoint_id=pending.base_checkpoint_id,
            failure_reason=outcome.reason.code if outcome and outcome.reason else "",
            failure_message=outcome.message if outcome else "",
            full_state_size=sum(t.full_state_size for t in tasks),
            history_status=(
                None if standing is None else history_status(checkpoint_id, status, standing)
            ),
        )
        return stats, tasks

    def history(self, limit: int | None = None) -> list[CheckpointStats]:
        """Oldest first: every checkpoint with records, or the newest `limit` of them."""
        if limit is not None:
            return self.page(limit=limit).checkpoints[::-1] if limit > 0 else []
        standing = self.standing()
        found = (self._stats_or_none(cid, standing) for cid in self._reads.checkpoint_ids())
        return [s for s in found if s is not None]

    def page(self, before: int | None = None, limit: int = 50) -> HistoryPage:
        """The newest `limit` checkpoints with ids below `before` (below the next id to
        be allocated when None).

        Ids are allocated densely, so the page is read by id downwards from the id
        counter: about one GET per checkpoint on the page, however long the history.
        Pruned or never-written ids are skipped; after a whole window of them (a history
        that was pruned past this point) it falls back to one listing of what is left.
        """
        if limit < 1:
            raise ValueError(f"a page holds at least one checkpoint, not {limit}")
        try:
            next_id = self._ids.peek()
        except CorruptRecord:  # a finding of its own, which hides no history
            next_id = max(self._reads.checkpoint_ids(), default=0) + 1
        top = next_id if before is None else min(before, next_id)
        found: list[CheckpointStats] = []
        below = top
        standing = self.standing()

        def stats_of(checkpoint_id: int) -> CheckpointStats | None:
            return self._stats_or_none(checkpoint_id, standing)

        with ThreadPoolExecutor(max_workers=_PAGE_READERS) as pool:
            while below > 1 and len(found) < limit:
                window = list(range(below - 1, max(0, below - 1 - limit), -1))
                read = [s for s in pool.map(stats_of, window) if s is not None]
                below = window[-1]
                if not read:
                    rest = [cid for cid in self._reads.checkpoint_ids() if cid < below]
                    wanted = rest[::-1][: limit - len(found)]
                    read = [s for s in pool.map(stats_of, wanted) if s is not None]
                    found.extend(read)
                    below = wanted[-1] if wanted else 1
                    break
                found.extend(read)
        page = found[:limit]
        if len(found) > limit:
            older: int | None = page[-1].checkpoint_id
        elif below > 1:
            older = page[-1].checkpoint_id if page else None
        else:
            older = None
        return HistoryPage(page, older)

    def _stats_or_none(
        self, checkpoint_id: int, standing: Standing | None
    ) -> CheckpointStats | None:
        try:
            return self.checkpoint(checkpoint_id, standing)[0]
        except CheckpointNotFound:
            # pruned, or an id whose trigger never wrote its record; unless the control
            # record still holds it (read once for the page: no request more)
            return held_but_missing(checkpoint_id, standing)
        except RecordError as exc:
            return CheckpointStats.unreadable(checkpoint_id, exc)

    @staticmethod
    def summary(history: list[CheckpointStats]) -> Summary:
        done = [s for s in history if s.status is CheckpointStatus.COMPLETED]
        durations = [s.duration_s for s in done if s.duration_s is not None]
        sizes = [float(s.state_size) for s in done]
        return Summary(
            count=len(history),
            completed=len(done),
            failed=sum(1 for s in history if s.status is CheckpointStatus.ABORTED),
            in_progress=sum(1 for s in history if s.status is CheckpointStatus.PENDING),
            duration_s=_min_avg_max(durations),
            state_size=_min_avg_max(sizes),
        )


def held_but_missing(checkpoint_id: int, standing: Standing | None) -> CheckpointStats | None:
    """The row of a checkpoint that the control record holds (the head or a retained
    one) but whose records are gone: damage to show (invariant 11), where the row of a
    pruned checkpoint is rightly left out. None when the control record does not hold it."""
    if standing is None or not standing.known:
        return None
    if checkpoint_id == standing.head:
        role = "the head"
    elif checkpoint_id in standing.retained:
        role = "retained"
    else:
        return None
    return CheckpointStats.unreadable(
        checkpoint_id,
        f"checkpoint {checkpoint_id} is {role} in the control record, but its outcome "
        "record is missing: no restore can go back to it",
    )


def _min_avg_max(values: list[float]) -> tuple[float, float, float] | None:
    if not values:
        return None
    return min(values), statistics.fmean(values), max(values)
