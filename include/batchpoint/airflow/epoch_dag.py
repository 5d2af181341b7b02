"""An EpochPlan rendered into Airflow tasks: one operator class per task kind, the
plan's settings as Airflow's (retries, retry delay, execution timeout, trigger rule) and
its edges as dependencies. The plan decides the epoch's shape; this module only
translates it (cosmos: DbtGraph -> TaskMetadata -> render)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airflow.sdk import DAG, BaseOperator, TaskGroup

from batchpoint.airflow.assets import batchpoint_asset, cleanup_alias, sinks_alias
from batchpoint.airflow.compat import TriggerRule
from batchpoint.airflow.config import AirflowDeployment
from batchpoint.airflow.dag_docs import TASK_DOCS, operator_doc, trigger_doc
from batchpoint.airflow.dag_names import dag_ids
from batchpoint.airflow.mixins import BatchpointTaskMixin
from batchpoint.airflow.operators import (
    AuditCheckpointOperator,
    CheckpointCleanupOperator,
    ExportSavepointOperator,
    FinalizeCheckpointOperator,
    PausePipelineOperator,
    SparkOperatorJob,
    TriggerCheckpointOperator,
    TriggerSavepointOperator,
)
from batchpoint.airflow.outages import outage_retry_policy
from batchpoint.airflow.sensors import CheckpointAckSensor
from batchpoint.ops.epoch_plan import (
    OPERATOR_GROUP,
    EpochPlan,
    EpochSettings,
    EpochTaskId,
    PlannedTask,
    RunsWhen,
    TaskKind,
)
from batchpoint.protocol.checkpoint import CheckpointType
from batchpoint.protocol.pipeline import PipelineSpec
from batchpoint.settings.sensor_mode import SensorMode

#: The one mapping from task kind to the Airflow operator that runs it.
OPERATOR_CLASSES: Mapping[TaskKind, type[BaseOperator]] = {
    TaskKind.TRIGGER_CHECKPOINT: TriggerCheckpointOperator,
    TaskKind.TRIGGER_SAVEPOINT: TriggerSavepointOperator,
    TaskKind.OPERATOR: SparkOperatorJob,
    TaskKind.WAIT_FOR_ACKS: CheckpointAckSensor,
    TaskKind.AUDIT: AuditCheckpointOperator,
    TaskKind.FINALIZE: FinalizeCheckpointOperator,
    TaskKind.EXPORT_SAVEPOINT: ExportSavepointOperator,
    TaskKind.STOP_PIPELINE: PausePipelineOperator,
    TaskKind.CLEANUP: CheckpointCleanupOperator,
}

TRIGGER_RULES: Mapping[RunsWhen, TriggerRule] = {
    RunsWhen.UPSTREAM_SUCCEEDED: TriggerRule.ALL_SUCCESS,
    RunsWhen.UPSTREAM_DONE: TriggerRule.ALL_DONE,
}

GROUP_TOOLTIPS = {OPERATOR_GROUP: "one Spark job per pipeline operator"}
TRIGGER_KINDS = (TaskKind.TRIGGER_CHECKPOINT, TaskKind.TRIGGER_SAVEPOINT)


def epoch_settings(deployment: AirflowDeployment) -> EpochSettings:
    return EpochSettings(
        deployment.checkpoint.timeout,
        deployment.task_retries,
        deployment.retry_delay,
        deployment.cleanup_grace,
    )


@dataclass(frozen=True)
class _Render:
    """What the arguments of a task are made of, beside the task itself."""

    plan: EpochPlan
    spec: PipelineSpec
    ref: str
    deployment: AirflowDeployment

    @property
    def storage(self) -> dict[str, Any]:
        return {"pipeline_ref": self.ref, "aws_conn_id": self.deployment.storage_conn_id}

    def task_id(self, *kinds: TaskKind) -> str:
        """The Airflow task id of the plan's task of one of `kinds`, as the plan names it."""
        return next(str(t.id) for t in self.plan.tasks if t.kind in kinds)


def _settings(task: PlannedTask) -> dict[str, Any]:
    """The plan's retry and timeout settings in Airflow's words (the sensor's timeout is
    its own: how long it waits)."""
    s = task.settings
    out: dict[str, Any] = {}
    if s.retries is not None:
        out["retries"] = s.retries
    if s.retry_delay is not None:
        out["retry_delay"] = timedelta(seconds=s.retry_delay)
    if s.timeout is not None and task.kind is not TaskKind.WAIT_FOR_ACKS:
        out["execution_timeout"] = timedelta(seconds=s.timeout)
    if task.runs_when is not RunsWhen.UPSTREAM_SUCCEEDED:
        out["trigger_rule"] = TRIGGER_RULES[task.runs_when]
    return out


def _trigger(task: PlannedTask, r: _Render) -> dict[str, Any]:
    return {
        **r.storage,
        "audit": r.plan.audited,
        "doc_md": trigger_doc(r.plan.audited),
        # a try that waited out S3's outage is retried at once
        **outage_retry_policy(),
    }


def _trigger_savepoint(task: PlannedTask, r: _Render) -> dict[str, Any]:
    return {**r.storage, "api_conn_id": r.deployment.api_conn_id, **outage_retry_policy()}


def _operator(task: PlannedTask, r: _Render) -> dict[str, Any]:
    assert task.operator is not None
    op = r.spec.operator(task.operator)
    return {
        **r.storage,
        "operator": op.name,
        "deployment": r.deployment,
        "doc_md": operator_doc(op.name, op.kind, op.inputs, op.parallelism),
        # a try that waited out its server's or S3's outage is retried at once
        **outage_retry_policy(),
    }


def _wait_for_acks(task: PlannedTask, r: _Render) -> dict[str, Any]:
    mode = r.deployment.sensor_mode
    return {
        "pipeline": r.plan.pipeline,
        "aws_conn_id": r.deployment.storage_conn_id,
        "deferrable": mode is SensorMode.DEFERRABLE,
        "mode": "reschedule" if mode is SensorMode.RESCHEDULE else "poke",
        "poll_interval": r.deployment.poll_interval,
        "timeout": task.settings.timeout,
    }


def _audit(task: PlannedTask, r: _Render) -> dict[str, Any]:
    d = r.deployment
    # No `spark_remote`: it may carry a token, and a task's arguments are stored with the
    # serialized DAG; the task reads it from its settings (or connection) when it runs.
    return {
        **r.storage,
        "spark_master": d.settings.spark_master,
        "spark_conf": d.spark_conf,
        "spark_mode": d.spark_mode,
        "spark_conn_id": d.spark_conn_id,
    }


def _finalize(task: PlannedTask, r: _Render) -> dict[str, Any]:
    pipeline = r.plan.pipeline
    return {**r.storage, "outlets": [batchpoint_asset(pipeline), sinks_alias(pipeline)]}


def _export(task: PlannedTask, r: _Render) -> dict[str, Any]:
    # `or ''`: an empty field of the form is null, which a template would render "None".
    return {
        **r.storage,
        "target": "{{ params.target or '' }}",
        "description": "{{ params.description or '' }}",
    }


def _stop(task: PlannedTask, r: _Render) -> dict[str, Any]:
    return {
        "dag_to_pause": dag_ids(r.plan.pipeline)["checkpoint"],
        "api_conn_id": r.deployment.api_conn_id,
    }


def _cleanup(task: PlannedTask, r: _Render) -> dict[str, Any]:
    operators = r.plan.of_kind(TaskKind.OPERATOR)
    return {
        **r.storage,
        "outlets": [cleanup_alias(r.plan.pipeline)],
        "operator_tasks": {str(t.id): t.operator for t in operators},
        "finalize_task_id": r.task_id(TaskKind.FINALIZE),
        "checkpoint_type": (
            CheckpointType.SAVEPOINT
            if r.plan.of_kind(TaskKind.TRIGGER_SAVEPOINT)
            else CheckpointType.CHECKPOINT
        ).value,
    }


_ARGUMENTS: Mapping[TaskKind, Callable[[PlannedTask, _Render], dict[str, Any]]] = {
    TaskKind.TRIGGER_CHECKPOINT: _trigger,
    TaskKind.TRIGGER_SAVEPOINT: _trigger_savepoint,
    TaskKind.OPERATOR: _operator,
    TaskKind.WAIT_FOR_ACKS: _wait_for_acks,
    TaskKind.AUDIT: _audit,
    TaskKind.FINALIZE: _finalize,
    TaskKind.EXPORT_SAVEPOINT: _export,
    TaskKind.STOP_PIPELINE: _stop,
    TaskKind.CLEANUP: _cleanup,
}


def render_epoch(
    dag: DAG, plan: EpochPlan, spec: PipelineSpec, ref: str, deployment: AirflowDeployment
) -> dict[EpochTaskId, BaseOperator]:
    """Every task of `plan` in `dag` (a task with a group in that TaskGroup), its edges
    as dependencies; the tasks by plan id."""
    r = _Render(plan, spec, ref, deployment)
    groups: dict[str, TaskGroup] = {}
    tasks: dict[EpochTaskId, BaseOperator] = {}
    for task in plan.tasks:
        where: dict[str, Any] = {}
        if task.id.group is not None:
            if task.id.group not in groups:
                tooltip = GROUP_TOOLTIPS.get(task.id.group, "")
                groups[task.id.group] = TaskGroup(task.id.group, tooltip=tooltip, dag=dag)
            where["task_group"] = groups[task.id.group]
        arguments = {"doc_md": TASK_DOCS.get(task.kind), **_ARGUMENTS[task.kind](task, r)}
        if arguments["doc_md"] is None:
            del arguments["doc_md"]
        if issubclass(OPERATOR_CLASSES[task.kind], BatchpointTaskMixin):
            arguments["trigger_task_id"] = r.task_id(*TRIGGER_KINDS)  # whose XCom it reads
        tasks[task.id] = OPERATOR_CLASSES[task.kind](
            task_id=task.id.name, dag=dag, **where, **arguments, **_settings(task)
        )
    for upstream, downstream in plan.edges:
        tasks[upstream] >> tasks[downstream]
    return tasks
