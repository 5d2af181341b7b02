"""An EpochPlan run in this process: one handler per task kind, each the use case the
Airflow operator of that kind calls (the trigger, the operator runner, the ack progress,
`audit_then_finalize`, `finalize`, `export`, `settle_run`).

Tasks run in the plan's order, each when its upstream tasks succeeded (the cleanup:
whatever became of them), as the DAG's trigger rules say. Where the DAG has a scheduler
to wait on, one process has nothing to wait for: the operators ran here, so their acks
are in or they raised. An exception ends the run at once (the process would have gone
on only in a scheduler): the cleanup runs, settling a checkpoint that did not complete
as the DAG's cleanup task does (abort it, remove what it staged), and the result carries
the exception (`EpochResult.error`; `raise_error`). A run that ends without one (an audit
that rejects, a finalize that waits for its base) leaves its outcome as it stands, and
collecting garbage is `batchpoint gc`'s, not every in-process epoch's."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from batchpoint.errors import ConfigError
from batchpoint.ops.audit import AuditResult, audit_then_finalize, trigger_audited
from batchpoint.ops.epoch import finalize
from batchpoint.ops.epoch_plan import EpochPlan, EpochTaskId, PlannedTask, RunsWhen, TaskKind
from batchpoint.ops.runs import RunSettlement, settle_run
from batchpoint.ops.savepoints import ExportResult, export
from batchpoint.protocol.checkpoint import CheckpointOutcome, PendingCheckpoint
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.quality.gate import QualityGate
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.runner import OperatorRunner, OperatorRunReport

Progress = Callable[[str], None]


def _quiet(_line: str) -> None:
    pass


class StepStatus(StrEnum):
    DONE = "done"
    FAILED = "failed"  # raised, or ended the epoch short of a completed checkpoint
    SKIPPED = "skipped"  # not run: an upstream task did not succeed


@dataclass(frozen=True)
class Step:
    """What became of one task of the plan."""

    task: EpochTaskId
    kind: TaskKind
    status: StepStatus
    note: str = ""


@dataclass(frozen=True)
class SavepointExport:
    """Where and how EXPORT_SAVEPOINT writes the savepoint (see ops.savepoints.export)."""

    target: str | None = None
    description: str = ""
    store_options: Mapping[str, str] | None = None
    roots: Sequence[str] | None = None


@dataclass
class EpochResult:
    pending: PendingCheckpoint
    outcome: CheckpointOutcome | None
    reports: list[OperatorRunReport] = field(default_factory=list)
    published: list[str] = field(default_factory=list)
    audit: AuditResult | None = None
    export: ExportResult | None = None
    settlement: RunSettlement | None = None  # what the cleanup settled, if it did
    steps: list[Step] = field(default_factory=list)
    error: Exception | None = None  # what ended the run, if something raised

    @property
    def checkpoint_id(self) -> int:
        return self.pending.checkpoint_id

    def raise_error(self) -> EpochResult:
        """This result, unless a task raised: then what it raised."""
        if self.error is not None:
            raise self.error
        return self


@dataclass
class _Run:
    """The state the steps of one run share."""

    plan: EpochPlan
    properties: CheckpointProperties | None
    pending: PendingCheckpoint | None = None
    outcome: CheckpointOutcome | None = None
    reports: list[OperatorRunReport] = field(default_factory=list)
    published: list[str] = field(default_factory=list)
    audit: AuditResult | None = None
    export: ExportResult | None = None
    settlement: RunSettlement | None = None
    steps: dict[EpochTaskId, Step] = field(default_factory=dict)
    error: Exception | None = None

    @property
    def checkpoint_id(self) -> int:
        assert self.pending is not None, "the trigger runs first"
        return self.pending.checkpoint_id

    def may_run(self, task: PlannedTask) -> bool:
        if self.error is not None:
            return task.runs_when is RunsWhen.UPSTREAM_DONE
        if task.runs_when is RunsWhen.UPSTREAM_DONE:
            return True
        return all(self.steps[up].status is StepStatus.DONE for up in task.upstream)

    def result(self) -> EpochResult:
        assert self.pending is not None, "a run whose trigger failed raises"
        return EpochResult(
            self.pending,
            self.outcome,
            self.reports,
            self.published,
            self.audit,
            self.export,
            self.settlement,
            list(self.steps.values()),
            self.error,
        )


Outcome = tuple[StepStatus, str]


def run_operator(
    runner: OperatorRunner,
    checkpoint_id: int,
    operator: str,
    position: tuple[int, int],
    progress: Progress = _quiet,
) -> OperatorRunReport:
    """One operator task, with its progress lines (`[2/4] balances ...`)."""
    tag = f"[{position[0]}/{position[1]}] {operator}"
    started = time.monotonic()
    progress(f"{tag} ...")
    report = runner.run(checkpoint_id, operator)
    progress(f"{tag} done in {time.monotonic() - started:.1f}s")
    if report.skipped:
        progress(f"  ({report.skipped})")
    return report


class EpochExecutor:
    """Runs plans of one pipeline on `driver`, its operator tasks with `operators`.
    `gate` judges an audited epoch; `export` says where a savepoint goes; `stop` stops
    the pipeline (stop-with-savepoint), given the savepoint's id;
    `allow_non_restored_state`: the trigger lets the code leave state of its base
    unrestored (`batchpoint savepoint --allow-non-restored-state`)."""

    def __init__(
        self,
        driver: PipelineDriver,
        operators: OperatorRunner,
        *,
        gate: QualityGate | None = None,
        export: SavepointExport | None = None,
        stop: Callable[[int], None] | None = None,
        progress: Progress = _quiet,
        allow_non_restored_state: bool = False,
    ) -> None:
        self.driver = driver
        self.allow_non_restored_state = allow_non_restored_state
        self.operators = operators
        self.gate = gate
        self.export = export or SavepointExport()
        self.stop = stop
        self.progress = progress
        self._handlers: dict[TaskKind, Callable[[_Run, PlannedTask], Outcome]] = {
            TaskKind.TRIGGER_CHECKPOINT: self._trigger,
            TaskKind.TRIGGER_SAVEPOINT: self._trigger,
            TaskKind.OPERATOR: self._operator,
            TaskKind.WAIT_FOR_ACKS: self._wait_for_acks,
            TaskKind.AUDIT: self._audit,
            TaskKind.FINALIZE: self._finalize,
            TaskKind.EXPORT_SAVEPOINT: self._export,
            TaskKind.STOP_PIPELINE: self._stop,
            TaskKind.CLEANUP: self._cleanup,
        }

    def run(self, plan: EpochPlan, properties: CheckpointProperties | None = None) -> EpochResult:
        """Every task of `plan` that may run, in order. Raises what made the trigger
        fail (nothing else ran); what a later task raised is the result's `error`."""
        self._check(plan)
        run = _Run(plan, properties)
        for task in plan.tasks:
            if not run.may_run(task):
                run.steps[task.id] = Step(task.id, task.kind, StepStatus.SKIPPED)
                continue
            try:
                status, note = self._handlers[task.kind](run, task)
            except Exception as exc:
                status, note = StepStatus.FAILED, str(exc)
                run.error = run.error or exc
            run.steps[task.id] = Step(task.id, task.kind, status, note)
        if run.pending is None and run.error is not None:
            raise run.error
        return run.result()

    def _check(self, plan: EpochPlan) -> None:
        """What a plan needs of this executor, before anything runs."""
        if plan.pipeline != self.driver.pipeline.name:
            raise ConfigError(
                f"a plan of pipeline '{plan.pipeline}' given to '{self.driver.pipeline.name}'"
            )
        if plan.of_kind(TaskKind.AUDIT) and self.gate is None:
            raise ConfigError("an audited epoch needs its quality gate")
        if plan.audited and self.allow_non_restored_state:
            raise ConfigError("an audited epoch cannot allow non-restored state")
        if plan.of_kind(TaskKind.STOP_PIPELINE) and self.stop is None:
            raise ConfigError("stop-with-savepoint: nothing here can stop the pipeline")

    # -- one handler per task kind --------------------------------------------------------

    def _trigger(self, run: _Run, task: PlannedTask) -> Outcome:
        kind = run.plan.checkpoint_type
        if run.plan.audited:
            run.pending = trigger_audited(self.driver, kind, run.properties)
        else:
            run.pending = self.driver.trigger(
                kind,
                properties=run.properties,
                allow_non_restored_state=self.allow_non_restored_state,
            )
        note = (
            f"{kind.value} {run.pending.checkpoint_id} triggered "
            f"(base {run.pending.base_checkpoint_id})"
        )
        self.progress(note)
        return StepStatus.DONE, note

    def _operator(self, run: _Run, task: PlannedTask) -> Outcome:
        assert task.operator is not None
        order = run.plan.operators
        position = (order.index(task.operator) + 1, len(order))
        report = run_operator(
            self.operators, run.checkpoint_id, task.operator, position, self.progress
        )
        run.reports.append(report)
        return StepStatus.DONE, report.skipped

    def _wait_for_acks(self, run: _Run, task: PlannedTask) -> Outcome:
        progress = self.driver.coordinator.progress(run.checkpoint_id)
        if progress.declines:
            decline = progress.declines[0]
            return StepStatus.FAILED, f"task {decline.task} declined: {decline.reason}"
        if progress.missing:
            missing = ", ".join(map(str, progress.missing))
            return StepStatus.FAILED, f"not acknowledged by: {missing}"
        return StepStatus.DONE, f"{len(progress.acknowledged)} ack(s)"

    def _audit(self, run: _Run, task: PlannedTask) -> Outcome:
        assert self.gate is not None
        audit = run.audit = audit_then_finalize(self.driver, run.checkpoint_id, self.gate)
        run.outcome = audit.outcome
        run.published.extend(audit.published)
        if audit.outcome is None or audit.outcome.completed is None:
            return StepStatus.FAILED, audit.render()
        return StepStatus.DONE, audit.render()

    def _finalize(self, run: _Run, task: PlannedTask) -> Outcome:
        done = finalize(self.driver, run.checkpoint_id)
        run.outcome = done.outcome
        run.published.extend(p for p in done.published if p not in run.published)
        if not done.completed:
            return StepStatus.FAILED, done.message
        kind = run.plan.checkpoint_type.value
        self.progress(
            f"{kind} {run.checkpoint_id} completed; published "
            f"{', '.join(run.published) or 'nothing new'}"
        )
        return StepStatus.DONE, done.message

    def _export(self, run: _Run, task: PlannedTask) -> Outcome:
        spec = self.export
        run.export = export(
            self.driver.coordinator,
            run.checkpoint_id,
            spec.target,
            store_options=spec.store_options,
            description=spec.description,
            roots=spec.roots,
            progress=self.progress,
        )
        return StepStatus.DONE, run.export.location

    def _stop(self, run: _Run, task: PlannedTask) -> Outcome:
        assert self.stop is not None
        self.stop(run.checkpoint_id)
        return StepStatus.DONE, f"pipeline '{run.plan.pipeline}' stopped"

    def _cleanup(self, run: _Run, task: PlannedTask) -> Outcome:
        if run.pending is None:
            return StepStatus.DONE, "no checkpoint was triggered"
        if run.error is None:
            return StepStatus.DONE, "nothing to settle: no task raised"
        if run.outcome is not None and run.outcome.completed is not None:
            return StepStatus.DONE, "nothing to settle: it completed"
        failed = {
            t.operator: f"task {t.id} failed: {run.steps[t.id].note}"
            for t in run.plan.of_kind(TaskKind.OPERATOR)
            if t.id in run.steps and run.steps[t.id].status is StepStatus.FAILED
            if t.operator is not None
        }
        run.settlement = settle_run(
            self.driver, run.checkpoint_id, failed, attempt=f"{self.operators.attempt}-cleanup"
        )
        return StepStatus.DONE, run.settlement.message
