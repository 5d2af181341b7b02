"""Whole epochs in one process on one Spark session, scheduler-free: the tests, the
benches, the soak and `batchpoint savepoint` plan them as the DAGs do (`epoch_plan`)
and run them with the in-process executor (`epoch_executor`). Audited epochs and
savepoints are the same plan with its audit, or its export, in it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from batchpoint.errors import BatchpointError
from batchpoint.ops.audit import AuditResult
from batchpoint.ops.epoch import finalize
from batchpoint.ops.epoch_executor import (
    EpochExecutor,
    EpochResult,
    SavepointExport,
    run_operator,
)
from batchpoint.ops.epoch_plan import EpochPlan, EpochSettings, plan_epoch
from batchpoint.ops.savepoints import ExportResult, check_target, export
from batchpoint.protocol.checkpoint import CheckpointOutcome, CheckpointType
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator, Clock
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.quality.gate import QualityGate
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.runner import OperatorFailed, OperatorRunner, OperatorRunReport
from batchpoint.runtime.task_hooks import AttemptHooks
from batchpoint.settings import Settings
from batchpoint.storage import StoreRef

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Progress = Callable[[str], None]


def _quiet(_line: str) -> None:
    pass


class LocalEpochRunner:
    """Whole epochs in one process on one Spark session: trigger, every operator task in
    the epoch's order, finalize and publish (and the audit, or the export, when the plan
    has them). `hooks` go to every operator attempt (tests inject faults there; none by
    default)."""

    def __init__(
        self,
        pipeline: Pipeline,
        store_ref: StoreRef,
        spark: SparkSession,
        config: CheckpointConfig | None = None,
        clock: Clock = time.time,
        log: Progress = _quiet,
        hooks: AttemptHooks | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.store_ref = store_ref
        self.spark = spark
        self.config = config or CheckpointConfig()
        self.driver = PipelineDriver(pipeline, store_ref, self.config, clock)
        self.log = log
        self.hooks = hooks

    def operator_runner(
        self, attempt: str | None = None, hooks: AttemptHooks | None = None
    ) -> OperatorRunner:
        """A runner of this epoch's operators (with `hooks`, else this runner's)."""
        return OperatorRunner(
            self.pipeline,
            self.store_ref,
            self.spark,
            config=self.config,
            attempt=attempt,
            align_timeout=5.0,
            log=self.log,
            hooks=hooks or self.hooks,
        )

    def plan(
        self,
        checkpoint_type: CheckpointType = CheckpointType.CHECKPOINT,
        *,
        audit: bool = False,
        export: bool = False,
    ) -> EpochPlan:
        """The epoch of the graph in force (its parallelism as a restore left it)."""
        settings = EpochSettings(self.config.timeout)
        spec = self.driver.current_spec()
        return plan_epoch(spec, settings, checkpoint_type, audit=audit, export=export)

    def task_order(self) -> list[str]:
        return list(self.plan().operators)

    def run_operators(
        self, checkpoint_id: int, attempt: str | None = None, progress: Progress = _quiet
    ) -> list[OperatorRunReport]:
        """Every operator task of the checkpoint; OperatorFailed when one fails (its
        subtasks declined the checkpoint)."""
        runner = self.operator_runner(attempt)
        order = self.task_order()
        return [
            run_operator(runner, checkpoint_id, name, (number, len(order)), progress)
            for number, name in enumerate(order, 1)
        ]

    def complete(self, checkpoint_id: int) -> tuple[CheckpointOutcome | None, list[str]]:
        done = finalize(self.driver, checkpoint_id)
        return done.outcome, done.published

    def executor(
        self,
        *,
        gate: QualityGate | None = None,
        export: SavepointExport | None = None,
        progress: Progress = _quiet,
        allow_non_restored_state: bool = False,
    ) -> EpochExecutor:
        return EpochExecutor(
            self.driver,
            self.operator_runner(),
            gate=gate,
            export=export,
            progress=progress,
            allow_non_restored_state=allow_non_restored_state,
        )

    def run_epoch(
        self,
        checkpoint_type: CheckpointType = CheckpointType.CHECKPOINT,
        properties: CheckpointProperties | None = None,
        progress: Progress = _quiet,
    ) -> EpochResult:
        """One epoch; what a task raised, once the run is cleaned up."""
        plan = self.plan(checkpoint_type)
        return self.executor(progress=progress).run(plan, properties).raise_error()


def run_audited_epoch(
    runner: LocalEpochRunner, gate: QualityGate
) -> tuple[EpochResult, AuditResult]:
    """One in-process epoch whose checkpoint is audited before it completes."""
    result = runner.executor(gate=gate).run(runner.plan(audit=True)).raise_error()
    audit = result.audit or AuditResult(result.checkpoint_id, result.outcome)
    return result, audit


# -- savepoints ------------------------------------------------------------------------


def _local_runner(pipeline: Pipeline, settings: Settings, progress: Progress) -> LocalEpochRunner:
    # Here, not at the top: batchpoint.spark imports pyspark, which no other verb needs.
    from batchpoint.spark.session import spark_session

    progress(f"starting Spark ({settings.spark_master})")
    spark = spark_session(f"batchpoint-savepoint-{pipeline.name}", settings.spark_master)
    return LocalEpochRunner(
        pipeline,
        settings.store_ref,
        spark,
        settings.checkpoint,
        log=lambda line: progress(f"  {line}"),
    )


def _savepoint(
    runner: LocalEpochRunner,
    plan: EpochPlan,
    properties: CheckpointProperties,
    export: SavepointExport | None,
    progress: Progress,
    allow_non_restored_state: bool,
) -> EpochResult:
    """The savepoint epoch of `plan`; a BatchpointError when it does not complete."""
    executor = runner.executor(
        export=export, progress=progress, allow_non_restored_state=allow_non_restored_state
    )
    result = executor.run(plan, properties)
    cid = result.checkpoint_id
    if isinstance(result.error, OperatorFailed):
        raise BatchpointError(f"savepoint {cid} declined: {result.error}") from None
    completed = result.outcome is not None and result.outcome.completed is not None
    if export is not None and completed and result.error is not None:  # the export's
        raise BatchpointError(_export_failed(cid, result.error, properties)) from None
    result.raise_error()
    if result.outcome is None or result.outcome.completed is None:
        message = result.outcome.message if result.outcome else "not every task acknowledged"
        raise BatchpointError(f"savepoint {cid} did not complete: {message}")
    return result


def _export_failed(cid: int, error: Exception, properties: CheckpointProperties) -> str:
    # The savepoint is retained (and the pipeline stopped, when asked): only the copy
    # to its folder is left to do, and it needs no epoch.
    stop = properties.stop_pipeline
    stopped = "; the pipeline is stopped (`batchpoint resume` starts it)" if stop else ""
    return (
        f"savepoint {cid} completed but its export failed: {error}{stopped}; "
        f"`batchpoint savepoint --checkpoint-id {cid} --target <folder>` exports it"
    )


def run_savepoint_epoch(
    pipeline: Pipeline,
    settings: Settings,
    *,
    description: str = "",
    via: str = "cli",
    stop: bool = False,
    progress: Progress = _quiet,
    allow_non_restored_state: bool = False,
) -> int:
    """Trigger a savepoint, run the epoch on local Spark (settings.spark_master),
    finalize and publish it; its id. A BatchpointError when it does not complete.
    `stop`: a stop-with-savepoint (protocol/stopping.py): no checkpoint starts after it
    until `batchpoint resume` or a restore. `allow_non_restored_state`: the deploy may leave
    state of its base unrestored."""
    runner = _local_runner(pipeline, settings, progress)
    plan = runner.plan(CheckpointType.SAVEPOINT)
    properties = CheckpointProperties(description=description, via=via, stop_pipeline=stop)
    result = _savepoint(runner, plan, properties, None, progress, allow_non_restored_state)
    return result.checkpoint_id


def take_savepoint(
    pipeline: Pipeline,
    settings: Settings,
    *,
    target: str | None = None,
    description: str = "",
    checkpoint_id: int | None = None,
    stop: bool = False,
    progress: Progress = _quiet,
    allow_non_restored_state: bool = False,
) -> ExportResult:
    """Run one epoch as a savepoint and export it; with `checkpoint_id`, export that
    completed checkpoint instead of running an epoch. `stop`: a stop-with-savepoint (the
    protocol's: this process has no scheduler to pause)."""
    where = SavepointExport(target, description, settings.store_options, settings.savepoint_roots)
    coordinator = CheckpointCoordinator(
        settings.store_ref.open(), pipeline.name, settings.checkpoint
    )
    if checkpoint_id is not None:
        return export(
            coordinator,
            checkpoint_id,
            target,
            store_options=where.store_options,
            description=description,
            roots=where.roots,
            progress=progress,
        )
    # The target needs only the store: refused before Spark starts, not after seconds.
    check_target(coordinator, target, where.store_options, where.roots)
    runner = _local_runner(pipeline, settings, progress)
    plan = runner.plan(CheckpointType.SAVEPOINT, export=True)
    properties = CheckpointProperties(description=description, via="cli", stop_pipeline=stop)
    result = _savepoint(runner, plan, properties, where, progress, allow_non_restored_state)
    assert result.export is not None, "a completed savepoint is exported"
    return result.export
