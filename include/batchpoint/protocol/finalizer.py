"""Deciding a checkpoint's outcome and settling after it (Flink's
PendingCheckpoint.finalizeCheckpoint and abort, and what its coordinator does after: the
completed checkpoint store, subsumption, the failure manager).

decide  The outcome is one write-once record (invariant 1: no race between a finalizer
        and a timeout can write both). COMPLETED only when every expected task acked in
        time, the audit (if the checkpoint has one) passed, the checkpoint is on the
        current timeline and not abandoned by a stop-with-savepoint (protocol/stopping.py),
        its base completed, and every file it references is intact
        (invariant 2); else ABORTED with the reason. A restore or a stop is judged
        before the deadlines (`settlement.superseded`): it aborts the checkpoint RESTORED
        or STOPPED, never counted, even past its deadline. The deadlines are
        protocol/settlement.py's, the restore generation protocol/timeline.py's.
settle  After the outcome: one CAS on the control record (retain or queue for GC, subsume,
        move the head: `settle_outcome`), count a success or a failure, abort what the
        outcome dooms (older periodic checkpoints it subsumes, checkpoints built on an
        aborted one), and remove the active marker last, so that it stays as a reminder
        until all of that was done once. Anyone may finish what a crash left undone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping

from attrs import define

from batchpoint.errors import CheckpointNotFound, RecordError
from batchpoint.protocol.checkpoint import (
    AckRecord,
    CheckpointFailureReason,
    CheckpointOutcome,
    CheckpointStatus,
    CheckpointType,
    CompletedCheckpoint,
    PendingCheckpoint,
)
from batchpoint.protocol.checkpoint_files import CheckpointFiles
from batchpoint.protocol.checkpoint_records import CheckpointRecords
from batchpoint.protocol.completed_store import settle_outcome
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.control import ControlRecord, ControlUnreadable, PendingEntry
from batchpoint.protocol.control_store import ControlStore
from batchpoint.protocol.failures import CheckpointFailureManager
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.ports import Clock
from batchpoint.protocol.settlement import (
    Abort,
    FinalizeWait,
    deadline_verdict,
    expired_message,
    superseded,
    unrestored_import,
)

#: An audit's verdict on the checkpoint as it would complete: None when it passes, else
#: why it failed (the message of the QUALITY_GATE outcome).
AuditJudge = Callable[[CompletedCheckpoint], str | None]

#: Why what the checkpoint read of other pipelines is no longer their history (a restore
#: of one took it back since the epoch read it), or None. The runtime's
#: (runtime/upstream_reads.py): reading another pipeline's records is not the protocol's.
ReadsCheck = Callable[[PendingCheckpoint], str | None]


def completed_of(
    pending: PendingCheckpoint, acks: Mapping[TaskId, AckRecord], now: float
) -> CompletedCheckpoint:
    """The checkpoint as it completes: every expected task's ack, in the expected order
    (every one must be in)."""
    return CompletedCheckpoint(pending, tuple(acks[t] for t in pending.expected_tasks), now)


@define(kw_only=True, slots=False, eq=False)
class CheckpointFinalizer:
    _records: CheckpointRecords
    _files: CheckpointFiles
    _control: ControlStore
    _failures: CheckpointFailureManager
    _config: CheckpointConfig
    _clock: Clock
    _check_reads: ReadsCheck | None = None

    # == decide ==========================================================================

    def try_finalize(
        self, checkpoint_id: int, *, audited: bool = False
    ) -> CheckpointOutcome | None:
        """`finalize`, with None for anything still to wait for."""
        decided = self.finalize(checkpoint_id, audited=audited)
        return None if isinstance(decided, FinalizeWait) else decided

    def finalize(
        self, checkpoint_id: int, *, audited: bool = False
    ) -> CheckpointOutcome | FinalizeWait:
        """Complete the checkpoint if every expected task acknowledged; else what it
        waits for (while it has not expired). Idempotent: a settled checkpoint returns
        its outcome, after finishing any step a crash left undone.

        A checkpoint that requires an audit (`PendingCheckpoint.requires_audit`) is
        completed only by its audit, which passes `audited=True` once its state passed
        the quality gate (`complete_audited`). Anyone else (`settle` at the next trigger,
        a cleanup task) leaves it pending for the audit to be retried, and expires it
        past its deadline: completing it would publish state nobody validated."""
        outcome = self._records.get_outcome(checkpoint_id)
        if outcome is not None:
            self._settle_outcome(outcome, won=False)
            return outcome
        try:
            pending = self._records.get_pending(checkpoint_id)
        except RecordError:
            pending = None
        if pending is None:
            return self._without_record(checkpoint_id)
        now = self._clock()
        acks = self._records.acks(checkpoint_id)
        control = self._readable_control()
        # A restore or a stop first: judged EXPIRED instead, the abort of a checkpoint
        # they took out would count as its failure (docs/design/concurrency.md).
        verdict = superseded(pending, control) if control is not None else None
        if verdict is None:
            verdict = deadline_verdict(pending, acks, now, audited=audited)
        if verdict is None:
            verdict = self._finalize_blocker(pending, control)
        if verdict is None and self._check_reads is not None:
            # Checked when the epoch read, and again here: an upstream restore between
            # that read and this completion must not publish what it took back.
            why = self._check_reads(pending)
            verdict = Abort(CheckpointFailureReason.RESTORED, why) if why else None
        completed = completed_of(pending, acks, now) if verdict is None else None
        if completed is not None:
            verdict = self._file_problems(completed)
        if isinstance(verdict, FinalizeWait):
            return verdict
        if verdict is not None:
            return self.abort(checkpoint_id, verdict.reason, verdict.message)
        # A stop-with-savepoint: nothing it abandoned may complete after it.
        self._abort_abandoned(pending)
        won, outcome = self._decide(
            CheckpointOutcome(CheckpointStatus.COMPLETED, pending, now, completed=completed)
        )
        self._settle_outcome(outcome, won)
        return outcome

    def complete_audited(
        self, checkpoint_id: int, judge: AuditJudge
    ) -> CheckpointOutcome | FinalizeWait:
        """The audit's finalize (write-audit-publish): once every ack is in, `judge` the
        checkpoint as it would complete; a failing verdict aborts it (QUALITY_GATE), a
        passing one completes it like `finalize(audited=True)`. Idempotent: a settled
        checkpoint returns its outcome without a verdict."""
        outcome = self._records.get_outcome(checkpoint_id)
        if outcome is not None:
            self._settle_outcome(outcome, won=False)
            return outcome
        pending = self._records.get_checkpoint(checkpoint_id)
        if (gone := self._superseded(pending)) is not None:
            return self.abort(checkpoint_id, gone.reason, gone.message)
        acks = self._records.acks(checkpoint_id)
        missing = [t for t in pending.expected_tasks if t not in acks]
        now = self._clock()
        if missing:
            if now <= pending.deadline:
                return FinalizeWait.ACKS
            # Not finalize: if the last ack landed meanwhile it would complete the
            # checkpoint unaudited. Expiring it is what finalize would have done.
            return self.expire(checkpoint_id, missing)
        rejection = judge(completed_of(pending, acks, now))
        if rejection is not None:
            return self.abort(checkpoint_id, CheckpointFailureReason.QUALITY_GATE, rejection)
        return self.finalize(checkpoint_id, audited=True)

    def _without_record(self, checkpoint_id: int) -> CheckpointOutcome | FinalizeWait:
        """An admitted checkpoint whose pending record is missing or unreadable."""
        admitted = self._records.pending_or_admitted(checkpoint_id)
        if admitted is None:
            return self._decided_meanwhile(checkpoint_id)
        if self._clock() <= admitted.deadline:
            return FinalizeWait.ACKS  # its trigger may still be writing the record
        return self.abort(
            checkpoint_id,
            CheckpointFailureReason.FINALIZE_FAILED,
            "the trigger did not finish (no readable pending record)",
        )

    def _decided_meanwhile(self, checkpoint_id: int) -> CheckpointOutcome:
        """No outcome at the first read and no pending record now: a decision may have
        written its outcome and settled the record between the two reads (a finalize
        and an expiry racing). That outcome holds; without one there is no checkpoint."""
        outcome = self._records.get_outcome(checkpoint_id)
        if outcome is None:
            raise CheckpointNotFound(
                f"pipeline '{self._records.pipeline}' has no checkpoint {checkpoint_id}"
            )
        self._settle_outcome(outcome, won=False)
        return outcome

    def _readable_control(self) -> ControlRecord | None:
        """The control record, or None when it cannot be read: then a restore or a stop
        is not judged before the deadlines, and completing reads it again
        (`_finalize_blocker`), which raises."""
        try:
            return self._control.load()
        except ControlUnreadable:
            return None

    def _superseded(self, pending: PendingCheckpoint) -> Abort | None:
        """`settlement.superseded` on the control record as it stands, if readable."""
        control = self._readable_control()
        return superseded(pending, control) if control is not None else None

    def _finalize_blocker(
        self, pending: PendingCheckpoint, control: ControlRecord | None
    ) -> FinalizeWait | Abort | None:
        """What keeps a checkpoint with every ack in from completing, judged on `control`
        (read now when None): a restore since its trigger or a stop-with-savepoint that
        abandoned it (`superseded`), or its base (still pending: wait; aborted or gone:
        abort; an import no restore made the head: abort, as an older release built
        checkpoints on an import being imported)."""
        control = self._control.load() if control is None else control
        if (gone := superseded(pending, control)) is not None:
            return gone
        if control.pending_entry(pending.checkpoint_id) is None:
            # Admitted under a control record that a repair rebuilt before this trigger
            # wrote its record, so the repair could not know it. Completed, it would be in
            # no set: never retained, and its files never collected. Aborted, it is queued.
            return Abort(
                CheckpointFailureReason.NEEDS_REPAIR,
                "the control record does not admit it (a repair rebuilt the record without it)",
            )
        base_id = pending.base_checkpoint_id
        if base_id is None:
            return None
        base = self._records.get_outcome(base_id)
        base_pending = base.pending if base else self._records.get_pending(base_id)
        if base_pending is None:
            return Abort(
                CheckpointFailureReason.BASE_ABORTED,
                f"its base checkpoint {base_id} no longer exists",
            )
        if (refused := unrestored_import(base_pending, control.head)) is not None:
            return refused
        if base is None:
            return FinalizeWait.BASE
        if base.status is CheckpointStatus.ABORTED:
            return Abort(
                CheckpointFailureReason.BASE_ABORTED, f"its base checkpoint {base_id} was aborted"
            )
        return None

    def _file_problems(self, completed: CompletedCheckpoint) -> Abort | None:
        problems = self._files.check(completed.handles, checksums=self._config.verify_checksums)
        if not problems:
            return None
        listed = "; ".join(map(str, problems[:5]))
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        return Abort(
            CheckpointFailureReason.FINALIZE_FAILED,
            f"{len(problems)} referenced file(s) are not intact: {listed}{more}",
        )

    def _abort_abandoned(self, pending: PendingCheckpoint) -> None:
        """Before a stop-with-savepoint's outcome: give every checkpoint its admission
        abandoned an outcome (ABORTED, create-once). One whose COMPLETED won that race
        keeps it: it completed before the stop (and, no longer pending, is never
        retained nor published)."""
        if not (pending.is_savepoint and pending.properties.stop_pipeline):
            return
        try:
            stop = self._control.load().stopping
        except ControlUnreadable:
            return
        if stop is None or stop.savepoint != pending.checkpoint_id:
            return
        why = f"stop-with-savepoint {stop.savepoint} abandoned it after it was triggered"
        for abandoned in stop.abandoned:
            # No record (its trigger died) or a damaged one: as a restore's roll-forward,
            # leave it; not pending, it can never complete (`stopping.abandoned`).
            with contextlib.suppress(CheckpointNotFound, RecordError):
                self.abort(abandoned, CheckpointFailureReason.STOPPED, why)

    # == abort, expire ===================================================================

    def abort(
        self,
        checkpoint_id: int,
        reason: CheckpointFailureReason,
        message: str = "",
        triggered_at: float | None = None,
    ) -> CheckpointOutcome:
        """Abort a pending checkpoint; returns the outcome that holds (maybe a
        COMPLETED one that won the race). `triggered_at`: its trigger's time, from a
        trigger that aborts what it admitted before writing the pending record."""
        outcome = self._records.get_outcome(checkpoint_id)
        if outcome is not None:
            self._settle_outcome(outcome, won=False)
            return outcome
        pending = self._records.pending_or_admitted(checkpoint_id, triggered_at)
        if pending is None:
            return self._decided_meanwhile(checkpoint_id)
        return self.decide_abort(pending, Abort(reason, message))[1]

    def decide_abort(
        self, pending: PendingCheckpoint, abort: Abort
    ) -> tuple[bool, CheckpointOutcome]:
        """Write the ABORTED outcome (if none holds yet) and settle: whether ours won,
        and the outcome that holds."""
        aborted = CheckpointOutcome(
            CheckpointStatus.ABORTED,
            pending,
            self._clock(),
            reason=abort.reason,
            message=abort.message or abort.reason.message,
        )
        won, outcome = self._decide(aborted)
        self._settle_outcome(outcome, won)
        return won, outcome

    def expire(
        self, checkpoint_id: int, missing: Iterable[TaskId] | None = None
    ) -> CheckpointOutcome:
        """Abort the checkpoint as EXPIRED, naming the tasks that did not acknowledge it
        in time (those still missing when `missing` is None). A checkpoint already
        settled keeps its outcome."""
        outcome = self._records.get_outcome(checkpoint_id)
        if outcome is not None:
            return outcome
        pending = self._records.get_checkpoint(checkpoint_id)
        if (gone := self._superseded(pending)) is not None:
            return self.abort(checkpoint_id, gone.reason, gone.message)
        tasks = list(self._records.progress(checkpoint_id).missing if missing is None else missing)
        return self.abort(
            checkpoint_id,
            CheckpointFailureReason.EXPIRED,
            expired_message(pending, tasks),
        )

    def _decide(self, outcome: CheckpointOutcome) -> tuple[bool, CheckpointOutcome]:
        """Write the outcome once. Returns (whether ours won, the outcome that holds)."""
        return self._records.create_outcome(outcome)

    def settle(self) -> list[CheckpointOutcome]:
        """Expire overdue checkpoints, finalize complete ones (except those that await
        their audit), and finish the settling steps of any checkpoint a crash left
        half-done: every admitted entry and every pending record."""
        ids = {p.checkpoint_id for p in self._records.pending_checkpoints()}
        with contextlib.suppress(ControlUnreadable):
            ids.update(p.checkpoint_id for p in self._control.load().pending)
        settled = []
        for checkpoint_id in sorted(ids):
            try:
                outcome = self.try_finalize(checkpoint_id)
            except (CheckpointNotFound, RecordError):
                continue  # settled meanwhile, or damaged: the entry expires later
            if outcome is not None:
                settled.append(outcome)
        return settled

    # == after the outcome ===============================================================

    def _settle_outcome(self, outcome: CheckpointOutcome, won: bool) -> None:
        """Run the settling steps for an outcome we just wrote, or finish them for one
        someone else wrote, while its active marker or admitted entry says they are
        unfinished: redoing them later would undo newer decisions (count a failure
        again after a reset or restore)."""
        if won or self._records.has_pending(outcome.checkpoint_id):
            self._after_outcome(outcome)
            return
        with contextlib.suppress(ControlUnreadable):
            if self._control.load().pending_entry(outcome.checkpoint_id) is not None:
                self._after_outcome(outcome)

    def _after_outcome(self, outcome: CheckpointOutcome) -> None:
        """The control CAS first (retain or discard, head, subsumption: one write), then
        the idempotent follow-ups; the active marker goes last, so it stays as a
        reminder until all of them have been done once."""
        now = self._clock()
        if outcome.status is CheckpointStatus.ABORTED:
            self._abort_abandoned(outcome.pending)  # while the record still names them
        self._control.update(
            lambda current: settle_outcome(current, outcome, self._config.num_retained, now)
        )
        if outcome.status is CheckpointStatus.COMPLETED:
            self._after_completed(outcome.pending, now)
        else:
            self._after_aborted(outcome, now)
        self._records.delete_pending(outcome.checkpoint_id)

    def _after_completed(self, pending: PendingCheckpoint, now: float) -> None:
        if not pending.is_savepoint:
            self._failures.record_success(pending.checkpoint_id, now)
        if pending.properties.is_imported:
            return  # beside the timeline: it subsumes none of the checkpoints on it
        for older in self._admitted():
            if older.checkpoint_id < pending.checkpoint_id and older.type is not (
                CheckpointType.SAVEPOINT
            ):
                self.abort(
                    older.checkpoint_id,
                    CheckpointFailureReason.SUBSUMED,
                    f"checkpoint {pending.checkpoint_id} completed first",
                )

    def _after_aborted(self, outcome: CheckpointOutcome, now: float) -> None:
        pending = outcome.pending
        assert outcome.reason is not None
        if not pending.is_savepoint:
            self._failures.record_failure(
                pending.checkpoint_id, outcome.reason, outcome.message, now
            )
        for later in self._admitted():
            if later.base == pending.checkpoint_id:
                self.abort(
                    later.checkpoint_id,
                    CheckpointFailureReason.BASE_ABORTED,
                    f"its base checkpoint {pending.checkpoint_id} was aborted",
                )

    def _admitted(self) -> list[PendingEntry]:
        try:
            return sorted(self._control.load().pending, key=lambda p: p.checkpoint_id)
        except ControlUnreadable:
            return []
