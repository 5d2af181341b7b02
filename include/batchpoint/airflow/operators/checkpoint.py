"""The checkpoint DAG's operators: trigger, one Spark job per pipeline operator, the
optional audit, finalize, and the cleanup every run ends with. Each calls one use case
of `batchpoint.ops` and turns its result into XCom, a skip or a failure.

Airflow "operators" here run batchpoint *operators* (pipeline nodes) among other things;
`SparkOperatorJob` is the one that does."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from airflow.sdk import Context

from batchpoint.airflow import compat, metrics
from batchpoint.airflow.assets import emit_completed, emit_completed_by_cleanup
from batchpoint.airflow.compat import AirflowException, AirflowFailException, AirflowSkipException
from batchpoint.airflow.config import AirflowDeployment
from batchpoint.airflow.hooks import OperatorJobLauncher, cached_pipeline, launcher_for
from batchpoint.airflow.links import CHECKPOINT_LINKS
from batchpoint.airflow.mixins import LineageMixin, lineage_facts
from batchpoint.airflow.operators.base import FAILED_STATES, BatchpointOperator
from batchpoint.airflow.outages import OutageEnded, may_be_store_outage, outage_over
from batchpoint.airflow.spark_connection import task_spark_settings
from batchpoint.errors import BatchpointError, ConfigError, TriggerRefused
from batchpoint.ops.barrier_log import barrier_lines
from batchpoint.ops.epoch import finalize, published_sinks
from batchpoint.ops.epoch_plan import AUDIT, WAIT_FOR_ACKS
from batchpoint.ops.runs import (
    RunSettlement,
    attempt_id,
    checkpoint_of_run,
    decline_operator,
    settle_run,
    trigger_for_run,
)
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointStatus,
    CheckpointType,
)
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.protocol.settlement import FinalizeWait
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.job_status import JobStatus
from batchpoint.settings import Settings


class TriggerCheckpointOperator(BatchpointOperator, compat.SkipMixin):
    """Start the run's epoch: capture every source's barrier and write the pending
    checkpoint. A refusal by the request decider (min-pause, max-concurrent, no new
    input, a pipeline stopped with a savepoint) skips the rest of the run with the
    reason, as a ShortCircuitOperator does; a FAILED pipeline fails it, as someone must
    act. With `audit`, the checkpoint is
    marked so that only its audit task may complete it."""

    operator_extra_links = CHECKPOINT_LINKS

    checkpoint_type = CheckpointType.CHECKPOINT
    #: Refusals that fail the run (someone must act) instead of skipping it.
    fails_on: tuple[CheckpointFailureReason, ...] = (
        CheckpointFailureReason.PIPELINE_FAILED,
        CheckpointFailureReason.INCOMPATIBLE_DEPLOY,  # someone must act: the plan says how
        CheckpointFailureReason.NEEDS_REPAIR,  # a lost or damaged record: never a green run
    )

    def __init__(self, *, audit: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.audit = audit

    def properties(self, context: Context) -> CheckpointProperties | None:
        """What the run's trigger fixes beyond its run id (none for a checkpoint)."""
        return None

    def execute(self, context: Context) -> dict[str, Any]:
        driver = self.driver()
        try:
            pending = trigger_for_run(
                driver,
                context["run_id"],
                self.checkpoint_type,
                self.properties(context),
                audit=self.audit,
            )
        except TriggerRefused as exc:
            self._log_plan(driver)
            if exc.reason in self.fails_on:
                raise AirflowFailException(exc.detail) from None
            self.log.warning("no checkpoint this time (%s): %s", exc.reason.code, exc.detail)
            # Every task after this one at once: left to trigger rules, a skip travels one
            # scheduler loop per level of the graph, and an idle run would take seconds.
            self.skip(ti=context["ti"], tasks=self.get_flat_relatives(upstream=False))
            # Reached only with nothing downstream: skip() raises otherwise.
            raise AirflowSkipException(f"checkpoint not triggered: {exc.detail}") from None
        except Exception as exc:
            # S3 restarting: a run that failed here would leave its interval without a
            # checkpoint. A retry triggers the same run's checkpoint (trigger_for_run finds
            # the one a try before it wrote), once the store answers again.
            ti = context["ti"]
            if not may_be_store_outage(exc) or ti.try_number > self.retries:
                raise
            self.log.warning("triggering failed (%s: %s)", type(exc).__name__, exc)
            if not outage_over(self.settings(), JobStatus.STORAGE_UNAVAILABLE, self.log):
                raise
            raise OutageEnded(f"the store answers again after {type(exc).__name__}") from exc
        self.log.info(
            "triggered %s %s (base %s), deadline in %.0fs, %d task(s) expected%s",
            pending.type.value,
            pending.checkpoint_id,
            pending.base_checkpoint_id,
            pending.deadline - time.time(),
            len(pending.expected_tasks),
            "; audited: only its audit may complete it" if pending.requires_audit else "",
        )
        for line in barrier_lines(pending):
            self.log.info("%s", line)
        self.log.info("expected tasks: %s", ", ".join(map(str, pending.expected_tasks)))
        self._log_plan(driver)
        return {
            "checkpoint_id": pending.checkpoint_id,
            "type": pending.type.value,
            "base_checkpoint_id": pending.base_checkpoint_id,
            "deadline": pending.deadline,
            "expected_tasks": [str(t) for t in pending.expected_tasks],
            "audit": pending.requires_audit,
        }

    def _log_plan(self, driver: PipelineDriver) -> None:
        """The deploy plan the trigger judged (one line when everything is kept)."""
        if driver.last_plan is not None:
            for line in driver.last_plan.render(compact=True).splitlines():
                self.log.info("%s", line)


class SparkOperatorJob(LineageMixin, BatchpointOperator):
    """Run one pipeline operator (all its subtasks) for the run's checkpoint: a thin
    Spark Connect client, a spark-submit or a local Spark, by BATCHPOINT_SPARK_MODE (see
    hooks.launcher_for). Each Airflow try is a new attempt id, so a retry never collides
    with what an earlier try wrote. The runner declines the checkpoint itself when the
    operator raises; when the job dies without declining (killed, out of memory, its
    Spark Connect server gone) and no retry is left, this task declines on its behalf
    so the checkpoint aborts at once. Killed (on_kill), it also interrupts the attempt's
    work on the Spark Connect server, which outlives its client."""

    operator_extra_links = CHECKPOINT_LINKS

    template_fields = ("operator",)
    ui_color = "#f5d5b0"

    def __init__(
        self,
        *,
        operator: str,
        deployment: AirflowDeployment,
        spark_conn_id: str | None = None,
        spark_conf: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        """`spark_conn_id`: the Airflow connection of the Spark endpoint (default: the
        deployment's BATCHPOINT_SPARK_CONN_ID, else the apache-spark provider's default id
        of the mode; see spark_connection.py); `spark_conf`: Spark settings of the job's
        session, over BATCHPOINT_SPARK_CONF, in every mode."""
        super().__init__(**kwargs)
        self.operator = operator
        self.deployment = deployment
        self.spark_conn_id = spark_conn_id or deployment.spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self._launcher: OperatorJobLauncher | None = None
        self._attempt: tuple[int, str] | None = None

    @property
    def lineage_node(self) -> str:
        return self.operator

    def spark_settings(self) -> Settings:
        """The task's settings with its Spark endpoint and conf (see __init__)."""
        mode = self.deployment.spark_mode
        try:
            return task_spark_settings(self.settings(), mode, self.spark_conn_id, self.spark_conf)
        except ConfigError as exc:
            raise AirflowFailException(str(exc)) from None

    def execute(self, context: Context) -> dict[str, Any]:
        checkpoint_id = self.require_checkpoint_id(context)
        ti = context["ti"]
        attempt = attempt_id(context["run_id"], ti.try_number, ti.map_index)
        self._attempt = (checkpoint_id, attempt)
        try:
            settings = self.spark_settings()
            launcher = self._launcher = launcher_for(self.deployment, self.pipeline_ref)
            result = launcher.launch(settings, checkpoint_id, self.operator, attempt, self.log.info)
        except (ConfigError, AirflowFailException) as exc:
            # A wrong setting, or no server and no job to submit: a retry cannot help.
            self._fail_for_good(checkpoint_id, attempt, str(exc))
        status = result.status
        if status.succeeded:
            self.log.info("%s done in %.1fs (%s)", self.operator, result.seconds, status.value)
            return {"checkpoint_id": checkpoint_id, "attempt": attempt, "seconds": result.seconds}
        tail = result.output()
        if status in (JobStatus.SPARK_UNREACHABLE, JobStatus.STORAGE_UNAVAILABLE):
            # The server or S3 is down: nothing of this attempt was acked or declined, and
            # a retry once it is back (waited for here: airflow/outages.py) completes it.
            back = ti.try_number <= self.retries and outage_over(settings, status, self.log)
            self._give_up_or_retry(ti, checkpoint_id, attempt, result.message, "", back)
        if not status.retry_may_help:
            # A bad configuration, or the operator failed and its runner declined (or the
            # checkpoint was already settled): retrying cannot help. A bad configuration
            # declined nothing, so the checkpoint would wait out its timeout: decline.
            said = f": {result.message}" if result.message else ""
            self._fail_for_good(
                checkpoint_id,
                attempt,
                f"operator '{self.operator}' failed for good ({status.value}){said}",
                f"operator '{self.operator}' failed (exit {result.returncode}):\n{tail}",
            )
        reason = f"Spark job of '{self.operator}' died (exit {result.returncode})"
        self._give_up_or_retry(ti, checkpoint_id, attempt, reason, tail=f":\n{tail}")

    def _give_up_or_retry(
        self, ti: Any, checkpoint_id: int, attempt: str, reason: str, tail: str, now: bool = False
    ) -> NoReturn:
        if ti.try_number > self.retries:
            self.log.error("%s and no retry is left: declining for it", reason)
            self._fail_for_good(checkpoint_id, attempt, reason, f"{reason}{tail}")
        retry = OutageEnded if now else AirflowException
        raise retry(f"{reason}; a retry will run a new attempt{tail}")

    def _fail_for_good(
        self, checkpoint_id: int, attempt: str, reason: str, failure: str | None = None
    ) -> NoReturn:
        """End the task with no retry, first declining (best effort) every subtask of
        the operator that has not acked: else the checkpoint waits out its timeout and
        is recorded as expired, not as `reason`, the mistake that doomed it."""
        try:
            decline_operator(
                self.driver().coordinator, checkpoint_id, self.operator, attempt, reason
            )
        except (BatchpointError, AirflowFailException) as exc:  # storage unusable too
            self.log.error("could not decline checkpoint %s: %s", checkpoint_id, exc)
        raise AirflowFailException(failure or reason) from None

    def on_kill(self) -> None:
        launcher = self._launcher
        if launcher is None:
            return
        launcher.kill()
        if self._attempt is not None:
            checkpoint_id, attempt = self._attempt
            pipeline = cached_pipeline(self.pipeline_ref).name
            launcher.interrupt(pipeline, checkpoint_id, self.operator, attempt, self.log.warning)


class FinalizeCheckpointOperator(LineageMixin, BatchpointOperator):
    """Every ack is in: write the outcome (after checking every referenced file) and
    publish the sinks' staged output (notifyCheckpointComplete)."""

    operator_extra_links = CHECKPOINT_LINKS

    def execute(self, context: Context) -> dict[str, Any]:
        checkpoint_id = self.require_checkpoint_id(context)
        done = finalize(self.driver(), checkpoint_id)
        outcome = done.outcome
        if outcome is None:
            if done.waiting is FinalizeWait.AUDIT:
                raise AirflowFailException(done.message)
            raise AirflowException(done.message)  # a retry looks again
        if outcome.completed is None:
            raise AirflowFailException(done.message)
        emit_completed(context, outcome.pending, published_sinks(self.driver(), checkpoint_id))
        self.lineage_checkpoint = lineage_facts(outcome.pending)
        self.lineage_acks = outcome.completed.acks
        metrics.checkpoint_completed(outcome)
        self.log.info(
            "checkpoint %s COMPLETED: %d file(s), %d bytes; published %s",
            checkpoint_id,
            len(outcome.completed.handles),
            outcome.completed.state_size,
            done.published or "nothing new",
        )
        self.log.info(
            "retained now: %s; no longer retained (subsumed, queued for GC): %s",
            ", ".join(map(str, done.retained)) or "-",
            ", ".join(map(str, done.subsumed)) or "none",
        )
        return {
            "checkpoint_id": checkpoint_id,
            "status": outcome.status.value,
            "files": len(outcome.completed.handles),
            "state_size": outcome.completed.state_size,
            "published": done.published,
        }


class CheckpointCleanupOperator(BatchpointOperator):
    """The run's last task (trigger rule all_done): settle the checkpoint whatever
    happened (abort it as declined or expired if nobody did, or as failed if it is
    audited and its audit gave no verdict; remove what it staged; publish and collect
    garbage if it completed), then fail the run if the checkpoint aborted or any task
    failed, so the run's colour tells the truth. A completed checkpoint forgives the
    tasks whose only job was to bring it there (the ack sensor, the audit, finalize):
    their work is done. When this task completed it (finalize did not succeed), the
    asset events are its own to send, and Airflow sends them only with a success: it
    never fails then."""

    operator_extra_links = CHECKPOINT_LINKS

    ui_color = "#e8e8e8"

    def __init__(
        self,
        *,
        operator_tasks: Mapping[str, str] | None = None,
        operator_group: str = "operators",
        finalize_task_id: str = "finalize",
        completing_task_ids: Sequence[str] = (str(WAIT_FOR_ACKS), str(AUDIT)),
        checkpoint_type: str = CheckpointType.CHECKPOINT.value,
        **kwargs: Any,
    ) -> None:
        """`operator_tasks`: Airflow task id -> the pipeline operator it runs, as the
        epoch's plan names them (render_epoch); without, `operator_group`'s tasks.
        `completing_task_ids`: beside finalize, the tasks whose failure a completed
        checkpoint makes moot (the ack sensor, the audit).
        `checkpoint_type`: what the run's trigger triggers, by which a run whose trigger
        returned nothing finds its checkpoint (the savepoint DAG's run may share its id
        with a run of the checkpoint DAG)."""
        super().__init__(**kwargs)
        self.checkpoint_type = checkpoint_type
        self.operator_tasks = dict(operator_tasks) if operator_tasks is not None else None
        self.operator_group = operator_group
        self.finalize_task_id = finalize_task_id
        self.completing_task_ids = (*completing_task_ids, finalize_task_id)

    def operator_of(self, task_id: str) -> str | None:
        if self.operator_tasks is not None:
            return self.operator_tasks.get(task_id)
        group, _, name = task_id.partition(".")
        return name if group == self.operator_group and name else None

    def execute(self, context: Context) -> dict[str, Any]:
        states = self.run_task_states(context)
        failed = sorted(t for t, s in states.items() if s in FAILED_STATES and t != self.task_id)
        checkpoint_id = self.checkpoint_id(context)
        if checkpoint_id is None:  # a trigger that wrote its checkpoint, then died
            checkpoint_id = checkpoint_of_run(
                self.driver().coordinator, context["run_id"], CheckpointType(self.checkpoint_type)
            )
        if checkpoint_id is None:
            if failed:
                raise AirflowFailException(f"no checkpoint: task(s) {failed} failed")
            raise AirflowSkipException("no checkpoint was triggered in this run")
        failed_operators = {
            operator: f"Airflow task {t} failed"
            for t in failed
            if (operator := self.operator_of(t)) is not None
        }
        ti = context["ti"]
        settlement = settle_run(
            self.driver(),
            checkpoint_id,
            failed_operators,
            attempt=attempt_id(context["run_id"], ti.try_number) + "-cleanup",
        )
        self.log.info(
            "%s (action: %s; staged files removed: %d; gc deleted: %d)",
            settlement.message,
            settlement.action,
            len(settlement.discarded_files),
            settlement.gc_deleted,
        )
        if settlement.outcome is None:
            # Every ack is in but its base checkpoint (a concurrent one) is still pending:
            # settling the base finishes this one too. Nothing failed. (Never an audited
            # checkpoint: settle_run aborts one still without a verdict.)
            raise AirflowSkipException(
                f"checkpoint {checkpoint_id} waits for its base checkpoint to settle"
            )
        if settlement.status is not CheckpointStatus.COMPLETED:
            metrics.checkpoint_failed(settlement.outcome)
            raise AirflowFailException(settlement.message)
        # Completed: the sensor, the audit or finalize may have failed on the way (an S3
        # outage at the deadline, a crash after the outcome), but their work is done.
        failed = [t for t in failed if t not in self.completing_task_ids]
        if states.get(self.finalize_task_id) != "success":
            self._emit_completed(context, settlement, failed)
        elif failed:
            raise AirflowFailException(
                f"{settlement.message}, but task(s) {failed} of this run failed"
            )
        return settlement.to_json()

    def _emit_completed(
        self, context: Context, settlement: RunSettlement, failed: list[str]
    ) -> None:
        """This task did finalize's work (finalize failed or never ran), so the asset
        events are its to emit; Airflow sends them only if it succeeds, so nothing else
        fails it now: a completed, published checkpoint whose downstream pipelines never
        heard of it would be worse than a green run beside a failed task."""
        assert settlement.outcome is not None
        metrics.checkpoint_completed(settlement.outcome)
        sinks = published_sinks(self.driver(), settlement.checkpoint_id)
        emit_completed_by_cleanup(context, settlement.outcome.pending, sinks)
        if failed:
            self.log.error(
                "task(s) %s of this run failed, but checkpoint %s completed and its asset "
                "events go out only with this task's success: see those tasks' logs",
                failed,
                settlement.checkpoint_id,
            )
