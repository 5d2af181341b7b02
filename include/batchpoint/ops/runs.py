"""The coordinator's steps around one epoch when a scheduler runs it as separate tasks
(the Airflow DAGs; any other orchestrator could call the same functions).

A scheduler adds two problems the in-process `LocalEpochRunner` does not have: a task may
run again (retries, a re-run of the run), so the trigger must be idempotent per run and
every try must be a new *attempt*; and a run may end with the checkpoint still pending
(a task killed for good, a timeout), so something must settle it with the right reason
and remove what it staged.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from batchpoint.errors import CheckpointNotFound, RecordError
from batchpoint.ops.audit import audited_properties
from batchpoint.ops.epoch import finalize
from batchpoint.ops.maintenance import gc
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointOutcome,
    CheckpointStatus,
    CheckpointType,
    DeclineResult,
    PendingCheckpoint,
)
from batchpoint.protocol.control import ControlRecord, ControlUnreadable
from batchpoint.protocol.pipeline_ports import CheckpointDecisions, PipelineHistory
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.protocol.settlement import (
    RunSettlementDecision,
    SettlementAction,
    decide_settlement,
    settled_action,
)
from batchpoint.runtime.driver import PipelineDriver

#: The pending checkpoint's property that names the scheduler run which triggered it.
RUN_PROPERTY = "scheduler_run_id"


def attempt_id(run_id: str, try_number: int, map_index: int = -1) -> str:
    """A storage-safe attempt id, the same for one try of one run and new for each retry:
    acks and staged files of different tries then never collide (a retry after an ack
    learns DUPLICATE; a retry after a crash writes next to, not over, the dead try)."""
    digest = hashlib.sha1(run_id.encode(), usedforsecurity=False).hexdigest()[:10]
    suffix = f"-m{map_index}" if map_index >= 0 else ""
    return f"af-{digest}-t{try_number}{suffix}"


_ATTEMPT = re.compile(r"af-(?P<digest>[0-9a-f]{10})-t(?P<try>\d+)(?:-m(?P<map>\d+))?")
#: How far back a run's checkpoint is looked for: a run's checkpoint is among the newest.
RUN_SEARCH_DEPTH = 200


def try_of_attempt(attempt: str, run_id: str) -> tuple[int, int] | None:
    """The (try number, map index) of an `attempt_id` of `run_id`; None for an attempt
    of another run or not made by `attempt_id` (a local runner's, a cleanup's)."""
    match = _ATTEMPT.fullmatch(attempt)
    if match is None:
        return None
    try_number, map_index = int(match["try"]), int(match["map"] or -1)
    return (try_number, map_index) if attempt_id(run_id, try_number, map_index) == attempt else None


def checkpoint_of_run(
    history: PipelineHistory,
    run_id: str,
    checkpoint_type: CheckpointType | None = None,
    depth: int = RUN_SEARCH_DEPTH,
) -> int | None:
    """The checkpoint the scheduler run `run_id` triggered (its pending record names the
    run, `trigger_for_run`), among the newest `depth`; None if it triggered none. A run
    cleared and run again triggers a new checkpoint under the same id: the newest wins."""
    for checkpoint_id in sorted(history.checkpoint_ids(), reverse=True)[:depth]:
        try:
            pending = history.get_checkpoint(checkpoint_id)
        except (CheckpointNotFound, RecordError):
            continue  # a pruned or unreadable record names no run
        if pending.properties.scheduler_run_id != run_id:
            continue
        if checkpoint_type is None or pending.type is checkpoint_type:
            return checkpoint_id
    return None


def trigger_for_run(
    driver: PipelineDriver,
    run_id: str,
    checkpoint_type: CheckpointType = CheckpointType.CHECKPOINT,
    properties: CheckpointProperties | None = None,
    *,
    audit: bool = False,
) -> PendingCheckpoint:
    """Trigger the run's checkpoint, or return the one it triggered already: a retried
    trigger task must not start a second epoch (nor be refused by max-concurrent because
    of its own first try). With `audit`, only its audit may complete it. Raises
    TriggerRefused like `PipelineDriver.trigger`."""
    ours = _checkpoint_of_earlier_try(driver.coordinator, run_id, checkpoint_type)
    if ours is not None:
        return ours
    properties = replace(properties or CheckpointProperties(), scheduler_run_id=run_id)
    if audit:
        properties = audited_properties(properties)
    return driver.trigger(checkpoint_type, properties=properties)


def _checkpoint_of_earlier_try(
    coordinator: CheckpointDecisions, run_id: str, checkpoint_type: CheckpointType
) -> PendingCheckpoint | None:
    """The pending checkpoint an earlier try of the run triggered, of its type: the
    pipeline's savepoint DAG and checkpoint DAG can have runs of one id (`dags test`
    and the API name them after their date), and neither may take, nor abort, the
    other's. A try that died between its admission and its pending record left only an
    entry naming the run: it is aborted now, not at its deadline, where it held the
    retry back (refused by max-concurrent, so the run skipped). A try still alive that
    writes its record after this abort runs an epoch whose acks are discarded."""
    for pending in coordinator.pending_checkpoints():
        if pending.properties.scheduler_run_id == run_id and pending.type is checkpoint_type:
            return pending
    ours = (run_id, checkpoint_type)
    try:
        control = coordinator.control_record()
        entries = [e for e in (control.pending if control else ()) if (e.run_id, e.type) == ours]
    except ControlUnreadable:
        return None  # the trigger refuses, saying so
    for entry in entries:
        try:
            written = coordinator.get_pending(entry.checkpoint_id)
        except RecordError:
            written = None
        if written is not None:  # written since the listing: that try is alive
            return written
        why = f"its trigger (run {run_id}) stopped before writing its record; the run retried"
        coordinator.abort(entry.checkpoint_id, CheckpointFailureReason.TRIGGER_FAILED, why)
    return None


def decline_operator(
    coordinator: CheckpointDecisions,
    checkpoint_id: int,
    operator: str,
    attempt: str,
    reason: str,
) -> list[DeclineResult]:
    """Decline, on behalf of an operator whose job died without declining (killed, out of
    memory, lost executor) and will not be retried, every subtask that has not acked: the
    checkpoint then aborts at once instead of waiting for its timeout."""
    progress = coordinator.progress(checkpoint_id)
    tasks = [t for t in progress.missing if t.operator == operator]
    return [coordinator.decline(checkpoint_id, t, attempt, reason) for t in tasks]


@dataclass
class RunSettlement:
    """How a scheduler run left its checkpoint."""

    checkpoint_id: int
    outcome: CheckpointOutcome | None
    action: SettlementAction  # what settle_run did, by the outcome that holds
    discarded_files: list[str] = field(default_factory=list)
    published: list[str] = field(default_factory=list)
    gc_deleted: int = 0

    @property
    def status(self) -> CheckpointStatus | None:
        return self.outcome.status if self.outcome else None

    @property
    def message(self) -> str:
        if self.outcome is None:
            return "no outcome"
        if self.outcome.status is CheckpointStatus.COMPLETED:
            return f"checkpoint {self.checkpoint_id} completed"
        reason = self.outcome.reason.code if self.outcome.reason else "aborted"
        return f"checkpoint {self.checkpoint_id} aborted ({reason}): {self.outcome.message}"

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint_id": self.checkpoint_id,
            "status": self.status.value if self.status else None,
            "reason": self.outcome.reason.code if self.outcome and self.outcome.reason else None,
            "message": self.message,
            "action": self.action.value,
            "discarded_files": len(self.discarded_files),
            "published": self.published,
            "gc_deleted": self.gc_deleted,
        }


def settle_run(
    driver: PipelineDriver,
    checkpoint_id: int,
    failed_operators: Mapping[str, str] | None = None,
    *,
    attempt: str = "scheduler-cleanup",
    now: float | None = None,
) -> RunSettlement:
    """Called once the run is over, whatever happened. Leaves the checkpoint settled as
    the protocol decides (`protocol.settlement.decide_settlement`: aborted when a restore
    or a stop superseded it, declined, expired, finalized, or aborted when the run ended
    early or an audit gave no verdict); then, if ABORTED, deletes what it staged; if
    COMPLETED, publishes its sinks (idempotent) and collects garbage (files of
    checkpoints it subsumed). Failures are counted by the coordinator when it writes the
    ABORTED outcome, once per checkpoint. The action reported is what happened
    (`settled_action`): NONE when another actor's outcome holds."""
    c = driver.coordinator
    now = c.clock() if now is None else now
    outcome = c.get_outcome(checkpoint_id)
    action = SettlementAction.NONE
    if outcome is None:
        pending = c.get_pending(checkpoint_id)
        if pending is None:  # settled meanwhile (its record moved): finish what holds
            outcome = c.get_outcome(checkpoint_id)
            return _finish(driver, checkpoint_id, outcome, SettlementAction.NONE)
        failed = dict(failed_operators or {})
        control = _control(c)
        decision = decide_settlement(
            pending, c.progress(checkpoint_id), failed, now, control=control
        )
        outcome = _carry_out(c, checkpoint_id, decision, attempt)
        if outcome is None and decision.decline:
            # The failed operators' subtasks acked meanwhile: settle it as if none failed.
            decision = decide_settlement(
                pending, c.progress(checkpoint_id), {}, now, control=control
            )
            outcome = _carry_out(c, checkpoint_id, decision, attempt)
        action = settled_action(decision, outcome)
    return _finish(driver, checkpoint_id, outcome, action)


def _control(c: CheckpointDecisions) -> ControlRecord | None:
    """The control record, for judging a restore or a stop before the deadlines; None
    when it is missing or unreadable (the deadlines decide, as the finalizer does)."""
    try:
        return c.control_record()
    except ControlUnreadable:
        return None


def _finish(
    driver: PipelineDriver,
    checkpoint_id: int,
    outcome: CheckpointOutcome | None,
    action: SettlementAction,
) -> RunSettlement:
    """Delete what an aborted checkpoint staged, or publish a completed one and collect
    garbage, publishing too what that collection's settle completed: a later run's
    checkpoint that waited for this one as its base (its own finalize had said so)."""
    c = driver.coordinator
    settlement = RunSettlement(checkpoint_id, outcome, action)
    if outcome is None:
        return settlement
    if outcome.status is CheckpointStatus.ABORTED:
        settlement.discarded_files = discard_checkpoint_data(c, checkpoint_id)
        return settlement
    settlement.published = finalize(driver, checkpoint_id).published
    report = gc(c, driver.store)
    settlement.gc_deleted = len(report.deleted_files)
    for done in sorted(report.settled, key=lambda o: o.checkpoint_id):
        if done.completed is not None:
            settlement.published += driver.notify_complete(done.checkpoint_id)
    return settlement


def _carry_out(
    c: CheckpointDecisions, checkpoint_id: int, decision: RunSettlementDecision, attempt: str
) -> CheckpointOutcome | None:
    """Execute the protocol's decision: the outcome that holds afterwards, or None (a
    finalize that waits for its base, or declines that all came too late)."""
    if decision.abort is not None:
        return c.abort(checkpoint_id, decision.abort.reason, decision.abort.message)
    if decision.decline:
        for task, reason in decision.decline.items():
            c.decline(checkpoint_id, task, attempt, reason)
        return c.get_outcome(checkpoint_id)
    if decision.action is SettlementAction.FINALIZED:
        # None if the checkpoint waits for its base (concurrent checkpoints): that one's
        # settling finishes it. Past its deadline, an audited one expires, as `settle`
        # would.
        return c.try_finalize(checkpoint_id)
    return None


def discard_checkpoint_data(coordinator: CheckpointDecisions, checkpoint_id: int) -> list[str]:
    """GC restricted to one aborted checkpoint: delete its data files that nothing
    retained or pending references (all of them, unless a checkpoint built on it)."""
    return coordinator.garbage_collector().discard_aborted(checkpoint_id)
