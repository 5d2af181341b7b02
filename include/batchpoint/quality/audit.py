"""Audited checkpoints (write-audit-publish): a checkpoint's state is validated after
every task acknowledged it and before it completes.

Passing, it completes and its sinks publish, as usual. Failing, it is aborted with
CheckpointFailureReason.QUALITY_GATE: nothing of it is ever published, it counts as a
failed checkpoint (towards tolerable_failed_checkpoints), and the previous checkpoint
stays the head, so the next epoch reads on from there. The report is stored beside it.

Trigger with `trigger_audited` (it marks the pending record with `{"audit": true}`) and
call `audit_then_finalize` where an unaudited pipeline calls `PipelineDriver.finalize`.
The mark is what keeps anyone else from completing the checkpoint unaudited: if the
audit dies after every ack is in, the next trigger's `settle` leaves the checkpoint
pending for a retried audit, and expires it at its deadline.

A scheduler runs the same steps as tasks (the Airflow checkpoint DAG with
BATCHPOINT_AUDIT): its trigger adds `audited_properties`, an audit task opens
`audit_gate` and calls `audit_then_finalize`, and its cleanup calls
`settle_audited_run`, which aborts a checkpoint whose run ended without a verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from batchpoint.protocol.checkpoint import (
    AUDIT_PROPERTY,
    CheckpointFailureReason,
    CheckpointOutcome,
    CheckpointType,
    CompletedCheckpoint,
    PendingCheckpoint,
)
from batchpoint.quality.findings import summarize
from batchpoint.quality.gate import QualityGate
from batchpoint.quality.report import CandidateReport, GateMode, GateReport

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from batchpoint.runtime.api import Pipeline
    from batchpoint.runtime.driver import PipelineDriver
    from batchpoint.runtime.local import EpochResult, LocalEpochRunner
    from batchpoint.runtime.orchestration import RunSettlement
    from batchpoint.storage import StoreRef


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


def audited_properties(properties: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`properties` of a pending checkpoint, marked so that only its audit may complete
    it. For triggers that go through another path than `trigger_audited` (a scheduler
    run's idempotent trigger)."""
    return {**(properties or {}), AUDIT_PROPERTY: True}


def trigger_audited(
    driver: PipelineDriver,
    checkpoint_type: CheckpointType = CheckpointType.CHECKPOINT,
    properties: Mapping[str, Any] | None = None,
    timeout: float | None = None,
) -> PendingCheckpoint:
    """Trigger a checkpoint that only `audit_then_finalize` may complete."""
    return driver.trigger(checkpoint_type, audited_properties(properties), timeout)


def audit_then_finalize(
    driver: PipelineDriver, checkpoint_id: int, gate: QualityGate
) -> AuditResult:
    """Validate the checkpoint once all its acks are in; then complete and publish it,
    or abort it with reason QUALITY_GATE. Idempotent, like `finalize`: a settled
    checkpoint is only finished off (published if it completed)."""
    coordinator = driver.coordinator
    outcome = coordinator.get_outcome(checkpoint_id)
    if outcome is not None:
        return AuditResult(checkpoint_id, driver.finalize(checkpoint_id))
    progress = coordinator.progress(checkpoint_id)
    pending = coordinator.get_checkpoint(checkpoint_id)
    if progress.missing:
        if coordinator.clock() <= pending.deadline:
            return AuditResult(checkpoint_id, None)
        # Not try_finalize: if the last ack landed meanwhile it would complete the
        # checkpoint unaudited. Expiring it is what try_finalize would have done.
        missing = ", ".join(progress.missing[:5])
        expired = coordinator.abort(
            checkpoint_id,
            CheckpointFailureReason.EXPIRED,
            f"not acknowledged within {pending.deadline - pending.trigger_time:g}s by: {missing}",
        )
        return AuditResult(checkpoint_id, expired)

    acks = coordinator.acks(checkpoint_id)
    ordered = tuple(acks[t] for t in pending.expected_tasks)
    completed = CompletedCheckpoint(pending, ordered, coordinator.clock())
    # A suite that cannot be built is a ConfigError raised here, before any verdict:
    # as a finding it would abort a checkpoint whose state may well be fine.
    gate.prepare()
    report = gate.evaluate_completed(completed, GateMode.AUDIT)
    key = gate.store_report(report)
    for line in report.render():
        gate.log(line)
    if not report.passed:
        aborted = coordinator.abort(
            checkpoint_id,
            CheckpointFailureReason.QUALITY_GATE,
            f"the state failed the quality gate: {summarize(report.findings)}; "
            f"report: {driver.store.child(key)}",
        )
        return AuditResult(checkpoint_id, aborted, report)
    # The verdict is in: this is the one call that may complete an audited checkpoint.
    finalized = coordinator.try_finalize(checkpoint_id, audited=True)
    published = []
    if finalized is not None and finalized.completed is not None:
        published = driver.notify_complete(checkpoint_id)
    return AuditResult(checkpoint_id, finalized, report, published)


def run_audited_epoch(
    runner: LocalEpochRunner, gate: QualityGate
) -> tuple[EpochResult, AuditResult]:
    """One in-process epoch whose checkpoint is audited before it completes."""
    from batchpoint.runtime.local import EpochResult

    pending = trigger_audited(runner.driver)
    result = EpochResult(pending, None)
    result.reports = runner.run_operators(pending.checkpoint_id)
    audit = audit_then_finalize(runner.driver, pending.checkpoint_id, gate)
    result.outcome, result.published = audit.outcome, audit.published
    return result, audit


class _AuditGate(QualityGate):
    """A QualityGate whose Spark session, started on first use, runs on the master (and
    settings) it is given rather than the environment's, and is stopped by `close` if
    this gate started it."""

    def __init__(
        self,
        pipeline: Pipeline,
        store_ref: StoreRef,
        *,
        spark_master: str,
        spark_conf: Mapping[str, str],
        log: Callable[[str], None],
    ) -> None:
        super().__init__(pipeline, store_ref, log=log)
        self.spark_master = spark_master
        self.spark_conf = dict(spark_conf)
        self._owns_spark = False

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            from pyspark.sql import SparkSession

            from batchpoint.spark.session import spark_session

            self._owns_spark = SparkSession.getActiveSession() is None
            self._spark = spark_session("batchpoint-audit", self.spark_master, self.spark_conf)
        return self._spark

    def close(self) -> None:
        # A session someone else started (a test's, a notebook's) is theirs to stop.
        if self._spark is not None and self._owns_spark:
            self._spark.stop()
        self._spark = None
        self._validator = None


@contextmanager
def audit_gate(
    pipeline: Pipeline,
    store_ref: StoreRef,
    spark_master: str,
    *,
    spark_conf: Mapping[str, str] | None = None,
    log: Callable[[str], None] = print,
) -> Iterator[QualityGate]:
    """The gate that audits `pipeline`'s checkpoints: the suites and checks it declares
    (`declare_quality`), as the restore gate of the same pipeline would run them. Spark
    starts on first use with `spark_master`; a session it started is stopped on exit, so
    a task process that audits leaves no JVM behind."""
    gate = _AuditGate(
        pipeline, store_ref, spark_master=spark_master, spark_conf=spark_conf or {}, log=log
    )
    try:
        yield gate
    finally:
        gate.close()


def settle_audited_run(
    driver: PipelineDriver,
    checkpoint_id: int,
    failed_operators: Mapping[str, str] | None = None,
    *,
    attempt: str = "scheduler-cleanup",
) -> RunSettlement:
    """`settle_run` for the end of a scheduler run whose checkpoint may be audited.

    An audited checkpoint that every task acknowledged but that has no outcome when its
    run ends got no verdict: its audit failed or never ran, and no other task of the run
    will give one. `settle_run` would leave it pending (only an audit may complete it)
    and report it as waiting for its base; it is aborted instead, as FINALIZE_FAILED,
    like a checkpoint whose run ended before every ack, so that it counts as a failure
    now and does not hold the next trigger back until its deadline (past it, it expires
    as `settle` would expire it). Any other checkpoint is settled as by `settle_run`."""
    from batchpoint.runtime.orchestration import settle_run

    coordinator = driver.coordinator
    aborted = False
    if coordinator.get_outcome(checkpoint_id) is None:
        pending = coordinator.get_pending(checkpoint_id)
        # Past its deadline, settle_run's try_finalize expires it, as `settle` would.
        if (
            pending is not None
            and pending.requires_audit
            and coordinator.clock() <= pending.deadline
        ):
            progress = coordinator.progress(checkpoint_id)
            if progress.all_acknowledged and not progress.declines:
                coordinator.abort(
                    checkpoint_id,
                    CheckpointFailureReason.FINALIZE_FAILED,
                    "every task acknowledged it, but its run ended without the audit's "
                    "verdict (the audit failed or did not run)",
                )
                aborted = True
    settlement = settle_run(driver, checkpoint_id, failed_operators, attempt=attempt)
    if aborted:
        settlement.action = "aborted"
    return settlement
