"""Render a pipeline into its three DAGs (as cosmos renders a dbt project):

    <pipeline>_checkpoint   scheduled: every run is one epoch and, if all goes well, one
                            completed checkpoint
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

from datetime import timedelta
from typing import Any

from airflow.sdk import (
    DAG,
    CronTriggerTimetable,
    DeltaTriggerTimetable,
    Param,
    TaskGroup,
    TriggerRule,
)

from batchpoint.airflow.assets import batchpoint_asset, cleanup_alias
from batchpoint.airflow.config import AirflowDeployment
from batchpoint.airflow.dag_names import dag_ids
from batchpoint.airflow.operators import (
    AuditCheckpointOperator,
    CheckpointCleanupOperator,
    ExportSavepointOperator,
    FinalizeCheckpointOperator,
    PausePipelineOperator,
    RestoreCheckOperator,
    RestoreOperator,
    SparkOperatorJob,
    TriggerCheckpointOperator,
    TriggerSavepointOperator,
)
from batchpoint.airflow.restore_form import restore_form_table, restore_params
from batchpoint.airflow.sensors import CheckpointAckSensor
from batchpoint.errors import ConfigError
from batchpoint.ops.epoch import epoch_tasks
from batchpoint.protocol.pipeline import OperatorKind, PipelineSpec
from batchpoint.quality.suites import audit_enabled
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.loader import load_pipeline
from batchpoint.runtime.restore import RestoreGate
from batchpoint.settings import SparkMode

OPERATOR_GROUP = "operators"
AUDIT_TASK = "audit"


def build_pipeline_dags(
    pipeline: Pipeline,
    pipeline_ref: str,
    deployment: AirflowDeployment,
    *,
    gate: RestoreGate | None = None,
) -> dict[str, DAG]:
    """The three DAGs of one pipeline, by dag_id. `pipeline_ref` is how workers import
    the same pipeline (`module:attribute`); `gate` is the restore quality gate (else
    BATCHPOINT_QUALITY_GATE, loaded at run time)."""
    spec = pipeline.spec()  # validates the graph now, at parse time
    dags = [
        build_checkpoint_dag(pipeline, pipeline_ref, deployment, spec),
        build_savepoint_dag(pipeline, pipeline_ref, deployment, spec),
        build_restore_dag(pipeline, pipeline_ref, deployment, gate=gate),
    ]
    return {dag.dag_id: dag for dag in dags}


def load_dags(deployment: AirflowDeployment | None = None) -> dict[str, DAG]:
    """Every DAG of every pipeline named by BATCHPOINT_PIPELINE_REF."""
    deployment = deployment or AirflowDeployment.from_env()
    out: dict[str, DAG] = {}
    names: dict[str, str] = {}
    for ref in deployment.pipeline_refs:
        try:
            pipeline = load_pipeline(ref)
        except ConfigError as exc:
            raise ConfigError(f"BATCHPOINT_PIPELINE_REF: {exc}") from None
        if pipeline.name in names:
            raise ConfigError(
                f"BATCHPOINT_PIPELINE_REF: {names[pipeline.name]} and {ref} are both "
                f"pipeline '{pipeline.name}'"
            )
        names[pipeline.name] = ref
        out.update(build_pipeline_dags(pipeline, ref, deployment))
    return out


# -- the DAGs ---------------------------------------------------------------------------


def _timetable(schedule: timedelta | str | None) -> Any:
    # Passed explicitly: a bare timedelta schedule in Airflow 3.3.2 picks its timetable
    # from the wrong config option ([scheduler] create_cron_data_intervals).
    if schedule is None:
        return None
    if isinstance(schedule, timedelta):
        return DeltaTriggerTimetable(schedule)
    return CronTriggerTimetable(schedule, timezone="UTC")


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


def _epoch_tasks(
    dag: DAG,
    pipeline: Pipeline,
    ref: str,
    deployment: AirflowDeployment,
    spec: PipelineSpec,
    trigger: Any,
    *,
    audit: bool = False,
) -> tuple[Any, Any, list[Any]]:
    """operators.* and wait_for_acks -> [audit ->] finalize, after `trigger`; returns
    (wait_for_acks, finalize, every other task)."""
    timeout = deployment.checkpoint.timeout
    common = {"pipeline_ref": ref, "aws_conn_id": deployment.storage_conn_id}
    jobs: dict[str, Any] = {}
    with TaskGroup(OPERATOR_GROUP, tooltip="one Spark job per pipeline operator", dag=dag):
        for task in epoch_tasks(spec):
            op = spec.operator(task.operator)
            jobs[op.name] = SparkOperatorJob(
                task_id=op.name,
                operator=op.name,
                deployment=deployment,
                retries=deployment.task_retries,
                retry_delay=timedelta(seconds=deployment.retry_delay),
                execution_timeout=timedelta(seconds=timeout),
                doc_md=_operator_doc(op.name, op.kind, op.inputs, op.parallelism),
                **common,
            )
            ([jobs[name] for name in task.upstream] or trigger) >> jobs[op.name]
    sensor_mode = deployment.sensor_mode
    wait = CheckpointAckSensor(
        task_id="wait_for_acks",
        pipeline=pipeline.name,
        aws_conn_id=deployment.storage_conn_id,
        deferrable=sensor_mode == "deferrable",
        mode="reschedule" if sensor_mode == "reschedule" else "poke",
        poll_interval=deployment.poll_interval,
        timeout=timeout + deployment.cleanup_grace,
        doc_md="Waits for every expected task's ack; fails at once on a decline.",
    )
    finalize = FinalizeCheckpointOperator(
        task_id="finalize",
        outlets=[batchpoint_asset(pipeline.name)],
        retries=2,
        retry_delay=timedelta(seconds=5),
        doc_md="Writes the COMPLETED outcome (after checking every file) and publishes sinks.",
        **common,
    )
    if not audit:
        trigger >> wait >> finalize
        return wait, finalize, list(jobs.values())
    auditor = AuditCheckpointOperator(
        task_id=AUDIT_TASK,
        spark_master=deployment.settings.spark_master,
        spark_conf=deployment.spark_conf,
        spark_remote=deployment.spark_remote
        if deployment.spark_mode is SparkMode.CONNECT
        else None,
        retries=deployment.task_retries,
        retry_delay=timedelta(seconds=deployment.retry_delay),
        execution_timeout=timedelta(seconds=timeout),
        doc_md="Write-audit-publish: runs the pipeline's quality suites on the checkpoint's "
        "state before it completes; passing, completes it and publishes the sinks; failing, "
        'aborts it with reason "quality gate" (report stored beside it) and fails.',
        **common,
    )
    trigger >> wait >> auditor >> finalize
    return wait, finalize, [*jobs.values(), auditor]


def _cleanup_task(
    pipeline: str, ref: str, deployment: AirflowDeployment
) -> CheckpointCleanupOperator:
    """The failure path every epoch DAG ends with, whatever happened before it."""
    return CheckpointCleanupOperator(
        task_id="cleanup",
        outlets=[cleanup_alias(pipeline)],
        pipeline_ref=ref,
        aws_conn_id=deployment.storage_conn_id,
        trigger_rule=TriggerRule.ALL_DONE,
        operator_group=OPERATOR_GROUP,
        doc_md="Always runs: aborts a checkpoint left pending (declined or expired), "
        "removes what it staged, collects garbage; fails the run if it aborted.",
    )


def build_checkpoint_dag(
    pipeline: Pipeline,
    ref: str,
    deployment: AirflowDeployment,
    spec: PipelineSpec | None = None,
) -> DAG:
    spec = spec or pipeline.spec()
    config = deployment.checkpoint
    audit = audits_checkpoints(pipeline, deployment)
    with DAG(
        dag_id=dag_ids(pipeline.name)["checkpoint"],
        schedule=_timetable(deployment.schedule),
        max_active_runs=config.max_concurrent,
        dagrun_timeout=_run_timeout(deployment),
        doc_md=_checkpoint_doc(pipeline, spec, deployment, audit),
        description=f"Scheduled checkpoints of pipeline {pipeline.name}",
        **_common(deployment, pipeline.name),
    ) as dag:
        trigger = TriggerCheckpointOperator(
            task_id="trigger",
            pipeline_ref=ref,
            aws_conn_id=deployment.storage_conn_id,
            audit=audit,
            doc_md="Captures the sources' barrier and writes the pending checkpoint "
            + ("(marked: only its audit may complete it); " if audit else "; ")
            + "skips the run when min-pause or max-concurrent says no, or when no source "
            + "has new input (BATCHPOINT_SKIP_IDLE_EPOCHS).",
        )
        wait, finalize, jobs = _epoch_tasks(
            dag, pipeline, ref, deployment, spec, trigger, audit=audit
        )
        [trigger, wait, finalize, *jobs] >> _cleanup_task(pipeline.name, ref, deployment)
    return dag


def build_savepoint_dag(
    pipeline: Pipeline,
    ref: str,
    deployment: AirflowDeployment,
    spec: PipelineSpec | None = None,
) -> DAG:
    spec = spec or pipeline.spec()
    ids = dag_ids(pipeline.name)
    with DAG(
        dag_id=ids["savepoint"],
        schedule=None,
        max_active_runs=1,
        dagrun_timeout=_run_timeout(deployment),
        doc_md=_savepoint_doc(pipeline, deployment),
        description=f"Manual savepoints of pipeline {pipeline.name}",
        params={
            "target": Param(
                "",
                type="string",
                title="Target location",
                description=(
                    "Folder for the savepoint: s3://bucket/prefix, file:///path, or a path "
                    "under the storage root. Empty: savepoints/"
                    f"{pipeline.name}/savepoint-<id>-<time> under the storage root."
                ),
            ),
            "stop_pipeline": Param(
                False,
                type="boolean",
                title="Stop the pipeline afterwards",
                description=(
                    "Stop-with-savepoint: the checkpoints pending are abandoned and no "
                    "checkpoint starts after the savepoint until `batchpoint resume` or a "
                    f"restore; {ids['checkpoint']} is also paused once the savepoint is "
                    f"written (needs the Airflow connection '{deployment.api_conn_id}')."
                ),
            ),
            "description": Param(
                "",
                type="string",
                title="Description",
                description="Why this savepoint is taken; stored in its _metadata.",
            ),
        },
        **_common(deployment, pipeline.name),
    ) as dag:
        trigger = TriggerSavepointOperator(
            task_id="trigger",
            pipeline_ref=ref,
            aws_conn_id=deployment.storage_conn_id,
            api_conn_id=deployment.api_conn_id,
        )
        wait, finalize, jobs = _epoch_tasks(dag, pipeline, ref, deployment, spec, trigger)
        export = ExportSavepointOperator(
            task_id="export_savepoint",
            pipeline_ref=ref,
            aws_conn_id=deployment.storage_conn_id,
            target="{{ params.target }}",
            description="{{ params.description }}",
            doc_md="Copies every file of the savepoint with relative paths, then _metadata.",
        )
        stop = PausePipelineOperator(
            task_id="stop_pipeline",
            dag_to_pause=ids["checkpoint"],
            api_conn_id=deployment.api_conn_id,
            doc_md="Pauses the checkpoint DAG through the REST API when the form asks to.",
        )
        finalize >> export >> stop
        [trigger, wait, finalize, *jobs] >> _cleanup_task(pipeline.name, ref, deployment)
    return dag


def build_restore_dag(
    pipeline: Pipeline,
    ref: str,
    deployment: AirflowDeployment,
    *,
    gate: RestoreGate | None = None,
) -> DAG:
    common = {"pipeline_ref": ref, "aws_conn_id": deployment.storage_conn_id}
    with DAG(
        dag_id=dag_ids(pipeline.name)["restore"],
        schedule=None,
        max_active_runs=1,
        doc_md=_restore_doc(pipeline, deployment),
        description=f"Restore pipeline {pipeline.name} from a checkpoint or savepoint",
        params=restore_params(pipeline),
        **_common(deployment, pipeline.name),
    ) as dag:
        check = RestoreCheckOperator(
            task_id="check",
            source="{{ params.source }}",
            gate=gate,
            gate_ref=deployment.quality_gate_ref,
            doc_md="Resolves the source and checks it: files and sizes, then the quality "
            "gate as the form set it up (off, how far back, suites skipped, dry run).",
            **common,
        )
        restore = RestoreOperator(
            task_id="restore",
            check_task_id="check",
            dry_run="{{ params.dry_run }}",
            doc_md="Moves the head (sinks rewound, parallelism registered) unless dry run.",
            **common,
        )
        check >> restore
    return dag


# -- documentation shown in the UI ------------------------------------------------------


def _graph_line(spec: PipelineSpec) -> str:
    parts = []
    for op in spec.topological_order():
        label = f"`{op.name}`"
        if op.kind is OperatorKind.SOURCE:
            label += " (source)"
        else:
            label += (
                f" ({op.kind.value}, parallelism {op.parallelism}, from {', '.join(op.inputs)})"
            )
        parts.append(label)
    return " → ".join(parts)


def _settings_table(deployment: AirflowDeployment, audit: bool = False) -> str:
    c = deployment.checkpoint
    schedule = deployment.schedule
    if isinstance(schedule, timedelta):
        every = f"every {schedule.total_seconds():g}s"
    else:
        every = f"cron `{schedule}`" if schedule else "manual only"
    rows = [
        ("interval", every),
        ("timeout", f"{c.timeout:g}s"),
        ("min pause", f"{c.min_pause:g}s"),
        ("max concurrent", c.max_concurrent),
        ("tolerable failed checkpoints", c.tolerable_failed_checkpoints),
        ("retained checkpoints", c.num_retained),
        ("idle epochs", "skipped" if c.skip_idle else "run"),
        (
            "storage",
            f"`{deployment.settings.root}` "
            f"(the connection `{deployment.storage_conn_id}` overrides it)",
        ),
        ("Spark", deployment.spark_description),
        ("audit (write-audit-publish)", "on" if audit else "off"),
    ]
    return "| setting | value |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)


def _operator_doc(name: str, kind: OperatorKind, inputs: tuple[str, ...], parallelism: int) -> str:
    return (
        f"Runs {kind.value} `{name}` (parallelism {parallelism}, reads {', '.join(inputs)}) "
        "for this run's checkpoint as a Spark job (BATCHPOINT_SPARK_MODE): align, restore "
        "state, process, snapshot, acknowledge (or decline)."
    )


def _audit_doc(audit: bool) -> str:
    if not audit:
        return ""
    return """
**Audited** (write-audit-publish): between `wait_for_acks` and `finalize`, `audit` runs
the pipeline's quality suites and checks on the checkpoint's state. Passing, the
checkpoint completes and publishes; failing, it is **ABORTED** with reason *quality gate*
(the report is stored beside it as `quality.json` and summarised in the task log),
nothing is published, the previous checkpoint stays the head, and it counts as a failed
checkpoint.
"""


def _checkpoint_doc(
    pipeline: Pipeline, spec: PipelineSpec, deployment: AirflowDeployment, audit: bool = False
) -> str:
    return f"""\
### Checkpoints of pipeline `{pipeline.name}`

Every run is one **epoch**: `trigger` records how far each source may be read (the
barrier), each operator task runs its Spark job on the input between the base
checkpoint's barrier and this one, and snapshots its state; `wait_for_acks` waits for
every subtask's acknowledgement and `finalize` makes the checkpoint **COMPLETED** and
publishes the sinks. Any failure aborts the checkpoint as a whole (`cleanup` says why);
the next run starts again from the last completed one, so sinks see every input exactly once.
{_audit_doc(audit)}
Graph: {_graph_line(spec)}

{_settings_table(deployment, audit)}

A run is *skipped* when the minimum pause or the concurrency limit says no, or when no
source has new input since the checkpoint it would build on ("idle epochs"); it *fails*
when the pipeline is FAILED after too many failed checkpoints (`batchpoint reset` or a
restore clears that). See also `{pipeline.name}_savepoint` and `{pipeline.name}_restore`.
"""


def _savepoint_doc(pipeline: Pipeline, deployment: AirflowDeployment) -> str:
    return f"""\
### Savepoint of pipeline `{pipeline.name}`

Trigger with config. Runs one epoch as a **savepoint** (retained for ever, never
subsumed, not refused by the checkpoint schedule's limits), then exports it: every file
it references is copied under the target folder with relative paths, plus `_metadata`.
The folder is self-contained: move it anywhere and restore from it with
`{pipeline.name}_restore`. Savepoints are not audited, even when checkpoints are.

*Stop the pipeline afterwards* is Flink's stop-with-savepoint: the savepoint's
admission abandons the checkpoints pending (none of them completes after it), and the
pipeline's control record says it is stopped once the savepoint completes, so every
trigger is refused until `batchpoint resume` or a restore. It also pauses
`{pipeline.name}_checkpoint` through the REST API with the Airflow connection
`{deployment.api_conn_id}` (http: host, port, login, password), so the scheduler stops
creating runs; unpausing alone does not resume the pipeline.
"""


def _restore_doc(pipeline: Pipeline, deployment: AirflowDeployment) -> str:
    if deployment.quality_gate_ref:
        gate = f"the quality gate `{deployment.quality_gate_ref}` must pass"
    else:
        gate = (
            "the quality gate would judge its state, but none is configured "
            "(`BATCHPOINT_QUALITY_GATE`), so only the files are checked"
        )
    return f"""\
### Restore pipeline `{pipeline.name}`

Trigger with config. `check` resolves the source (*latest*, a checkpoint id, or a
savepoint folder) and checks it: every referenced file must exist with its recorded size,
then {gate}; for *latest*, older checkpoints are tried when the newest fails.
`restore` then points the pipeline's head at it (pending checkpoints are aborted, sinks
rewound, a savepoint imported under a new id) and registers the new parallelism. The
next `{pipeline.name}_checkpoint` run continues from there.

{restore_form_table(pipeline)}
"""
