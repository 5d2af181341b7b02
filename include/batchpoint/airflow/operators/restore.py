"""The restore DAG's operators: check (resolve the source to a candidate, check its
files, run the quality gate) and restore (move the pipeline there); with the form's
`cascade`, the pipelines downstream that read what the restore takes back follow it
(operators/cascade.py)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from airflow.sdk import Context

from batchpoint.airflow import metrics
from batchpoint.airflow.compat import AirflowFailException, AirflowSkipException
from batchpoint.airflow.hooks import cached_pipeline
from batchpoint.airflow.operators.base import BatchpointOperator, params_of, template_flag
from batchpoint.airflow.operators.cascade import (
    CASCADE,
    CascadeHandover,
    cascade_context,
    check_cascade_form,
)
from batchpoint.airflow.spark_connection import gate_spark_settings
from batchpoint.errors import BatchpointError, DeployRefused
from batchpoint.ops.cascade import apply_planned, plan_cascade_of
from batchpoint.ops.gates import GateChoice, choose_member_gate, choose_restore_gate
from batchpoint.ops.restore import apply_restore, check_restore_deploy, restore
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import (
    ClaimMode,
    GateOptions,
    RestoreGate,
    RestorePlan,
    parse_flag,
)
from batchpoint.settings import Settings
from batchpoint.settings.spark_endpoint import spark_endpoint


class RestoreCheckOperator(BatchpointOperator):
    """Resolve the restore source to a candidate and check it: every file present with
    its recorded size, then the quality gate if one is configured. Writes nothing, except
    that the gate quarantines (and stores the report of) each candidate it fails, unless
    this is a dry run. The gate's Spark session (batchpoint's gate) is on the endpoint
    of `spark_conn_id` (default BATCHPOINT_SPARK_CONN_ID, else the provider's default id
    of the mode), as the operator tasks' is; the variables when it does not exist.

    The form's gate fields (`quality_gate`, `confirm_ungated`, `max_candidates`,
    `skip_suites`, `dry_run`) are read from the run's params; the arguments of the same
    names are the values used when a param is absent.

    With `cascade` (the param, else the argument) it plans the cascade instead: this
    pipeline's restore and each pipeline of `cascade_refs` downstream of it, every one
    through its own gate (`choose_member_gate`); a refusal anywhere fails the task and
    no head moves. Its XCom is then the targets and the plan (CascadeHandover)."""

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
        allow_non_restored_state: bool = False,
        spark_conn_id: str | None = None,
        cascade: bool = False,
        cascade_refs: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.cascade = cascade
        self.cascade_refs = list(cascade_refs)
        self.parallelism = parallelism
        self.gate = gate
        self.gate_ref = gate_ref
        self.quality_gate = quality_gate
        self.confirm_ungated = confirm_ungated
        self.max_candidates = max_candidates
        self.skip_suites = list(skip_suites)
        self.dry_run = dry_run
        self.allow_non_restored_state = allow_non_restored_state
        self.spark_conn_id = spark_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        params = params_of(context)
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
            allow = parse_flag(
                "allow_non_restored_state",
                params.get("allow_non_restored_state", self.allow_non_restored_state),
            )
            cascade = parse_flag("cascade", params.get("cascade", self.cascade))
            if cascade:
                check_cascade_form(self.source, params)
        except BatchpointError as exc:
            raise AirflowFailException(str(exc)) from None
        settings = self.settings()
        if cascade:
            scale = params.get("parallelism", self.parallelism)
            return self._check_cascade(pipeline, options, dry_run, settings, scale)
        try:
            gate = self._choose_gate(pipeline, options, dry_run)
            driver = self.driver(settings)
            # Looked up when the gate first asks for Spark: a check of files alone needs none.
            with spark_endpoint(lambda: gate_spark_settings(settings, self.spark_conn_id)):
                run = restore(
                    driver,
                    self.source,
                    gate,
                    options,
                    parallelism=params.get("parallelism", self.parallelism),
                    checksums=None,  # the planner: sha256 by the gate, else before it
                    dry_run=dry_run,
                    check_only=True,  # apply_restore is the next task's
                    store_options=settings.store_options,
                    savepoint_roots=settings.savepoint_roots,
                    progress=self.log.info,
                    allow_non_restored_state=allow,  # a refusal comes before the gate
                )
        except DeployRefused as exc:
            raise self._deploy_refused(exc) from None
        except BatchpointError as exc:
            raise AirflowFailException(str(exc)) from None
        if not dry_run:
            rejected = sum(1 for c in run.plan.checks if c.gate is not None and not c.gate.passed)
            metrics.gate_rejected(pipeline.name, rejected)
        if run.refused:
            raise AirflowFailException(run.plan.refusal())
        self._check_deploy(driver, run.plan, allow, settings)
        for line in run.plan.render():
            self.log.info("%s", line)
        # The plan crosses to the restore task as the top level of this JSON.
        return run.to_json()

    def _check_cascade(
        self,
        pipeline: Pipeline,
        options: GateOptions,
        dry_run: bool,
        settings: Settings,
        parallelism: Any,
    ) -> dict[str, Any]:
        def gate_for(member: Pipeline) -> RestoreGate | None:
            choice = choose_member_gate(
                member,
                options,
                gate=self.gate if member.name == pipeline.name else None,
                reference=self.gate_ref,
                dry_run=dry_run,
                log=self.log.info,
            )
            self.log.info("%s: %s", member.name, choice.description)
            for warning in choice.warnings:
                self.log.warning("%s", warning)
            return choice.gate

        try:
            context = cascade_context(
                self.cascade_refs, pipeline, settings, self.log.info, gate_for
            )
            with spark_endpoint(lambda: gate_spark_settings(settings, self.spark_conn_id)):
                plan = plan_cascade_of(
                    context, pipeline.name, self.source, record=not dry_run,
                    parallelism=parallelism,
                )  # fmt: skip
        except BatchpointError as exc:
            raise AirflowFailException(str(exc)) from None
        for line in plan.render().splitlines():
            self.log.info("%s", line)
        for member in plan.members:
            if member.plan is not None and not dry_run:
                judged = [c.gate for c in member.plan.checks if c.gate is not None]
                metrics.gate_rejected(member.pipeline, sum(not g.passed for g in judged))
        if plan.refused:
            raise AirflowFailException(f"cascade refused, no head moved: {plan.refusal()}")
        return CascadeHandover.of(plan).to_json()

    def _choose_gate(self, pipeline: Pipeline, options: GateOptions, dry_run: bool) -> GateChoice:
        # The gate is loaded here, at run time: a Great Expectations gate must not be
        # imported when the DAG file is parsed.
        gate = choose_restore_gate(
            pipeline,
            options,
            gate=self.gate,
            reference=self.gate_ref,
            dry_run=dry_run,
            log=self.log.info,
        )
        self.log.info("%s", gate.description)
        for warning in gate.warnings:
            self.log.warning("%s", warning)
        return gate

    def _check_deploy(
        self, driver: PipelineDriver, plan: RestorePlan, allow: bool, settings: Settings
    ) -> None:
        """The deploy plan of the code on the chosen candidate, logged; a refused one
        fails the check (the restore task would refuse it too)."""
        try:
            deploy = check_restore_deploy(
                driver,
                plan,
                allow,
                store_options=settings.store_options,
                savepoint_roots=settings.savepoint_roots,
            )
        except DeployRefused as exc:
            raise self._deploy_refused(exc) from None
        except BatchpointError as exc:
            raise AirflowFailException(str(exc)) from None
        if deploy is not None:
            for line in deploy.render(compact=True).splitlines():
                self.log.info("%s", line)

    def _deploy_refused(self, exc: DeployRefused) -> AirflowFailException:
        """The refused deploy plan, logged, and the task's failure naming the allowance."""
        for line in exc.plan.render().splitlines():  # type: ignore[attr-defined]
            self.log.error("%s", line)
        return AirflowFailException(f"{exc} (the form's 'Allow non-restored state' allows it)")


class RestoreOperator(BatchpointOperator):
    """Restore to what the check task chose (unless this is a dry run): read its
    RestorePlan from the check's XCom, log it, then import a savepoint, move the head
    (new restore generation), rewind the sinks, register the new parallelism. The next
    checkpoint run continues from there.

    `claim_mode`: a ClaimMode, or its value (`claim`, `no_claim`), default the form's
    field. `claim` (a bool, or its rendered template) is the older spelling of the same,
    deprecated: `claim=True` is `claim_mode=ClaimMode.CLAIM`.

    When the check planned a cascade, its targets are applied as one cascade
    (ops.cascade.apply_planned: each target's files checked again, without the gate),
    the pipelines' code from `cascade_refs` as the check task had it."""

    template_fields = ("dry_run", "claim_mode", "allow_non_restored_state")

    def __init__(
        self,
        *,
        check_task_id: str = "check",
        dry_run: bool | str = "{{ params.dry_run }}",
        claim_mode: ClaimMode | str = "{{ params.claim_mode }}",
        claim: bool | str | None = None,
        allow_non_restored_state: bool | str = "{{ params.allow_non_restored_state }}",
        cascade_refs: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.cascade_refs = list(cascade_refs)
        if claim is not None:
            warnings.warn(
                "RestoreOperator(claim=...) is deprecated: pass claim_mode=ClaimMode.CLAIM "
                "(or 'claim', 'no_claim')",
                DeprecationWarning,
                stacklevel=2,
            )
            claim_mode = claim if isinstance(claim, str) else ClaimMode.of(claim)
        self.check_task_id = check_task_id
        self.dry_run = dry_run
        # A DAG without the param renders it empty: NO_CLAIM.
        self.claim_mode = claim_mode
        self.allow_non_restored_state = allow_non_restored_state  # without the param: no

    def execute(self, context: Context) -> dict[str, Any] | None:
        report = context["ti"].xcom_pull(task_ids=self.check_task_id) or {}
        cascade = CascadeHandover.from_json(report) if CASCADE in report else None
        if template_flag(self.dry_run):
            would = report.get("chosen") if cascade is None else cascade.summary()
            raise AirflowSkipException(f"dry run: would restore {would}")
        settings = self.settings()
        if cascade is not None:
            return self._apply_cascade(cascade, settings)
        try:
            plan = RestorePlan.from_json(report, f"the XCom of task {self.check_task_id}")
            mode = self._mode(context)
            for line in plan.render():
                self.log.info("%s", line)
            run = apply_restore(
                self.driver(settings),
                plan,
                mode=mode,
                allow_non_restored_state=template_flag(self.allow_non_restored_state),
                store_options=settings.store_options,
                savepoint_roots=settings.savepoint_roots,
                progress=self.log.info,
            )
        except BatchpointError as exc:
            raise AirflowFailException(str(exc)) from None
        self.log.info(
            "restored '%s' to checkpoint %s (restore generation %s, %s)",
            run.pipeline,
            run.checkpoint_id,
            run.restore_generation,
            "claimed" if run.claimed else "not claimed",
        )
        metrics.restored(run.pipeline)
        return run.result_json()

    def _apply_cascade(self, cascade: CascadeHandover, settings: Settings) -> dict[str, Any]:
        for line in cascade.rendered.splitlines():
            self.log.info("%s", line)
        try:
            root = cached_pipeline(self.pipeline_ref)
            context = cascade_context(self.cascade_refs, root, settings, self.log.info)
            record = apply_planned(
                context, cascade.root, cascade.targets, parallelism=cascade.parallelism
            )
        except BatchpointError as exc:
            raise AirflowFailException(str(exc)) from None
        for step in record.steps:
            if step.done:
                metrics.restored(step.pipeline)
        if record.failure:
            raise AirflowFailException(f"cascade {record.cascade_id} failed: {record.failure}")
        self.log.info("restored %s as cascade %s", cascade.summary(), record.cascade_id)
        return record.to_json()

    def _mode(self, context: Context) -> ClaimMode:
        """The claim mode asked; a run triggered with the older `claim` conf key (a
        bool) is honoured too."""
        rendered = "" if self.claim_mode in (None, "None") else self.claim_mode
        mode = ClaimMode.of(rendered)
        legacy = params_of(context).get("claim")
        if mode is ClaimMode.NO_CLAIM and legacy is not None:
            return ClaimMode.of(parse_flag("claim", legacy))
        return mode
