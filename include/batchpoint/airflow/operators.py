"""Operators of the batchpoint DAGs: each checks its arguments, calls one core step
(`batchpoint.runtime.orchestration`, `.restore`, `batchpoint.protocol.savepoints`,
`batchpoint.quality.audit`) and turns the result into Airflow's vocabulary (XCom, skip,
fail without retry).

Airflow "operators" here run batchpoint *operators* (pipeline nodes) among other things;
`SparkOperatorJob` is the one that does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from batchpoint.airflow.config import AirflowDeployment
from batchpoint.airflow.hooks import (
    AirflowApiHook,
    BatchpointHook,
    SparkSubmitLauncher,
    cached_pipeline,
)
from batchpoint.airflow.sensors import checkpoint_id_from
from batchpoint.errors import BatchpointError, ConfigError, TriggerRefused
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointStatus,
    CheckpointType,
)
from batchpoint.protocol.savepoints import (
    SavepointLocation,
    default_savepoint_prefix,
    export_savepoint,
)
from batchpoint.quality.audit import (
    audit_gate,
    audit_then_finalize,
    audited_properties,
    settle_audited_run,
)
from batchpoint.quality.suites import check_skip_names, quality_of
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.orchestration import (
    attempt_id,
    decline_operator,
    trigger_for_run,
)
from batchpoint.runtime.restore import (
    ConfigurableGate,
    GateOptions,
    RestoreGate,
    RestorePlanner,
    RestoreSource,
    configure_gate,
    parse_flag,
    savepoint_location,
    ungated_phrase,
)
from batchpoint.settings import Settings

FAILED_STATES = ("failed",)


def _params(context: Context) -> Mapping[str, Any]:
    return context.get("params") or {}


class _BatchpointOperator(BaseOperator):
    """Common arguments: which pipeline (by reference, so a worker can import it) and
    which storage connection."""

    ui_color = "#fff3d6"

    def __init__(
        self,
        *,
        pipeline_ref: str,
        storage_conn_id: str = "batchpoint_storage",
        trigger_task_id: str = "trigger",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pipeline_ref = pipeline_ref
        self.storage_conn_id = storage_conn_id
        self.trigger_task_id = trigger_task_id

    @property
    def hook(self) -> BatchpointHook:
        return BatchpointHook(self.storage_conn_id)

    def settings(self) -> Settings:
        """Storage settings; a bad connection or variable fails the task (no retry) with
        the message naming it."""
        try:
            return self.hook.get_settings()
        except ConfigError as exc:
            raise AirflowFailException(str(exc)) from None

    def driver(self, settings: Settings | None = None) -> PipelineDriver:
        try:
            return self.hook.driver(cached_pipeline(self.pipeline_ref), settings or self.settings())
        except ConfigError as exc:
            raise AirflowFailException(str(exc)) from None

    def checkpoint_id(self, context: Context) -> int | None:
        return checkpoint_id_from(context, self.trigger_task_id)

    def run_task_states(self, context: Context) -> dict[str, str]:
        """task_id -> state of this run's other tasks (through the execution API)."""
        ti = context["ti"]
        states = ti.get_task_states(dag_id=ti.dag_id, run_ids=[ti.run_id])
        run_states = states.get(ti.run_id) or {}
        return {k: str(getattr(v, "value", v)) for k, v in run_states.items()}


class TriggerCheckpointOperator(_BatchpointOperator):
    """Start the run's epoch: capture every source's barrier and write the pending
    checkpoint. A refusal by the request decider (min-pause, max-concurrent) skips the
    run with the reason; a FAILED pipeline fails it, as someone must act. With `audit`,
    the checkpoint is marked so that only its audit task may complete it."""

    checkpoint_type = CheckpointType.CHECKPOINT

    def __init__(self, *, audit: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.audit = audit

    def properties(self, context: Context) -> dict[str, Any]:
        return {}

    def execute(self, context: Context) -> dict[str, Any]:
        driver = self.driver()
        properties = self.properties(context)
        if self.audit:
            properties = audited_properties(properties)
        try:
            pending = trigger_for_run(driver, context["run_id"], self.checkpoint_type, properties)
        except TriggerRefused as exc:
            if exc.reason is CheckpointFailureReason.PIPELINE_FAILED:
                raise AirflowFailException(exc.detail) from None
            self.log.warning("no checkpoint this time: %s", exc.detail)
            raise AirflowSkipException(f"checkpoint not triggered: {exc.detail}") from None
        self.log.info(
            "triggered %s %s (base %s), deadline in %.0fs, %d task(s) expected%s",
            pending.type.value,
            pending.checkpoint_id,
            pending.base_checkpoint_id,
            pending.deadline - time.time(),
            len(pending.expected_tasks),
            "; audited: only its audit may complete it" if pending.requires_audit else "",
        )
        return {
            "checkpoint_id": pending.checkpoint_id,
            "type": pending.type.value,
            "base_checkpoint_id": pending.base_checkpoint_id,
            "deadline": pending.deadline,
            "expected_tasks": list(pending.expected_tasks),
            "audit": pending.requires_audit,
        }


class TriggerSavepointOperator(TriggerCheckpointOperator):
    """A savepoint: never refused by min-pause or max-concurrent, retained for ever.
    When the form asks to stop the pipeline afterwards, the API connection is checked
    first, so a missing connection fails the run before any work is done."""

    checkpoint_type = CheckpointType.SAVEPOINT

    def __init__(self, *, api_conn_id: str = "batchpoint_airflow_api", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.api_conn_id = api_conn_id

    def properties(self, context: Context) -> dict[str, Any]:
        params = _params(context)
        return {
            "description": params.get("description") or "",
            "target": params.get("target") or "",
            "stop_pipeline": bool(params.get("stop_pipeline")),
        }

    def execute(self, context: Context) -> dict[str, Any]:
        if _params(context).get("stop_pipeline"):
            try:
                AirflowApiHook(self.api_conn_id).check_configured()
            except ConfigError as exc:
                raise AirflowFailException(str(exc)) from None
        return super().execute(context)


class SparkOperatorJob(_BatchpointOperator):
    """Run one pipeline operator (all its subtasks) for the run's checkpoint with
    spark-submit. Each Airflow try is a new attempt id, so a retry never collides with
    what an earlier try wrote. The runner declines the checkpoint itself when the
    operator raises; when the job dies without declining (killed, out of memory) and no
    retry is left, this task declines on its behalf so the checkpoint aborts at once."""

    template_fields = ("operator",)
    ui_color = "#f5d5b0"

    def __init__(self, *, operator: str, deployment: AirflowDeployment, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.operator = operator
        self.deployment = deployment
        self._launcher: SparkSubmitLauncher | None = None

    def execute(self, context: Context) -> dict[str, Any]:
        checkpoint_id = self.checkpoint_id(context)
        if checkpoint_id is None:
            raise AirflowFailException(f"task '{self.trigger_task_id}' started no checkpoint")
        ti = context["ti"]
        attempt = attempt_id(context["run_id"], ti.try_number, ti.map_index)
        settings = self.settings()
        launcher = self._launcher = SparkSubmitLauncher(self.deployment, self.pipeline_ref)
        argv = launcher.command(settings, checkpoint_id, self.operator, attempt)
        self.log.info("checkpoint %s, attempt %s: %s", checkpoint_id, attempt, " ".join(argv))
        result = launcher.run(argv, launcher.environment(settings), self.log.info)
        if result.returncode == 0:
            self.log.info("%s done in %.1fs", self.operator, result.seconds)
            return {"checkpoint_id": checkpoint_id, "attempt": attempt, "seconds": result.seconds}
        tail = "\n".join(result.tail[-15:])
        if result.returncode in (2, 3):
            # 2: configuration; 3: the operator failed and its runner declined (or the
            # checkpoint was already settled). Retrying cannot help either.
            raise AirflowFailException(
                f"operator '{self.operator}' failed (exit {result.returncode}):\n{tail}"
            )
        reason = f"Spark job of '{self.operator}' died (exit {result.returncode})"
        if ti.try_number > self.retries:
            self.log.error("%s and no retry is left: declining for it", reason)
            try:
                decline_operator(
                    self.driver().coordinator, checkpoint_id, self.operator, attempt, reason
                )
            except BatchpointError as exc:
                self.log.error("could not decline checkpoint %s: %s", checkpoint_id, exc)
            raise AirflowFailException(f"{reason}:\n{tail}")
        raise AirflowException(f"{reason}; a retry will run a new attempt:\n{tail}")

    def on_kill(self) -> None:
        if self._launcher is not None:
            self._launcher.kill()


class AuditCheckpointOperator(_BatchpointOperator):
    """Write-audit-publish: every ack is in; validate the pending checkpoint's state with
    the pipeline's quality gate (integrity, then its declared suites and checks, Spark
    started in this task on `spark_master`), then finalize with the verdict. Passing, the
    checkpoint completes and its sinks publish; failing, it is aborted with reason
    "quality gate" and its report stored beside it, nothing is published, and this task
    fails (no retry: the state will not change) with the report's summary."""

    template_fields = ("spark_master",)
    ui_color = "#d6ecff"

    def __init__(
        self,
        *,
        spark_master: str,
        spark_conf: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spark_master = spark_master
        self.spark_conf = dict(spark_conf or {})

    def execute(self, context: Context) -> dict[str, Any]:
        checkpoint_id = self.checkpoint_id(context)
        if checkpoint_id is None:
            raise AirflowFailException(f"task '{self.trigger_task_id}' started no checkpoint")
        settings = self.settings()
        driver = self.driver(settings)
        try:
            with audit_gate(
                driver.pipeline,
                settings.store_ref,
                self.spark_master,
                spark_conf=self.spark_conf,
                log=self.log.info,
            ) as gate:
                audit = audit_then_finalize(driver, checkpoint_id, gate)
        except ConfigError as exc:  # a suite that cannot be built: no verdict to give
            raise AirflowFailException(str(exc)) from None
        outcome = audit.outcome
        if outcome is None:
            # Acks missing (not after wait_for_acks), or a passing audit whose base
            # checkpoint is still pending: a retry audits again once it settled.
            raise AirflowException(f"{audit.render()}\ncheckpoint {checkpoint_id} not decided")
        if outcome.status is CheckpointStatus.ABORTED:
            reason = outcome.reason.code if outcome.reason else "-"
            raise AirflowFailException(
                f"checkpoint {checkpoint_id} aborted ({reason}): {outcome.message}\n"
                + audit.render()
            )
        self.log.info("%s", audit.render())
        return {
            "checkpoint_id": checkpoint_id,
            "status": outcome.status.value,
            "audited": audit.report is not None,
            "report": driver.coordinator.layout.quality_report(checkpoint_id),
            "published": audit.published,
        }


class FinalizeCheckpointOperator(_BatchpointOperator):
    """Every ack is in: write the outcome (after checking every referenced file) and
    publish the sinks' staged output (notifyCheckpointComplete)."""

    def execute(self, context: Context) -> dict[str, Any]:
        checkpoint_id = self.checkpoint_id(context)
        if checkpoint_id is None:
            raise AirflowFailException(f"task '{self.trigger_task_id}' started no checkpoint")
        driver = self.driver()
        outcome = driver.coordinator.try_finalize(checkpoint_id)
        if outcome is None:
            pending = driver.coordinator.get_pending(checkpoint_id)
            if pending is not None and pending.requires_audit:
                raise AirflowFailException(
                    f"checkpoint {checkpoint_id} is audited: only its audit task may "
                    "complete it, and it gave no verdict"
                )
            raise AirflowException(f"checkpoint {checkpoint_id} still misses acks")
        if outcome.status is CheckpointStatus.ABORTED:
            reason = outcome.reason.code if outcome.reason else "-"
            raise AirflowFailException(
                f"checkpoint {checkpoint_id} aborted ({reason}): {outcome.message}"
            )
        assert outcome.completed is not None
        published = driver.notify_complete(checkpoint_id)
        self.log.info(
            "checkpoint %s COMPLETED: %d file(s), %d bytes; published %s",
            checkpoint_id,
            len(outcome.completed.handles),
            outcome.completed.state_size,
            published or "nothing new",
        )
        return {
            "checkpoint_id": checkpoint_id,
            "status": outcome.status.value,
            "files": len(outcome.completed.handles),
            "state_size": outcome.completed.state_size,
            "published": published,
        }


class CheckpointCleanupOperator(_BatchpointOperator):
    """The run's last task (trigger rule all_done): settle the checkpoint whatever
    happened (abort it as declined or expired if nobody did, or as failed if it is
    audited and its audit gave no verdict; remove what it staged; publish and collect
    garbage if it completed), then fail the run if the checkpoint aborted or any task
    failed, so the run's colour tells the truth."""

    ui_color = "#e8e8e8"

    def __init__(self, *, operator_group: str = "operators", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.operator_group = operator_group

    def execute(self, context: Context) -> dict[str, Any]:
        states = self.run_task_states(context)
        failed = sorted(t for t, s in states.items() if s in FAILED_STATES and t != self.task_id)
        checkpoint_id = self.checkpoint_id(context)
        if checkpoint_id is None:
            if failed:
                raise AirflowFailException(f"no checkpoint: task(s) {failed} failed")
            raise AirflowSkipException("no checkpoint was triggered in this run")
        prefix = f"{self.operator_group}."
        failed_operators = {
            t.removeprefix(prefix): f"Airflow task {t} failed"
            for t in failed
            if t.startswith(prefix)
        }
        driver = self.driver()
        ti = context["ti"]
        settlement = settle_audited_run(
            driver,
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
            # checkpoint: settle_audited_run aborts one still without a verdict.)
            raise AirflowSkipException(
                f"checkpoint {checkpoint_id} waits for its base checkpoint to settle"
            )
        if settlement.status is not CheckpointStatus.COMPLETED:
            raise AirflowFailException(settlement.message)
        if failed:
            raise AirflowFailException(
                f"{settlement.message}, but task(s) {failed} of this run failed"
            )
        return settlement.to_json()


class ExportSavepointOperator(_BatchpointOperator):
    """Copy the completed savepoint into its target folder with `_metadata`."""

    template_fields = ("target", "description")

    def __init__(self, *, target: str = "", description: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.description = description

    def execute(self, context: Context) -> dict[str, Any]:
        checkpoint_id = self.checkpoint_id(context)
        if checkpoint_id is None:
            raise AirflowFailException(f"task '{self.trigger_task_id}' started no savepoint")
        settings = self.settings()
        coordinator = self.driver(settings).coordinator
        try:
            if self.target.strip():
                target = savepoint_location(
                    self.target.strip(), coordinator.store, settings.store_options
                )
            else:
                prefix = default_savepoint_prefix(coordinator.pipeline, checkpoint_id, time.time())
                target = SavepointLocation(coordinator.store, prefix)
            report = export_savepoint(
                coordinator,
                checkpoint_id,
                target,
                description=self.description,
                progress=self.log.info,
            )
        except BatchpointError as exc:
            raise AirflowFailException(str(exc)) from None
        self.log.info("savepoint of checkpoint %s: %s", checkpoint_id, report.location.uri)
        return {
            "checkpoint_id": checkpoint_id,
            "location": report.location.uri,
            "files": report.files,
            "bytes": report.bytes,
        }


class PausePipelineOperator(BaseOperator):
    """Stop-with-savepoint: pause the pipeline's checkpoint DAG through the REST API.
    Runs already started finish; no new scheduled run starts until it is unpaused."""

    template_fields = ("stop",)

    def __init__(
        self,
        *,
        dag_to_pause: str,
        stop: bool | str = "{{ params.stop_pipeline }}",
        api_conn_id: str = "batchpoint_airflow_api",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.dag_to_pause = dag_to_pause
        self.stop = stop
        self.api_conn_id = api_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        stop = self.stop if isinstance(self.stop, bool) else str(self.stop).lower() == "true"
        if not stop:
            raise AirflowSkipException("stop_pipeline was not asked for")
        try:
            result = AirflowApiHook(self.api_conn_id).set_paused(self.dag_to_pause, True)
        except ConfigError as exc:
            raise AirflowFailException(str(exc)) from None
        self.log.info("paused %s: %s", self.dag_to_pause, result)
        return result


class RestoreCheckOperator(_BatchpointOperator):
    """Resolve the restore source to a candidate and check it: every file present with
    its recorded size, then the quality gate if one is configured. Writes nothing, except
    that the gate quarantines (and stores the report of) each candidate it fails, unless
    this is a dry run.

    The form's gate fields (`quality_gate`, `confirm_ungated`, `max_candidates`,
    `skip_suites`, `dry_run`) are read from the run's params; the arguments of the same
    names are the values used when a param is absent."""

    template_fields = ("source", "parallelism")

    def __init__(
        self,
        *,
        source: Any = "{{ params.source }}",
        parallelism: Any = None,
        gate: RestoreGate | None = None,
        gate_ref: str | None = None,
        quality_gate: bool = True,
        confirm_ungated: str = "",
        max_candidates: int | None = None,
        skip_suites: Sequence[str] = (),
        dry_run: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.parallelism = parallelism
        self.gate = gate
        self.gate_ref = gate_ref
        self.quality_gate = quality_gate
        self.confirm_ungated = confirm_ungated
        self.max_candidates = max_candidates
        self.skip_suites = list(skip_suites)
        self.dry_run = dry_run

    def _gate(self) -> RestoreGate | None:
        if self.gate is not None:
            return self.gate
        if self.gate_ref:
            # Loaded here, at run time: a Great Expectations gate must not be imported
            # when the DAG file is parsed.
            return _load_callable(self.gate_ref)
        return None

    def _gate_for_run(
        self, options: GateOptions, dry_run: bool, pipeline: Pipeline
    ) -> RestoreGate | None:
        if not options.enabled:
            self.log.warning(
                "quality gate OFF for this restore (confirmed: %r): only the candidates' "
                "files are checked",
                ungated_phrase(pipeline.name),
            )
            if options.skip_suites:
                self.log.info("skip_suites ignored: no suite runs with the gate off")
            return None
        gate = self._gate()
        if gate is None:
            # Still checked: a name the pipeline does not declare is a mistake either way.
            check_skip_names(pipeline, quality_of(pipeline), options.skip_suites)
            self.log.info(
                "no quality gate is configured (BATCHPOINT_QUALITY_GATE is not set), so no "
                "suites are configured: only the candidates' files are checked"
            )
            return None
        if dry_run and not isinstance(gate, ConfigurableGate):
            self.log.warning("dry run: the quality gate %s cannot be told to record nothing", gate)
        self.log.info(
            "quality gate: %s%s%s",
            self.gate_ref or gate,
            f"; skipping {', '.join(options.skip_suites)}" if options.skip_suites else "",
            "; dry run: nothing is quarantined or stored" if dry_run else "",
        )
        return configure_gate(gate, record=not dry_run, skip_suites=options.skip_suites)

    def execute(self, context: Context) -> dict[str, Any]:
        params = _params(context)
        # The form is checked before anything is read: a missing confirmation fails the
        # task at once, with the phrase to type.
        try:
            pipeline = cached_pipeline(self.pipeline_ref)
            options = GateOptions.from_form(
                pipeline.name,
                quality_gate=params.get("quality_gate", self.quality_gate),
                confirm_ungated=params.get("confirm_ungated", self.confirm_ungated),
                max_candidates=params.get("max_candidates", self.max_candidates),
                skip_suites=params.get("skip_suites", self.skip_suites),
            )
            dry_run = parse_flag("dry_run", params.get("dry_run", self.dry_run))
        except BatchpointError as exc:
            raise AirflowFailException(str(exc)) from None
        parallelism = params.get("parallelism", self.parallelism)
        settings = self.settings()
        try:
            planner = RestorePlanner(
                self.driver(settings),
                gate=self._gate_for_run(options, dry_run, pipeline),
                checksums=settings.checkpoint.verify_checksums,
                store_options=settings.store_options,
                progress=self.log.info,
                max_candidates=options.max_candidates,
            )
            plan = planner.plan(self.source, parallelism)
        except BatchpointError as exc:
            raise AirflowFailException(str(exc)) from None
        report = plan.to_json()
        chosen = plan.chosen
        if chosen is None:
            raise AirflowFailException(plan.refusal())
        report["quality_gate"] = {
            "enabled": options.enabled,
            "gate": self.gate_ref or (None if self.gate is None else str(self.gate)),
            "skip_suites": list(options.skip_suites),
            "dry_run": dry_run,
        }
        report["restore"] = {
            "kind": chosen.kind,
            "checkpoint_id": chosen.checkpoint_id,
            "location": chosen.savepoint.uri if chosen.savepoint else None,
        }
        self.log.info("restore candidate: %s", report["chosen"])
        return report


class RestoreOperator(_BatchpointOperator):
    """Restore to what the check task chose (unless this is a dry run): import a
    savepoint, move the head (new restore generation), rewind the sinks, register the
    new parallelism. The next checkpoint run continues from there."""

    template_fields = ("dry_run",)

    def __init__(
        self,
        *,
        check_task_id: str = "check",
        dry_run: bool | str = "{{ params.dry_run }}",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.check_task_id = check_task_id
        self.dry_run = dry_run

    def execute(self, context: Context) -> dict[str, Any]:
        report = context["ti"].xcom_pull(task_ids=self.check_task_id) or {}
        dry_run = (
            self.dry_run if isinstance(self.dry_run, bool) else str(self.dry_run).lower() == "true"
        )
        if dry_run:
            raise AirflowSkipException(f"dry run: would restore {report.get('chosen')}")
        chosen = report.get("restore") or {}
        source = chosen.get("location") or chosen.get("checkpoint_id")
        settings = self.settings()
        driver = self.driver(settings)
        # Checked again without the gate (it passed in the check task): the files must
        # still be there, and 'latest' must not slide to a newer checkpoint meanwhile.
        planner = RestorePlanner(
            driver, store_options=settings.store_options, progress=self.log.info
        )
        try:
            plan = planner.plan(RestoreSource.parse(source), report.get("parallelism") or None)
            result = planner.apply(plan)
        except BatchpointError as exc:
            raise AirflowFailException(str(exc)) from None
        self.log.info(
            "restored '%s' to checkpoint %s (restore generation %s)",
            result.pipeline,
            result.checkpoint_id,
            result.restore_generation,
        )
        return result.to_json()


def _load_callable(reference: str) -> Callable[..., Any]:
    import importlib

    module_name, _, attribute = reference.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise AirflowFailException(f"BATCHPOINT_QUALITY_GATE={reference!r}: {exc}") from None


__all__ = [
    "AuditCheckpointOperator",
    "CheckpointCleanupOperator",
    "ExportSavepointOperator",
    "FinalizeCheckpointOperator",
    "PausePipelineOperator",
    "RestoreCheckOperator",
    "RestoreOperator",
    "SparkOperatorJob",
    "TriggerCheckpointOperator",
    "TriggerSavepointOperator",
]
