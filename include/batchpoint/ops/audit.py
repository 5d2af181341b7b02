"""Audited checkpoints (write-audit-publish): a checkpoint's state is validated after
every task acknowledged it and before it completes.

Passing, it completes and its sinks publish, as usual. Failing, it is aborted with
CheckpointFailureReason.QUALITY_GATE: nothing of it is ever published, it counts as a
failed checkpoint (towards tolerable_failed_checkpoints), and the previous checkpoint
stays the head, so the next epoch reads on from there. The report is stored beside it.

Trigger with `trigger_audited` (it marks the pending record with `{"audit": true}`) and
call `audit_then_finalize` where an unaudited pipeline calls `finalize`. The mark is
what keeps anyone else from completing the checkpoint unaudited: if the audit dies after
every ack is in, the next trigger's `settle` leaves the checkpoint pending for a retried
audit, and expires it at its deadline. A scheduler's cleanup calls `settle_run`, which
aborts an audited checkpoint whose run ended without a verdict.

The gate that audits (Spark started and stopped with it) is
`batchpoint.quality.audit.audit_gate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointOutcome,
    CheckpointType,
    CompletedCheckpoint,
    PendingCheckpoint,
)
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.protocol.settlement import FinalizeWait
from batchpoint.quality.findings import summarize
from batchpoint.quality.gate import QualityGate
from batchpoint.quality.report import CandidateReport, GateMode, GateReport
from batchpoint.runtime.driver import PipelineDriver


@dataclass
class AuditResult:
    checkpoint_id: int
    outcome: CheckpointOutcome | None  # None: acks still missing, nothing decided
    report: CandidateReport | None = None  # None when no audit ran (settled, or waiting)
    published: list[str] = field(default_factory=list)

    @property
    def rejected(self) -> bool:
        return (
            self.outcome is not None and self.outcome.reason is CheckpointFailureReason.QUALITY_GATE
        )

    def render(self) -> str:
        if self.report is None:
            state = self.outcome.status.value if self.outcome else "waiting for acks"
            return f"audit of checkpoint {self.checkpoint_id}: not run ({state})"
        gate = GateReport(self.report.pipeline, GateMode.AUDIT, self.report.evaluated_at)
        gate.candidates.append(self.report)
        gate.chosen = self.checkpoint_id if self.report.passed else None
        return gate.render()


def audited_properties(properties: CheckpointProperties | None = None) -> CheckpointProperties:
    """`properties` of a pending checkpoint, marked so that only its audit may complete
    it."""
    return replace(properties or CheckpointProperties(), audit=True)


def trigger_audited(
    driver: PipelineDriver,
    checkpoint_type: CheckpointType = CheckpointType.CHECKPOINT,
    properties: CheckpointProperties | None = None,
    timeout: float | None = None,
) -> PendingCheckpoint:
    """Trigger a checkpoint that only `audit_then_finalize` may complete."""
    return driver.trigger(checkpoint_type, audited_properties(properties), timeout)


def audit_then_finalize(
    driver: PipelineDriver, checkpoint_id: int, gate: QualityGate
) -> AuditResult:
    """Validate the checkpoint once all its acks are in; then complete and publish it,
    or abort it with reason QUALITY_GATE (the protocol's audited completion,
    `CheckpointCoordinator.complete_audited`, with the gate as its judge). Idempotent,
    like `finalize`: a settled checkpoint is only finished off (published if it
    completed)."""
    reports: list[CandidateReport] = []

    def judge(completed: CompletedCheckpoint) -> str | None:
        # A suite that cannot be built is a ConfigError raised here, before any verdict:
        # as a finding it would abort a checkpoint whose state may well be fine.
        gate.prepare()
        report = gate.evaluate_completed(completed, GateMode.AUDIT)
        key = gate.store_report(report)
        for line in report.render():
            gate.log(line)
        reports.append(report)
        if report.passed:
            return None
        return (
            f"the state failed the quality gate: {summarize(report.findings)}; "
            f"report: {driver.store.child(key)}"
        )

    decided = driver.coordinator.complete_audited(checkpoint_id, judge)
    report = reports[0] if reports else None
    if isinstance(decided, FinalizeWait):
        return AuditResult(checkpoint_id, None, report)
    published = driver.notify_complete(checkpoint_id) if decided.completed is not None else []
    return AuditResult(checkpoint_id, decided, report, published)
