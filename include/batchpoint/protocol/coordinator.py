"""Flink's CheckpointCoordinator over a shared store.

The coordinator keeps no state of its own: every decision is a conditional write to
storage, so any process (an Airflow task, a Spark executor, the CLI) may play any part
and crash at any point. Re-running an operation finishes whatever a crash left behind.

Lifecycle of checkpoint N:
  trigger   allocate N, write the pending record under active/ (the barrier, the base)
  ack       each expected task writes one ack record (create-once)
  decline   a task's refusal: the checkpoint is aborted at once
  finalize  every ack present and every file intact -> write the outcome COMPLETED
  expire    past the deadline -> write the outcome ABORTED (expired)
  settle    after an outcome: retain/subsume, move the head, count the failure, and
            finally remove the active marker (so a crash before that is repaired later)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from batchpoint.errors import (
    CheckpointNotFound,
    ObjectAlreadyExists,
    ObjectNotFound,
    RestoreRefused,
    TriggerRefused,
)
from batchpoint.protocol.checkpoint import (
    AckRecord,
    CheckpointFailureReason,
    CheckpointOutcome,
    CheckpointStatus,
    CheckpointType,
    CompletedCheckpoint,
    DeclineRecord,
    DeclineResult,
    FileHandle,
    PendingCheckpoint,
    TaskAcknowledgeResult,
    TaskMetrics,
)
from batchpoint.protocol.completed_store import CompletedCheckpointStore
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.failures import CheckpointFailureManager, PipelineStatus
from batchpoint.protocol.head import HeadPointer, HeadStore
from batchpoint.protocol.ids import CheckpointIDCounter
from batchpoint.protocol.layout import PipelineLayout, parse_checkpoint_dir_name
from batchpoint.protocol.pipeline import PipelineSpec
from batchpoint.protocol.records import encode, to_iso
from batchpoint.protocol.verify import check_handles
from batchpoint.storage.base import ObjectStore

Clock = Callable[[], float]


@dataclass(frozen=True)
class AckProgress:
    """What an ack sensor needs to know about one checkpoint."""

    checkpoint_id: int
    status: CheckpointStatus | None  # None: no such checkpoint
    acknowledged: tuple[str, ...]
    missing: tuple[str, ...]
    declines: tuple[DeclineRecord, ...]
    outcome: CheckpointOutcome | None

    @property
    def all_acknowledged(self) -> bool:
        return self.status is not None and not self.missing


class CheckpointCoordinator:
    def __init__(
        self,
        store: ObjectStore,
        pipeline: PipelineSpec | str,
        config: CheckpointConfig | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.store = store
        self.spec = pipeline if isinstance(pipeline, PipelineSpec) else None
        name = pipeline.name if isinstance(pipeline, PipelineSpec) else pipeline
        self.layout = PipelineLayout(name)
        self.config = config or CheckpointConfig()
        self.clock = clock
        self.ids = CheckpointIDCounter(store, self.layout)
        self.head = HeadStore(store, self.layout)
        self.completed = CompletedCheckpointStore(store, self.layout)
        self.failures = CheckpointFailureManager(
            store, self.layout, self.config.tolerable_failed_checkpoints
        )

    @property
    def pipeline(self) -> str:
        return self.layout.pipeline

    # == reads ===========================================================================

    def pending_checkpoints(self) -> list[PendingCheckpoint]:
        out = []
        for info in self.store.list(self.layout.active_prefix):
            if parse_checkpoint_dir_name(info.key.rsplit("/", 1)[-1]) is None:
                continue
            try:
                out.append(PendingCheckpoint.decode(info.key, self.store.get(info.key).data))
            except ObjectNotFound:
                continue  # settled while listing
        return sorted(out, key=lambda p: p.checkpoint_id)

    def get_pending(self, checkpoint_id: int) -> PendingCheckpoint | None:
        key = self.layout.active(checkpoint_id)
        try:
            return PendingCheckpoint.decode(key, self.store.get(key).data)
        except ObjectNotFound:
            return None

    def get_outcome(self, checkpoint_id: int) -> CheckpointOutcome | None:
        key = self.layout.outcome(checkpoint_id)
        try:
            return CheckpointOutcome.decode(key, self.store.get(key).data)
        except ObjectNotFound:
            return None

    def get_checkpoint(self, checkpoint_id: int) -> PendingCheckpoint:
        """The trigger record of a checkpoint, pending or settled."""
        outcome = self.get_outcome(checkpoint_id)
        if outcome is not None:
            return outcome.pending
        pending = self.get_pending(checkpoint_id)
        if pending is None:
            raise CheckpointNotFound(
                f"pipeline '{self.pipeline}' has no checkpoint {checkpoint_id}"
            )
        return pending

    def status(self, checkpoint_id: int) -> CheckpointStatus | None:
        outcome = self.get_outcome(checkpoint_id)
        if outcome is not None:
            return outcome.status
        return CheckpointStatus.PENDING if self.get_pending(checkpoint_id) else None

    def acks(self, checkpoint_id: int) -> dict[str, AckRecord]:
        keys = [info.key for info in self.store.list(self.layout.acks_prefix(checkpoint_id))]

        def read(key: str) -> AckRecord | None:
            try:
                return AckRecord.decode(key, self.store.get(key).data)
            except ObjectNotFound:
                return None

        # One GET per ack: in parallel, finalizing 1,000 tasks is not 1,000 round trips.
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(keys)))) as pool:
            found = [a for a in pool.map(read, keys) if a is not None]
        return {ack.task: ack for ack in found}

    def declines(self, checkpoint_id: int) -> list[DeclineRecord]:
        out = []
        for info in self.store.list(self.layout.declines_prefix(checkpoint_id)):
            try:
                out.append(DeclineRecord.decode(info.key, self.store.get(info.key).data))
            except ObjectNotFound:
                continue
        return out

    def progress(self, checkpoint_id: int) -> AckProgress:
        outcome = self.get_outcome(checkpoint_id)
        pending = outcome.pending if outcome else self.get_pending(checkpoint_id)
        if pending is None:
            return AckProgress(checkpoint_id, None, (), (), (), None)
        acked = self.acks(checkpoint_id)
        return AckProgress(
            checkpoint_id,
            outcome.status if outcome else CheckpointStatus.PENDING,
            tuple(t for t in pending.expected_tasks if t in acked),
            tuple(t for t in pending.expected_tasks if t not in acked),
            tuple(self.declines(checkpoint_id)),
            outcome,
        )

    def checkpoint_ids(self) -> list[int]:
        """Every checkpoint with records in storage (pending, or settled and not pruned)."""
        ids = {p.checkpoint_id for p in self.pending_checkpoints()}
        for prefix in self.store.list_dirs(self.layout.checkpoints_prefix):
            cid = parse_checkpoint_dir_name(prefix.rstrip("/").rsplit("/", 1)[-1])
            if cid is not None:
                ids.add(cid)
        return sorted(ids)

    # == trigger =========================================================================

    def register(self, spec: PipelineSpec) -> None:
        """Store the pipeline spec, so other processes can find the expected tasks."""
        if spec.name != self.pipeline:
            raise ValueError(f"spec of '{spec.name}' given to coordinator of '{self.pipeline}'")
        self.spec = spec
        self.store.put(self.layout.spec, spec.encode())

    def load_spec(self) -> PipelineSpec:
        if self.spec is None:
            try:
                data = self.store.get(self.layout.spec).data
            except ObjectNotFound:
                raise CheckpointNotFound(
                    f"pipeline '{self.pipeline}' is not registered in {self.store.uri}"
                ) from None
            self.spec = PipelineSpec.decode(self.layout.spec, data)
        return self.spec

    def trigger(
        self,
        barrier: Mapping[str, Any],
        *,
        checkpoint_type: CheckpointType = CheckpointType.CHECKPOINT,
        properties: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> PendingCheckpoint:
        """Start a checkpoint, or raise TriggerRefused with the reason."""
        spec = self.load_spec()
        self.settle()
        now = self.clock()
        failure_state = self.failures.state()
        if failure_state.status is PipelineStatus.FAILED:
            raise TriggerRefused(
                CheckpointFailureReason.PIPELINE_FAILED,
                f"pipeline '{self.pipeline}' is FAILED and takes no checkpoints: "
                f"{failure_state.reason}. Reset it (batchpoint reset) or restore a checkpoint.",
            )
        head = self.head.get()
        active = [
            p for p in self.pending_checkpoints() if p.restore_generation == head.restore_generation
        ]
        if checkpoint_type is CheckpointType.CHECKPOINT:
            self._check_may_trigger(active, head, now)

        base = self._base_for_next(active, head)
        checkpoint_id = self.ids.get_and_increment()
        pending = PendingCheckpoint(
            pipeline=self.pipeline,
            checkpoint_id=checkpoint_id,
            type=checkpoint_type,
            base_checkpoint_id=base.checkpoint_id if base else None,
            restore_generation=head.restore_generation,
            barrier=dict(barrier),
            base_barrier=dict(base.barrier) if base else {},
            expected_tasks=spec.expected_tasks(),
            trigger_time=now,
            deadline=now + (timeout if timeout is not None else self.config.timeout),
            properties=dict(properties or {}),
        )
        self.store.create(self.layout.active(checkpoint_id), pending.encode())
        if checkpoint_type is CheckpointType.CHECKPOINT:
            self._recheck_concurrency(pending)
        return pending

    def _check_may_trigger(
        self, active: list[PendingCheckpoint], head: HeadPointer, now: float
    ) -> None:
        """Flink's CheckpointRequestDecider, for periodic checkpoints (not savepoints)."""
        running = [p for p in active if not p.is_savepoint]
        if len(running) >= self.config.max_concurrent:
            ids = ", ".join(str(p.checkpoint_id) for p in running)
            raise TriggerRefused(
                CheckpointFailureReason.TOO_MANY_CONCURRENT,
                f"pipeline '{self.pipeline}': {len(running)} checkpoint(s) pending ({ids}); "
                f"max_concurrent is {self.config.max_concurrent}",
            )
        if self.config.min_pause > 0 and head.checkpoint_id is not None:
            outcome = self.get_outcome(head.checkpoint_id)
            if outcome is not None:
                waited = now - outcome.decided_at
                if waited < self.config.min_pause:
                    raise TriggerRefused(
                        CheckpointFailureReason.MINIMUM_PAUSE,
                        f"pipeline '{self.pipeline}': checkpoint {head.checkpoint_id} completed "
                        f"{waited:.1f}s ago; min_pause is {self.config.min_pause:g}s "
                        f"(retry in {self.config.min_pause - waited:.1f}s)",
                    )

    def _base_for_next(
        self, active: list[PendingCheckpoint], head: HeadPointer
    ) -> PendingCheckpoint | None:
        """The newest checkpoint of the current timeline: a pending one (concurrent
        checkpoints chain, each reading on from its predecessor's barrier) or the head."""
        candidates = [p for p in active if p.checkpoint_id > (head.checkpoint_id or 0)]
        if candidates:
            return candidates[-1]
        if head.checkpoint_id is None:
            return None
        return self.get_checkpoint(head.checkpoint_id)

    def _recheck_concurrency(self, pending: PendingCheckpoint) -> None:
        # Two triggers racing past the check: the one with the higher id steps back.
        older = [
            p
            for p in self.pending_checkpoints()
            if p.checkpoint_id < pending.checkpoint_id and not p.is_savepoint
        ]
        if len(older) >= self.config.max_concurrent:
            self.abort(
                pending.checkpoint_id,
                CheckpointFailureReason.TOO_MANY_CONCURRENT,
                "a concurrent trigger won",
            )
            raise TriggerRefused(
                CheckpointFailureReason.TOO_MANY_CONCURRENT,
                f"pipeline '{self.pipeline}': a concurrent trigger started checkpoint "
                f"{older[-1].checkpoint_id} first; max_concurrent is {self.config.max_concurrent}",
            )

    # == acknowledge and decline =========================================================

    def acknowledge(
        self,
        checkpoint_id: int,
        task: str,
        attempt: str,
        handles: Iterable[FileHandle] = (),
        metrics: TaskMetrics | None = None,
    ) -> TaskAcknowledgeResult:
        """Flink's PendingCheckpoint.acknowledgeTask. On anything but SUCCESS the files
        this attempt brought are deleted: no checkpoint will ever reference them."""
        handles = tuple(handles)
        ack = AckRecord(
            checkpoint_id, task, attempt, handles, metrics or TaskMetrics(), self.clock()
        )
        pending = self.get_pending(checkpoint_id)
        if pending is None:
            result = self._ack_after_outcome(ack)
        elif task not in pending.expected_tasks:
            result = TaskAcknowledgeResult.UNKNOWN
        else:
            result = self._write_ack(ack)
            if result is TaskAcknowledgeResult.SUCCESS:
                outcome = self.get_outcome(checkpoint_id)
                if outcome is not None and outcome.status is CheckpointStatus.ABORTED:
                    result = TaskAcknowledgeResult.DISCARDED
        if result is not TaskAcknowledgeResult.SUCCESS:
            self._discard_attempt_files(ack)
        return result

    def _write_ack(self, ack: AckRecord) -> TaskAcknowledgeResult:
        key = self.layout.ack(ack.checkpoint_id, ack.task)
        try:
            self.store.create(key, ack.encode())
            return TaskAcknowledgeResult.SUCCESS
        except ObjectAlreadyExists:
            existing = AckRecord.decode(key, self.store.get(key).data)
            if existing.attempt == ack.attempt:
                return TaskAcknowledgeResult.SUCCESS  # the same attempt, acking again
            return TaskAcknowledgeResult.DUPLICATE

    def _ack_after_outcome(self, ack: AckRecord) -> TaskAcknowledgeResult:
        outcome = self.get_outcome(ack.checkpoint_id)
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
        # Only this attempt's own files: under this checkpoint's data folder, in a folder
        # named by the attempt id. A handle pointing anywhere else could be another
        # checkpoint's or another attempt's file, which is never ours to delete.
        data = self.layout.data_prefix(ack.checkpoint_id)
        own = [
            h.path
            for h in ack.handles
            if h.path.startswith(data) and ack.attempt in h.path[len(data) :].split("/")[:-1]
        ]
        self.store.delete_many(own)

    def decline(self, checkpoint_id: int, task: str, attempt: str, reason: str) -> DeclineResult:
        """A task cannot take part: abort the checkpoint at once rather than waiting for
        the timeout (Flink's declineCheckpoint)."""
        pending = self.get_pending(checkpoint_id)
        if pending is None:
            outcome = self.get_outcome(checkpoint_id)
            if outcome is None:
                return DeclineResult.UNKNOWN
            return (
                DeclineResult.IGNORED_COMPLETED
                if outcome.status is CheckpointStatus.COMPLETED
                else DeclineResult.ALREADY_ABORTED
            )
        if task not in pending.expected_tasks:
            return DeclineResult.UNKNOWN
        if self.store.exists(self.layout.ack(checkpoint_id, task)):
            return DeclineResult.IGNORED_ACKNOWLEDGED
        record = DeclineRecord(checkpoint_id, task, attempt, reason, self.clock())
        with contextlib.suppress(ObjectAlreadyExists):
            self.store.create(self.layout.decline(checkpoint_id, task, attempt), record.encode())
        won, outcome = self._decide(
            self._aborted(
                pending, CheckpointFailureReason.DECLINED, f"task {task} declined: {reason}"
            )
        )
        self._settle_outcome(outcome, won)
        if won:
            return DeclineResult.ABORTED
        if outcome.status is CheckpointStatus.COMPLETED:
            return DeclineResult.IGNORED_COMPLETED
        return DeclineResult.ALREADY_ABORTED

    # == finalize, abort, expire =========================================================

    def try_finalize(
        self, checkpoint_id: int, *, audited: bool = False
    ) -> CheckpointOutcome | None:
        """Complete the checkpoint if every expected task acknowledged; None while some
        have not (and it has not expired). Idempotent: a settled checkpoint returns its
        outcome, after finishing any step a crash left undone.

        A checkpoint that requires an audit (`PendingCheckpoint.requires_audit`) is
        completed only by its audit, which passes `audited=True` once its state passed
        the quality gate. Anyone else (`settle` at the next trigger, a cleanup task)
        leaves it pending for the audit to be retried, and expires it past its deadline:
        completing it would publish state nobody validated."""
        outcome = self.get_outcome(checkpoint_id)
        if outcome is not None:
            self._settle_outcome(outcome, won=False)
            return outcome
        pending = self.get_pending(checkpoint_id)
        if pending is None:
            raise CheckpointNotFound(
                f"pipeline '{self.pipeline}' has no checkpoint {checkpoint_id}"
            )
        now = self.clock()
        acks = self.acks(checkpoint_id)
        missing = [t for t in pending.expected_tasks if t not in acks]
        late = [a.task for a in acks.values() if a.acked_at > pending.deadline]
        if (missing and now > pending.deadline) or late:
            return self.abort(
                checkpoint_id,
                CheckpointFailureReason.EXPIRED,
                _expired_message(pending, missing or late),
            )
        if missing:
            return None
        if pending.requires_audit and not audited:
            if now > pending.deadline:
                return self.abort(
                    checkpoint_id,
                    CheckpointFailureReason.EXPIRED,
                    f"every task acknowledged it, but its audit gave no verdict within "
                    f"{pending.deadline - pending.trigger_time:g}s",
                )
            return None

        blocker = self._finalize_blocker(pending)
        if blocker is not None:
            if blocker == "wait":
                return None
            reason, message = blocker
            return self.abort(checkpoint_id, reason, message)

        ordered = tuple(acks[t] for t in pending.expected_tasks)
        problems = check_handles(
            self.store,
            (h for a in ordered for h in a.handles),
            checksums=self.config.verify_checksums,
        )
        if problems:
            listed = "; ".join(map(str, problems[:5]))
            more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
            return self.abort(
                checkpoint_id,
                CheckpointFailureReason.FINALIZE_FAILED,
                f"{len(problems)} referenced file(s) are not intact: {listed}{more}",
            )
        completed = CompletedCheckpoint(pending, ordered, now)
        won, outcome = self._decide(
            CheckpointOutcome(CheckpointStatus.COMPLETED, pending, now, completed=completed)
        )
        self._settle_outcome(outcome, won)
        return outcome

    def _finalize_blocker(
        self, pending: PendingCheckpoint
    ) -> str | tuple[CheckpointFailureReason, str] | None:
        head = self.head.get()
        if head.restore_generation != pending.restore_generation:
            return (CheckpointFailureReason.RESTORED, "a restore happened after it was triggered")
        if pending.base_checkpoint_id is None:
            return None
        base = self.get_outcome(pending.base_checkpoint_id)
        if base is None:
            return (
                "wait"
                if self.get_pending(pending.base_checkpoint_id)
                else (
                    CheckpointFailureReason.BASE_ABORTED,
                    f"its base checkpoint {pending.base_checkpoint_id} no longer exists",
                )
            )
        if base.status is CheckpointStatus.ABORTED:
            return (
                CheckpointFailureReason.BASE_ABORTED,
                f"its base checkpoint {pending.base_checkpoint_id} was aborted",
            )
        return None

    def abort(
        self, checkpoint_id: int, reason: CheckpointFailureReason, message: str = ""
    ) -> CheckpointOutcome:
        """Abort a pending checkpoint; returns the outcome that holds (maybe a
        COMPLETED one that won the race)."""
        outcome = self.get_outcome(checkpoint_id)
        won = False
        if outcome is None:
            pending = self.get_pending(checkpoint_id)
            if pending is None:
                raise CheckpointNotFound(
                    f"pipeline '{self.pipeline}' has no checkpoint {checkpoint_id}"
                )
            won, outcome = self._decide(self._aborted(pending, reason, message))
        self._settle_outcome(outcome, won)
        return outcome

    def _aborted(
        self, pending: PendingCheckpoint, reason: CheckpointFailureReason, message: str
    ) -> CheckpointOutcome:
        return CheckpointOutcome(
            CheckpointStatus.ABORTED,
            pending,
            self.clock(),
            reason=reason,
            message=message or reason.message,
        )

    def _decide(self, outcome: CheckpointOutcome) -> tuple[bool, CheckpointOutcome]:
        """Write the outcome once. Returns (whether ours won, the outcome that holds)."""
        key = self.layout.outcome(outcome.checkpoint_id)
        try:
            self.store.create(key, outcome.encode())
            return True, outcome
        except ObjectAlreadyExists:
            return False, CheckpointOutcome.decode(key, self.store.get(key).data)

    def settle(self) -> list[CheckpointOutcome]:
        """Expire overdue checkpoints, finalize complete ones (except those that await
        their audit), and finish the settling steps of any checkpoint a crash left
        half-done."""
        settled = []
        for pending in self.pending_checkpoints():
            outcome = self.try_finalize(pending.checkpoint_id)
            if outcome is not None:
                settled.append(outcome)
        return settled

    def expire_overdue(self) -> list[CheckpointOutcome]:
        return [o for o in self.settle() if o.reason is CheckpointFailureReason.EXPIRED]

    # == after the outcome ===============================================================

    def _settle_outcome(self, outcome: CheckpointOutcome, won: bool) -> None:
        """Run the settling steps for an outcome we just wrote, or finish them for one
        someone else wrote, but only while its active marker says they are unfinished:
        redoing them later would undo newer decisions (count a failure again after a
        reset or restore, re-add the retained marker of a checkpoint that was subsumed
        and whose files GC deleted since)."""
        if won or self.store.exists(self.layout.active(outcome.checkpoint_id)):
            self._after_outcome(outcome)

    def _after_outcome(self, outcome: CheckpointOutcome) -> None:
        """Every step here is idempotent; the active marker goes last, so it stays as a
        reminder until all of them have been done once."""
        now = self.clock()
        pending = outcome.pending
        if outcome.status is CheckpointStatus.COMPLETED:
            assert outcome.completed is not None
            self.completed.add(outcome.completed)
            self.head.advance(pending.checkpoint_id, pending.restore_generation, now)
            if not pending.is_savepoint:
                self.failures.record_success(pending.checkpoint_id, now)
            for older in self.pending_checkpoints():
                if older.checkpoint_id < pending.checkpoint_id and not older.is_savepoint:
                    self.abort(
                        older.checkpoint_id,
                        CheckpointFailureReason.SUBSUMED,
                        f"checkpoint {pending.checkpoint_id} completed first",
                    )
            head = self.head.get()
            protected = {head.checkpoint_id} if head.checkpoint_id is not None else set()
            self.completed.subsume(self.config.num_retained, protected)
        else:
            assert outcome.reason is not None
            if not pending.is_savepoint:
                self.failures.record_failure(
                    pending.checkpoint_id, outcome.reason, outcome.message, now
                )
            for later in self.pending_checkpoints():
                if later.base_checkpoint_id == pending.checkpoint_id:
                    self.abort(
                        later.checkpoint_id,
                        CheckpointFailureReason.BASE_ABORTED,
                        f"its base checkpoint {pending.checkpoint_id} was aborted",
                    )
        self.store.delete(self.layout.active(pending.checkpoint_id))

    # == restore and reset ===============================================================

    def restore(self, checkpoint_id: int | None = None) -> HeadPointer:
        """Point the head at a retained completed checkpoint or savepoint (the newest when
        none is given). Pending checkpoints are aborted; ids keep growing."""
        if checkpoint_id is None:
            ids = self.completed.retained_ids()
            if not ids:
                raise RestoreRefused(f"pipeline '{self.pipeline}' has no retained checkpoint")
            checkpoint_id = ids[-1]
        if not self.completed.is_retained(checkpoint_id):
            raise RestoreRefused(
                f"checkpoint {checkpoint_id} of pipeline '{self.pipeline}' is not retained "
                f"(retained: {self.completed.retained_ids() or 'none'})"
            )
        target = self.completed.get(checkpoint_id)
        for pending in self.pending_checkpoints():
            self.abort(
                pending.checkpoint_id,
                CheckpointFailureReason.RESTORED,
                f"restore to checkpoint {checkpoint_id}",
            )
        now = self.clock()
        previous = self.head.get()
        head = self.head.restore_to(checkpoint_id, now)
        # GC and subsumption never touch the head; a subsumption between our check and
        # the move is repaired by adding the marker back, if the files are still there.
        self.completed.add(target)
        problems = check_handles(self.store, target.handles, checksums=False)
        if problems:
            raise RestoreRefused(
                f"checkpoint {checkpoint_id} lost files while restoring: "
                + "; ".join(map(str, problems[:5]))
            )
        self.store.put(
            self.layout.restore(head.restore_generation),
            encode(
                "restore",
                1,
                {
                    "checkpoint_id": checkpoint_id,
                    "restore_generation": head.restore_generation,
                    "previous_head": previous.checkpoint_id,
                    "restored_at": to_iso(now),
                },
            ),
        )
        self.failures.reset(now, reason=f"restored to checkpoint {checkpoint_id}")
        return head

    def reset_failures(self) -> None:
        self.failures.reset(self.clock(), reason="explicit reset")


def _expired_message(pending: PendingCheckpoint, tasks: list[str]) -> str:
    shown = ", ".join(tasks[:5]) + (f" and {len(tasks) - 5} more" if len(tasks) > 5 else "")
    return f"not acknowledged within {pending.deadline - pending.trigger_time:g}s by: {shown}"
