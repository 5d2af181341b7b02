"""How a checkpoint settles, as pure rules over its records: the ack deadline, the audit
deadline, what an undecided finalize waits for, and how a scheduler run that is over
leaves its checkpoint. Nothing here reads or writes storage: the finalizer
(protocol/finalizer.py) and the use cases (ops/runs.py, ops/epoch.py) decide with these
functions and carry the decision out.

The deadlines (both fixed at trigger, `PendingCheckpoint.deadline`):
- acks: a checkpoint with a task missing past its deadline, or with an ack written after
  it, expires (`overdue_tasks`);
- audit: an audited checkpoint (`PendingCheckpoint.requires_audit`) is completed only by
  its audit's verdict; with every ack in it waits for that verdict until its deadline,
  and expires after it (`audit_wait`).

Before both: a checkpoint a restore or a stop-with-savepoint took out of `pending` never
completes, and its abort is not its failure (`superseded`). Settled after its deadline it
still aborts so (RESTORED or STOPPED, never counted), not EXPIRED (counted): the finalizer
and a scheduler run's settlement both ask `superseded` first.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from batchpoint.protocol import stopping
from batchpoint.protocol.checkpoint import (
    AckRecord,
    CheckpointFailureReason,
    CheckpointOutcome,
    CheckpointStatus,
    PendingCheckpoint,
)
from batchpoint.protocol.control import ControlRecord
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.timeline import on_timeline

if TYPE_CHECKING:
    # Only its shape: the rules read nothing themselves.
    from batchpoint.protocol.reads import AckProgress


@dataclass(frozen=True)
class Abort:
    """A decision to abort a checkpoint: the outcome's reason and message."""

    reason: CheckpointFailureReason
    message: str


class FinalizeWait(enum.StrEnum):
    """Why a finalize decided nothing yet (a retry later may)."""

    ACKS = "acks"  # some expected task has not acknowledged (or the trigger is still writing)
    AUDIT = "audit"  # audited: only its audit's verdict completes it
    BASE = "base"  # its base checkpoint (a concurrent one) is still pending


# -- before the deadlines ---------------------------------------------------------------


def superseded(pending: PendingCheckpoint, control: ControlRecord) -> Abort | None:
    """Why the checkpoint must never complete, whatever its acks and deadlines say: a
    restore since its trigger (RESTORED), or a stop-with-savepoint that abandoned it
    (STOPPED); else None. Asked before the deadlines: neither is the checkpoint's
    failure, so neither counts against the tolerable failures, however late it settles."""
    if not on_timeline(pending.restore_generation, control.restore_generation):
        return Abort(CheckpointFailureReason.RESTORED, "a restore happened after it was triggered")
    if (why := stopping.abandoned(control, pending.checkpoint_id)) is not None:
        return Abort(CheckpointFailureReason.STOPPED, why)
    return None


# -- the ack deadline -------------------------------------------------------------------


def overdue_tasks(
    pending: PendingCheckpoint, acks: Mapping[TaskId, AckRecord], now: float
) -> list[TaskId]:
    """The tasks that make the checkpoint expire, or none: those still missing once its
    deadline passed, else those whose ack was written after it."""
    missing = [t for t in pending.expected_tasks if t not in acks]
    late = [a.task for a in acks.values() if a.acked_at > pending.deadline]
    if (missing and now > pending.deadline) or late:
        return missing or late
    return []


def expired_message(pending: PendingCheckpoint, tasks: Sequence[TaskId]) -> str:
    """The message of an EXPIRED outcome, naming (the first few of) `tasks`."""
    names = [str(t) for t in tasks] or ["nobody missing"]
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    shown = ", ".join(names[:5]) + more
    return f"not acknowledged within {pending.deadline - pending.trigger_time:g}s by: {shown}"


# -- the audit deadline -----------------------------------------------------------------


class AuditWait(enum.Enum):
    NONE = "none"  # nothing to wait for: not audited, or the caller is its audit
    OPEN = "open"  # only its audit may complete it, and its deadline has not passed
    OVERDUE = "overdue"  # its audit gave no verdict by its deadline: it expires


def audit_wait(pending: PendingCheckpoint, now: float, *, audited: bool = False) -> AuditWait:
    """Where an audited checkpoint stands against its audit's deadline, for a caller
    that is its audit with a passing verdict (`audited`) or anyone else."""
    if not pending.requires_audit or audited:
        return AuditWait.NONE
    return AuditWait.OVERDUE if now > pending.deadline else AuditWait.OPEN


def audit_expired(pending: PendingCheckpoint) -> Abort:
    return Abort(
        CheckpointFailureReason.EXPIRED,
        "every task acknowledged it, but its audit gave no verdict within "
        f"{pending.deadline - pending.trigger_time:g}s",
    )


def deadline_verdict(
    pending: PendingCheckpoint, acks: Mapping[TaskId, AckRecord], now: float, *, audited: bool
) -> Abort | FinalizeWait | None:
    """Both deadlines at once, as a finalize reads them: expire (an Abort), wait for
    acks or for the audit, or None when the acks and the audit allow completing it.
    Anyone but its audit waits for the audit, acks missing or not: only the audit's
    verdict completes an audited checkpoint."""
    overdue = overdue_tasks(pending, acks, now)
    if overdue:
        return Abort(CheckpointFailureReason.EXPIRED, expired_message(pending, overdue))
    wait = audit_wait(pending, now, audited=audited)
    if any(t not in acks for t in pending.expected_tasks):
        return FinalizeWait.AUDIT if wait is AuditWait.OPEN else FinalizeWait.ACKS
    if wait is AuditWait.OVERDUE:
        return audit_expired(pending)
    return FinalizeWait.AUDIT if wait is AuditWait.OPEN else None


# -- the base ---------------------------------------------------------------------------


def unrestored_import(base: PendingCheckpoint, head: int | None) -> Abort | None:
    """Why a checkpoint built on `base` may not complete, when `base` is an imported
    savepoint that no restore made the head: an import is beside the timeline until a
    restore chooses it, so what is built on it must never move the head. Only an older
    release admitted such checkpoints (`decider.base_of` skips imports)."""
    if not base.properties.is_imported or base.checkpoint_id == head:
        return None
    return Abort(
        CheckpointFailureReason.BASE_ABORTED,
        f"its base checkpoint {base.checkpoint_id} is an imported savepoint that no restore "
        "made the head (an import is never a base until restored to)",
    )


# -- a scheduler run that is over -------------------------------------------------------


class SettlementAction(enum.StrEnum):
    """What settling a run did with its checkpoint (its value is what reports show)."""

    NONE = "none"  # settled by another actor, or nothing to settle (waits for its base)
    FINALIZED = "finalized"  # every ack was in: finalized (the finalize task failed)
    DECLINED = "declined"  # a task declined, or an operator failed for good
    EXPIRED = "expired"  # past its deadline (acks missing or late, or no audit verdict)
    ABORTED = "aborted"  # the run ended early, an audit gave no verdict, a restore or
    # a stop superseded it, or its finalize found it could not complete


@dataclass(frozen=True)
class RunSettlementDecision:
    """The action, with what carrying it out needs: the outcome an abort writes, or
    the tasks to decline on behalf of operators that failed for good (task -> reason)."""

    action: SettlementAction
    abort: Abort | None = None
    decline: Mapping[TaskId, str] = field(default_factory=dict)


def decide_settlement(
    pending: PendingCheckpoint,
    progress: AckProgress,
    failed_operators: Mapping[str, str],
    now: float,
    *,
    control: ControlRecord | None = None,
) -> RunSettlementDecision:
    """How a run that is over leaves its undecided checkpoint, whatever happened:

    * a restore or a stop-with-savepoint took it out of `pending` (`superseded`, judged
      on `control` when the caller could read it): abort it so, whatever else holds;
    * a decline exists: abort it as DECLINED;
    * an operator failed for good with subtasks missing: decline them on its behalf
      (the checkpoint then aborts at once, not at its deadline);
    * every task acked (the finalize task failed): finalize now; but an audited one
      without its audit's verdict before its deadline aborts as FINALIZE_FAILED (no
      other task of the run will give one, and it must not hold the next trigger back);
    * past its deadline: it expired;
    * otherwise the run was stopped early: abort it, as nothing else would finish it
      before its deadline."""
    if control is not None and (gone := superseded(pending, control)) is not None:
        return RunSettlementDecision(SettlementAction.ABORTED, gone)
    if progress.declines:
        d = progress.declines[0]
        declined = Abort(CheckpointFailureReason.DECLINED, f"task {d.task} declined: {d.reason}")
        return RunSettlementDecision(SettlementAction.DECLINED, declined)
    decline = {
        task: failed_operators[operator]
        for task in progress.missing
        if (operator := task.operator) in failed_operators
    }
    if decline:
        return RunSettlementDecision(SettlementAction.DECLINED, decline=decline)
    if progress.all_acknowledged:
        if audit_wait(pending, now) is AuditWait.OPEN:
            message = (
                "every task acknowledged it, but its run ended without the audit's verdict "
                "(the audit failed or did not run)"
            )
            no_verdict = Abort(CheckpointFailureReason.FINALIZE_FAILED, message)
            return RunSettlementDecision(SettlementAction.ABORTED, no_verdict)
        return RunSettlementDecision(SettlementAction.FINALIZED)
    if now >= pending.deadline:
        expired = Abort(
            CheckpointFailureReason.EXPIRED,
            expired_message(pending, progress.missing),
        )
        return RunSettlementDecision(SettlementAction.EXPIRED, expired)
    message = (
        "the run that triggered it ended before every task acknowledged "
        f"(missing: {', '.join(map(str, progress.missing[:5]))})"
    )
    stopped = Abort(CheckpointFailureReason.EXPIRED, message)
    return RunSettlementDecision(SettlementAction.ABORTED, stopped)


#: The reasons a finalize itself aborts with; any other reason is another actor's.
_FINALIZE_ABORTS = frozenset(
    {
        CheckpointFailureReason.EXPIRED,
        CheckpointFailureReason.RESTORED,
        CheckpointFailureReason.STOPPED,
        CheckpointFailureReason.NEEDS_REPAIR,
        CheckpointFailureReason.BASE_ABORTED,
        CheckpointFailureReason.FINALIZE_FAILED,
    }
)


def settled_action(
    decision: RunSettlementDecision, outcome: CheckpointOutcome | None
) -> SettlementAction:
    """What carrying out `decision` did, judged by the outcome that holds afterwards, not
    by the plan: another actor may have decided between the run's reads and its write
    (the outcome is write-once), and a finalize may end in an abort. NONE when the
    outcome is not one the decision writes (another actor's) or there is none."""
    if outcome is None:
        return SettlementAction.NONE  # a finalize that waits for its base decided nothing
    if decision.abort is not None:
        ours = (outcome.reason, outcome.message) == (decision.abort.reason, decision.abort.message)
        is_ours = outcome.status is CheckpointStatus.ABORTED and ours
        return decision.action if is_ours else SettlementAction.NONE
    if decision.decline:
        declined = outcome.reason is CheckpointFailureReason.DECLINED
        return SettlementAction.DECLINED if declined else SettlementAction.NONE
    if decision.action is not SettlementAction.FINALIZED:
        return SettlementAction.NONE
    if outcome.status is CheckpointStatus.COMPLETED:
        return SettlementAction.FINALIZED
    if outcome.reason is CheckpointFailureReason.EXPIRED:
        return SettlementAction.EXPIRED
    if outcome.reason in _FINALIZE_ABORTS:
        return SettlementAction.ABORTED
    return SettlementAction.NONE
