"""Render a pipeline into its three DAGs (as cosmos renders a dbt project):

    <pipeline>_checkpoint   scheduled (schedules.py: a timer, or data-aware on the sinks
                            its pipeline sources read): every run is one epoch and, if
                            all goes well, one completed checkpoint
    <pipeline>_savepoint    manual, with a form: a retained, exported savepoint; can stop
                            (pause) the pipeline afterwards
    <pipeline>_restore      manual, with a form: restore from the latest checkpoint, a
                            checkpoint id or a savepoint, optionally with a new parallelism,
                            through the quality gate (which the form can tune, or turn off
                            with a typed confirmation)

The checkpoint DAG (the savepoint DAG is the same with export and stop added):

    trigger ─┬─> operators.<a> ─> operators.<b> ─> ...   (Spark jobs, topological order)
             └─> wait_for_acks ─> [audit ─>] finalize ──> cleanup (all_done)

`audit` is there with BATCHPOINT_AUDIT=true (or a pipeline that declares
`PipelineQuality(audit=True)`): write-audit-publish, the quality suites judge the
checkpoint before it may complete. Savepoints are not audited.

Nothing here imports pyspark or great_expectations: parsing a DAG file stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from airflow.sdk import DAG, Param

from batchpoint.airflow.config import AirflowDeployment
from batchpoint.airflow.dag_docs import checkpoint_doc, restore_doc, savepoint_doc
from batchpoint.airflow.dag_names import dag_ids
from batchpoint.airflow.epoch_dag import epoch_settings, render_epoch
from batchpoint.airflow.operators import RestoreCheckOperator, RestoreOperator
from batchpoint.airflow.restore_form import restore_params
from batchpoint.airflow.schedules import render_schedule
from batchpoint.errors import ConfigError
from batchpoint.ops.epoch_plan import EpochPlan, plan_epoch
from batchpoint.protocol.checkpoint import CheckpointType
from batchpoint.protocol.pipeline import PipelineSpec
from batchpoint.quality.suites import audit_enabled
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.cascade_plan import downstream_order
from batchpoint.runtime.loader import load_pipeline
from batchpoint.runtime.restore import RestoreGate
from batchpoint.settings import NO_PIPELINE_REF

#: The checkpoint DAG's schedule is the deployment's for its pipeline
#: (AirflowDeployment.schedule_of) unless the factory is given one.
FROM_DEPLOYMENT: Any = object()


def build_pipeline_dags(
    pipeline: Pipeline,
    pipeline_ref: str,
    deployment: AirflowDeployment,
    *,
    gate: RestoreGate | None = None,
    schedule: Any = FROM_DEPLOYMENT,
    deployed: Mapping[str, Pipeline] | None = None,
) -> dict[str, DAG]:
    """The three DAGs of one pipeline, by dag_id. `pipeline_ref` is how workers import
    the same pipeline (`module:attribute`); `gate` is the restore quality gate (else
    BATCHPOINT_QUALITY_GATE, loaded at run time). `schedule` is the checkpoint DAG's:
    what BATCHPOINT_CHECKPOINT_INTERVAL takes (a timedelta, a cron expression, None,
    "upstream") or Airflow assets; default the deployment's for this pipeline.
    `deployed`: the deployment's pipelines by name (an upstream sink's uid is found there)."""
    spec = pipeline.spec()  # validates the graph now, at parse time
    dags = [
        build_checkpoint_dag(
            pipeline, pipeline_ref, deployment, spec, schedule=schedule, deployed=deployed
        ),
        build_savepoint_dag(pipeline, pipeline_ref, deployment, spec),
        build_restore_dag(pipeline, pipeline_ref, deployment, gate=gate, deployed=deployed),
    ]
    return {dag.dag_id: dag for dag in dags}


def load_dags(deployment: AirflowDeployment | None = None) -> dict[str, DAG]:
    """Every DAG of every pipeline named by BATCHPOINT_PIPELINE_REF."""
    deployment = deployment or AirflowDeployment.from_env()
    if not deployment.pipeline_refs:
        raise ConfigError(NO_PIPELINE_REF)
    pipelines: dict[str, tuple[Pipeline, str]] = {}
    for ref in deployment.pipeline_refs:
        try:
            pipeline = load_pipeline(ref)
        except ConfigError as exc:
            raise ConfigError(f"BATCHPOINT_PIPELINE_REF: {exc}") from None
        if pipeline.name in pipelines:
            raise ConfigError(
                f"BATCHPOINT_PIPELINE_REF: {pipelines[pipeline.name][1]} and {ref} are both "
                f"pipeline '{pipeline.name}'"
            )
        pipelines[pipeline.name] = (pipeline, ref)
    unknown = sorted(set(deployment.schedules) - set(pipelines))
    if unknown:
        raise ConfigError(
            f"BATCHPOINT_CHECKPOINT_INTERVALS names {', '.join(map(repr, unknown))}, not a "
            f"pipeline of BATCHPOINT_PIPELINE_REF ({', '.join(sorted(pipelines))})"
        )
    deployed = {name: pipeline for name, (pipeline, _) in pipelines.items()}
    out: dict[str, DAG] = {}
    for pipeline, ref in pipelines.values():
        out.update(build_pipeline_dags(pipeline, ref, deployment, deployed=deployed))
    return out


# -- the DAGs ---------------------------------------------------------------------------


def _common(deployment: AirflowDeployment, pipeline: str) -> dict[str, Any]:
    return {
        "start_date": deployment.start_date,
        "catchup": False,
        "tags": ["batchpoint", pipeline],
    }


def _run_timeout(deployment: AirflowDeployment) -> timedelta:
    # The run outlives its checkpoint by a grace period, so that when the checkpoint
    # expires the cleanup task still gets to record why and remove what it staged.
    return timedelta(seconds=deployment.checkpoint.timeout + deployment.cleanup_grace)


def audits_checkpoints(pipeline: Pipeline, deployment: AirflowDeployment) -> bool:
    """Whether the checkpoint DAG audits: BATCHPOINT_AUDIT, or the pipeline's own
    declaration (`PipelineQuality(audit=True)`), which a deployment cannot turn off."""
    return deployment.audit or audit_enabled(pipeline)


def checkpoint_plan(
    pipeline: Pipeline, deployment: AirflowDeployment, spec: PipelineSpec | None = None
) -> EpochPlan:
    """The scheduled epoch: a checkpoint, audited when `audits_checkpoints` says so."""
    spec = spec or pipeline.spec()
    audit = audits_checkpoints(pipeline, deployment)
    return plan_epoch(spec, epoch_settings(deployment), audit=audit)


def savepoint_plan(deployment: AirflowDeployment, spec: PipelineSpec) -> EpochPlan:
    """The manual epoch: a savepoint (never audited), exported, then the pipeline
    stopped if the form asks (the stop task skips itself otherwise)."""
    settings = epoch_settings(deployment)
    return plan_epoch(spec, settings, CheckpointType.SAVEPOINT, export=True, stop=True)


def build_checkpoint_dag(
    pipeline: Pipeline,
    ref: str,
    deployment: AirflowDeployment,
    spec: PipelineSpec | None = None,
    *,
    schedule: Any = FROM_DEPLOYMENT,
    deployed: Mapping[str, Pipeline] | None = None,
) -> DAG:
    spec = spec or pipeline.spec()
    plan = checkpoint_plan(pipeline, deployment, spec)
    setting = "schedule"  # the factory's argument
    if schedule is FROM_DEPLOYMENT:
        schedule = deployment.schedule_of(pipeline.name)
        setting = deployment.schedule_setting(pipeline.name)
    rendered = render_schedule(pipeline, schedule, deployed, setting)
    with DAG(
        dag_id=dag_ids(pipeline.name)["checkpoint"],
        schedule=rendered.airflow,
        max_active_runs=deployment.checkpoint.max_concurrent,
        dagrun_timeout=_run_timeout(deployment),
        doc_md=checkpoint_doc(pipeline, spec, deployment, plan.audited, schedule=rendered.text),
        description=f"Scheduled checkpoints of pipeline {pipeline.name}",
        **_common(deployment, pipeline.name),
    ) as dag:
        render_epoch(dag, plan, spec, ref, deployment)
    return dag


def _savepoint_params(pipeline: Pipeline, deployment: AirflowDeployment) -> dict[str, Param]:
    checkpoint_dag = dag_ids(pipeline.name)["checkpoint"]
    default_folder = f"savepoints/{pipeline.name}/savepoint-<id>-<time>"
    return {
        # Optional fields are nullable: Airflow's form requires every field whose type
        # does not admit null, and an empty text field is null.
        "target": Param(
            None,
            type=["null", "string"],
            title="Target location",
            description="Folder for the savepoint: s3://bucket/prefix, file:///path, or a path "
            f"under the storage root. Empty: {default_folder} under the storage root.",
        ),
        "stop_pipeline": Param(
            False,
            type="boolean",
            title="Stop the pipeline afterwards",
            description=(
                "Stop-with-savepoint: the checkpoints pending are abandoned and no "
                "checkpoint starts after the savepoint until `batchpoint resume` or a "
                f"restore; {checkpoint_dag} is also paused once the savepoint is "
                f"written (needs the Airflow connection '{deployment.api_conn_id}')."
            ),
        ),
        "description": Param(
            None,
            type=["null", "string"],
            title="Description",
            description="Why this savepoint is taken; stored in its _metadata.",
        ),
    }


def build_savepoint_dag(
    pipeline: Pipeline,
    ref: str,
    deployment: AirflowDeployment,
    spec: PipelineSpec | None = None,
) -> DAG:
    spec = spec or pipeline.spec()
    with DAG(
        dag_id=dag_ids(pipeline.name)["savepoint"],
        schedule=None,
        max_active_runs=1,
        dagrun_timeout=_run_timeout(deployment),
        doc_md=savepoint_doc(pipeline, deployment),
        description=f"Manual savepoints of pipeline {pipeline.name}",
        params=_savepoint_params(pipeline, deployment),
        **_common(deployment, pipeline.name),
    ) as dag:
        render_epoch(dag, savepoint_plan(deployment, spec), spec, ref, deployment)
    return dag


def build_restore_dag(
    pipeline: Pipeline,
    ref: str,
    deployment: AirflowDeployment,
    *,
    gate: RestoreGate | None = None,
    deployed: Mapping[str, Pipeline] | None = None,
) -> DAG:
    """The check and restore tasks; with the form's `cascade`, the pipelines of
    `deployed` (default: this one alone) downstream of this one follow the restore,
    their code imported by the deployment's refs."""
    common = {"pipeline_ref": ref, "aws_conn_id": deployment.storage_conn_id}
    cascade = {"cascade_refs": deployment.pipeline_refs}
    downstream = downstream_order(pipeline.name, {**(deployed or {}), pipeline.name: pipeline})
    with DAG(
        dag_id=dag_ids(pipeline.name)["restore"],
        schedule=None,
        max_active_runs=1,
        doc_md=restore_doc(pipeline, deployment),
        description=f"Restore pipeline {pipeline.name} from a checkpoint or savepoint",
        params=restore_params(pipeline, downstream),
        **_common(deployment, pipeline.name),
    ) as dag:
        check = RestoreCheckOperator(
            task_id="check",
            source="{{ params.source }}",
            gate=gate,
            gate_ref=deployment.quality_gate_ref,
            doc_md="Resolves the source and checks it: files and sizes, then the quality "
            "gate as the form set it up (off, how far back, suites skipped, dry run); "
            "with cascade, plans the pipelines downstream too, each through its own gate.",
            **cascade,
            **common,
        )
        restore = RestoreOperator(
            task_id="restore",
            check_task_id="check",
            dry_run="{{ params.dry_run }}",
            doc_md="Moves the head (sinks rewound, parallelism registered) unless dry run; "
            "with cascade, every head the check planned, upstream first.",
            **cascade,
            **common,
        )
        check >> restore
    return dag
