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
from typing import Any

from batchpoint.errors import (
    CheckpointNotFound,
    ObjectAlreadyExists,
    ObjectNotFound,
    RecordError,
    TriggerRefused,
)
from batchpoint.protocol.checkpoint import (
    CHANGELOG_CHAIN_PROPERTY,
    INDEPENDENT_OF_BASE,
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
from batchpoint.protocol.control import (
    ControlRecord,
    ControlStore,
    ControlUnreadable,
    PendingEntry,
    settle_outcome,
)
from batchpoint.protocol.decider import CheckpointRequestDecider, base_of
from batchpoint.protocol.failures import CheckpointFailureManager, PipelineStatus
from batchpoint.protocol.head import HeadStore
from batchpoint.protocol.ids import CheckpointIDCounter
from batchpoint.protocol.layout import PipelineLayout, split_task_name
from batchpoint.protocol.pipeline import PipelineSpec
from batchpoint.protocol.reads import AckProgress, CheckpointReads
from batchpoint.protocol.restorer import CheckpointRestorer, RestoreResult
from batchpoint.protocol.verify import check_handles
from batchpoint.storage.base import ObjectStore

Clock = Callable[[], float]

__all__ = ["AckProgress", "CheckpointCoordinator", "Clock"]


class CheckpointCoordinator(CheckpointReads):
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
        self.control = ControlStore(store, self.layout, clock)
        self.head = HeadStore(store, self.layout, self.control)
        self.completed = CompletedCheckpointStore(store, self.layout, self.control)
        self.decider = CheckpointRequestDecider(self.pipeline, self.config, self.control.key)
        self.failures = CheckpointFailureManager(
            store, self.layout, self.config.tolerable_failed_checkpoints
        )

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
        """Start a checkpoint, or raise TriggerRefused with the reason.

        Admission is one CAS on the control record (the request decider checks
        max-concurrent and min-pause there and picks the base), so racing triggers are
        linearised; a refusal costs at most the allocated id. The pending record is
        written after the admission; a trigger that dies in between leaves an admitted
        entry that `settle` aborts at its deadline."""
        spec = self.load_spec()
        self.settle()
        self.finish_restore()
        now = self.clock()
        failure_state = self.failures.state()
        if failure_state.status is PipelineStatus.FAILED:
            raise TriggerRefused(
                CheckpointFailureReason.PIPELINE_FAILED,
                f"pipeline '{self.pipeline}' is FAILED and takes no checkpoints: "
                f"{failure_state.reason}. Reset it (batchpoint reset) or restore a checkpoint.",
            )
        control = self._control_for_trigger()
        history = self.ids.peek() > 1
        # A cheap first check, so an obvious refusal does not even consume an id.
        checked = self.decider.check(control, checkpoint_type, now, has_history=history)
        if (planned := base_of(checked)) is not None:
            self.decider.check_idle(
                checkpoint_type,
                self._read_for_trigger(planned),
                barrier,
                spec.expected_tasks(),
                base_held_elsewhere=_held_elsewhere(checked, planned) is not None,
            )
        checkpoint_id = self.ids.get_and_increment()
        deadline = now + (timeout if timeout is not None else self.config.timeout)

        def admit(current: ControlRecord | None) -> ControlRecord:
            return self.decider.admit(
                current, checkpoint_id, checkpoint_type, deadline, now, has_history=history
            )

        try:
            admitted, _ = self.control.update(admit)
        except ControlUnreadable as exc:
            raise TriggerRefused(CheckpointFailureReason.NEEDS_REPAIR, str(exc)) from None
        assert admitted is not None
        entry = admitted.pending_entry(checkpoint_id)
        assert entry is not None
        try:
            base = self._read_for_trigger(entry.base) if entry.base is not None else None
        except TriggerRefused:
            self.abort(checkpoint_id, CheckpointFailureReason.NEEDS_REPAIR, "base unreadable")
            raise
        props = {CHANGELOG_CHAIN_PROPERTY: self.config.changelog_chain, **(properties or {})}
        if (why := _held_elsewhere(admitted, entry.base)) is not None:
            props[INDEPENDENT_OF_BASE] = why
        pending = PendingCheckpoint(
            pipeline=self.pipeline,
            checkpoint_id=checkpoint_id,
            type=checkpoint_type,
            base_checkpoint_id=entry.base,
            restore_generation=entry.restore_generation,
            barrier=dict(barrier),
            base_barrier=dict(base.barrier) if base else {},
            expected_tasks=spec.expected_tasks(),
            trigger_time=now,
            deadline=deadline,
            properties=props,
        )
        self.store.create(self.layout.active(checkpoint_id), pending.encode())
        return pending

    def _control_for_trigger(self) -> ControlRecord | None:
        try:
            found = self.control.read()
        except ControlUnreadable as exc:
            raise TriggerRefused(CheckpointFailureReason.NEEDS_REPAIR, str(exc)) from None
        return found[0] if found else None

    def _read_for_trigger(self, checkpoint_id: int) -> PendingCheckpoint:
        """The trigger record of a new checkpoint's base (its barrier is where the new
        epoch starts): damage refuses the trigger, naming the record."""
        try:
            outcome = self.get_outcome(checkpoint_id)
            pending = outcome.pending if outcome else self.get_pending(checkpoint_id)
        except RecordError as exc:
            raise TriggerRefused(
                CheckpointFailureReason.NEEDS_REPAIR,
                f"pipeline '{self.pipeline}': the record of base checkpoint {checkpoint_id} "
                f"is unreadable ({exc}); restore another checkpoint or run `batchpoint repair`",
            ) from None
        if pending is None:
            raise TriggerRefused(
                CheckpointFailureReason.TOO_MANY_CONCURRENT,
                f"pipeline '{self.pipeline}': base checkpoint {checkpoint_id} was admitted by "
                "a concurrent trigger that has not written its record yet; retry",
            )
        return pending

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
        # Only this attempt's own files: under its operator's data folder in this
        # checkpoint, in a folder named by the attempt id. A handle pointing anywhere else
        # is another checkpoint's, another attempt's or another task's file (a sink
        # references its input channel's files), which is never ours to delete.
        data = self.layout.operator_data_prefix(ack.checkpoint_id, split_task_name(ack.task)[0])
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
        try:
            pending = self.get_pending(checkpoint_id)
        except RecordError:
            pending = None
        if pending is None:
            admitted = self._pending_or_admitted(checkpoint_id)
            if admitted is None:
                raise CheckpointNotFound(
                    f"pipeline '{self.pipeline}' has no checkpoint {checkpoint_id}"
                )
            if self.clock() <= admitted.deadline:
                return None  # its trigger may still be writing the record
            return self.abort(
                checkpoint_id,
                CheckpointFailureReason.FINALIZE_FAILED,
                "the trigger did not finish (no readable pending record)",
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
        control = self.control.load()
        if control.restore_generation != pending.restore_generation:
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
            pending = self._pending_or_admitted(checkpoint_id)
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
        half-done: every admitted entry and every pending record."""
        ids = {p.checkpoint_id for p in self.pending_checkpoints()}
        with contextlib.suppress(ControlUnreadable):
            ids.update(p.checkpoint_id for p in self.control.load().pending)
        settled = []
        for checkpoint_id in sorted(ids):
            try:
                outcome = self.try_finalize(checkpoint_id)
            except (CheckpointNotFound, RecordError):
                continue  # settled meanwhile, or damaged: the entry expires later
            if outcome is not None:
                settled.append(outcome)
        return settled

    def expire_overdue(self) -> list[CheckpointOutcome]:
        return [o for o in self.settle() if o.reason is CheckpointFailureReason.EXPIRED]

    # == after the outcome ===============================================================

    def _settle_outcome(self, outcome: CheckpointOutcome, won: bool) -> None:
        """Run the settling steps for an outcome we just wrote, or finish them for one
        someone else wrote, while its active marker or admitted entry says they are
        unfinished: redoing them later would undo newer decisions (count a failure
        again after a reset or restore)."""
        if won or self.store.exists(self.layout.active(outcome.checkpoint_id)):
            self._after_outcome(outcome)
            return
        with contextlib.suppress(ControlUnreadable):
            if self.control.load().pending_entry(outcome.checkpoint_id) is not None:
                self._after_outcome(outcome)

    def _after_outcome(self, outcome: CheckpointOutcome) -> None:
        """The control CAS first (retain or discard, head, subsumption: one write), then
        the idempotent follow-ups; the active marker goes last, so it stays as a
        reminder until all of them have been done once."""
        now = self.clock()
        pending = outcome.pending
        self.control.update(
            lambda current: settle_outcome(current, outcome, self.config.num_retained, now)
        )
        if outcome.status is CheckpointStatus.COMPLETED:
            if not pending.is_savepoint:
                self.failures.record_success(pending.checkpoint_id, now)
            for older in self._admitted():
                if older.checkpoint_id < pending.checkpoint_id and older.type is not (
                    CheckpointType.SAVEPOINT
                ):
                    self.abort(
                        older.checkpoint_id,
                        CheckpointFailureReason.SUBSUMED,
                        f"checkpoint {pending.checkpoint_id} completed first",
                    )
        else:
            assert outcome.reason is not None
            if not pending.is_savepoint:
                self.failures.record_failure(
                    pending.checkpoint_id, outcome.reason, outcome.message, now
                )
            for later in self._admitted():
                if later.base == pending.checkpoint_id:
                    self.abort(
                        later.checkpoint_id,
                        CheckpointFailureReason.BASE_ABORTED,
                        f"its base checkpoint {pending.checkpoint_id} was aborted",
                    )
        self.store.delete(self.layout.active(pending.checkpoint_id))

    def _admitted(self) -> list[PendingEntry]:
        try:
            return sorted(self.control.load().pending, key=lambda p: p.checkpoint_id)
        except ControlUnreadable:
            return []

    # == restore and reset ===============================================================

    def restore(
        self,
        checkpoint_id: int | None = None,
        *,
        checksums: bool | None = None,
        claim: bool = False,
    ) -> RestoreResult:
        """Point the head at a retained completed checkpoint or savepoint (the newest
        intact, unquarantined one when none is given) in one CAS, then rewind the sinks.
        `claim`: take ownership of it (CLAIM mode; see protocol/restorer.py). Returns a
        RestoreResult (head, findings)."""
        return CheckpointRestorer(self).restore(checkpoint_id, checksums=checksums, claim=claim)

    def finish_restore(self) -> None:
        """Roll a restore that has not rewound its sinks forward (any actor may)."""
        CheckpointRestorer(self).finish()

    def reset_failures(self) -> None:
        self.failures.reset(self.clock(), reason="explicit reset")


def _expired_message(pending: PendingCheckpoint, tasks: list[str]) -> str:
    shown = ", ".join(tasks[:5]) + (f" and {len(tasks) - 5} more" if len(tasks) > 5 else "")
    return f"not acknowledged within {pending.deadline - pending.trigger_time:g}s by: {shown}"


def _held_elsewhere(control: ControlRecord, base: int | None) -> str | None:
    """Why a checkpoint on `base` must not share its files, or None: a base that this
    pipeline's retention will never subsume (a savepoint, a checkpoint kept forever, not
    claimed by a restore) belongs to whoever holds it, and Flink's NO_CLAIM makes the
    first checkpoint after it independent of its files."""
    if base is None:
        return None
    entry = next((e for e in control.retained if e.checkpoint_id == base), None)
    if entry is None:
        return f"the base, checkpoint {base}, is not retained"
    if entry.subsumable:
        return None
    kind = "savepoint" if entry.type is CheckpointType.SAVEPOINT else "checkpoint retained forever"
    return f"the base, checkpoint {base}, is a {kind} not claimed by this pipeline's retention"
