"""The checkpoint and savepoint DAGs are renderings of their EpochPlan: exactly the
plan's tasks (one Airflow operator class per task kind) and exactly its edges, with its
trigger rules and retry settings, for a checkpoint, an audited checkpoint and a
savepoint; and a plan of another shape renders as that shape."""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.sdk import DAG

from batchpoint.airflow.config import AirflowDeployment
from batchpoint.airflow.dag_factory import (
    build_checkpoint_dag,
    build_savepoint_dag,
    checkpoint_plan,
    savepoint_plan,
)
from batchpoint.airflow.epoch_dag import (
    OPERATOR_CLASSES,
    TRIGGER_KINDS,
    epoch_settings,
    render_epoch,
)
from batchpoint.airflow.mixins import BatchpointTaskMixin
from batchpoint.airflow.operators import CheckpointCleanupOperator
from batchpoint.airflow.outages import RETRY_AT_ONCE, OutageEnded, outage_retry_policy
from batchpoint.ops.epoch_plan import RunsWhen, TaskKind, plan_epoch
from batchpoint.runtime.api import Pipeline
from demo.payments import build_pipeline

pytestmark = pytest.mark.airflow

REF = "demo.payments:pipeline"


def deployment(**values: str) -> AirflowDeployment:
    return AirflowDeployment.from_env(
        {
            "BATCHPOINT_ROOT": "file:///tmp/bp-epoch-dag",
            "BATCHPOINT_SPARK_REMOTE": "sc://spark-connect:15002",
            "BATCHPOINT_TASK_RETRIES": "3",
            **values,
        }
    )


def assert_renders(dag: DAG, plan) -> None:
    assert set(dag.task_ids) == {str(i) for i in plan.ids}
    rendered = {(up, t.task_id) for t in dag.tasks for up in t.upstream_task_ids}
    assert rendered == {(str(a), str(b)) for a, b in plan.edges}
    for task in plan.tasks:
        airflow_task = dag.get_task(str(task.id))
        assert type(airflow_task) is OPERATOR_CLASSES[task.kind], task.id
        rule = "all_done" if task.runs_when is RunsWhen.UPSTREAM_DONE else "all_success"
        assert airflow_task.trigger_rule == rule, task.id
        if task.settings.retries is not None:
            assert airflow_task.retries == task.settings.retries, task.id
            assert airflow_task.retry_delay == timedelta(seconds=task.settings.retry_delay)
        if task.settings.timeout is not None and task.kind is not TaskKind.WAIT_FOR_ACKS:
            assert airflow_task.execution_timeout == timedelta(seconds=task.settings.timeout)
        # an operator or trigger task whose outage ended is retried at once (where
        # Airflow can)
        policy = getattr(airflow_task, "retry_policy", None)
        waits_out_outages = (
            TaskKind.OPERATOR,
            TaskKind.TRIGGER_CHECKPOINT,
            TaskKind.TRIGGER_SAVEPOINT,
        )
        if task.kind in waits_out_outages and outage_retry_policy():
            decision = policy.evaluate(OutageEnded("back"), 1, 3)
            assert decision.retry_delay == RETRY_AT_ONCE, task.id
        else:
            assert policy is None, task.id
    assert_names_come_from(dag, plan)


def assert_names_come_from(dag: DAG, plan) -> None:
    """The task ids a task reads other tasks by are the plan's: the trigger's (whose XCom
    has the checkpoint id), and the cleanup's finalize and operator tasks."""
    (trigger,) = [t for t in plan.tasks if t.kind in TRIGGER_KINDS]
    readers = [t for t in dag.tasks if isinstance(t, BatchpointTaskMixin)]
    assert readers and all(t.trigger_task_id == str(trigger.id) for t in readers)
    cleanup = dag.get_task(str(plan.of_kind(TaskKind.CLEANUP)[0].id))
    operators = plan.of_kind(TaskKind.OPERATOR)
    assert cleanup.operator_tasks == {str(t.id): t.operator for t in operators}
    assert cleanup.finalize_task_id == str(plan.of_kind(TaskKind.FINALIZE)[0].id)
    assert [cleanup.operator_of(str(t.id)) for t in operators] == list(plan.operators)
    assert cleanup.operator_of(str(trigger.id)) is None


@pytest.mark.parametrize(
    ("name", "env", "build", "plan_of"),
    [
        (
            "checkpoint",
            {},
            build_checkpoint_dag,
            lambda p, d: checkpoint_plan(p, d),
        ),
        (
            "audited checkpoint",
            {"BATCHPOINT_AUDIT": "true"},
            build_checkpoint_dag,
            lambda p, d: checkpoint_plan(p, d),
        ),
        (
            "savepoint",
            {},
            build_savepoint_dag,
            lambda p, d: savepoint_plan(d, p.spec()),
        ),
    ],
)
def test_each_epoch_dag_is_exactly_its_plan(name, env, build, plan_of):
    pipeline, settings = build_pipeline(), deployment(**env)
    plan = plan_of(pipeline, settings)
    assert_renders(build(pipeline, REF, settings), plan)
    kinds = {t.kind for t in plan.tasks}
    assert (TaskKind.AUDIT in kinds) is (name == "audited checkpoint")
    assert (TaskKind.EXPORT_SAVEPOINT in kinds) is (name == "savepoint")
    # the wait is the checkpoint's timeout and the run's grace, as the plan says
    wait = plan.of_kind(TaskKind.WAIT_FOR_ACKS)[0]
    sensor = build(pipeline, REF, settings).get_task("wait_for_acks")
    assert sensor.timeout == wait.settings.timeout


def test_every_task_kind_has_its_operator_class():
    assert set(OPERATOR_CLASSES) == set(TaskKind)


def test_a_plan_of_another_shape_renders_as_that_shape():
    pipeline = Pipeline("diamond")
    pipeline.source("events", root="src", schema="k string")
    for name, inputs in (("a", ["events"]), ("b", ["events"]), ("c", ["a", "b"])):
        pipeline.operator(name, inputs=inputs, key=["k"])(lambda ctx, df: df)
    settings = deployment()
    plan = plan_epoch(pipeline.spec(), epoch_settings(settings), audit=True)
    with DAG(dag_id="diamond_epoch", schedule=None) as dag:
        render_epoch(dag, plan, pipeline.spec(), "my.module:diamond", settings)
    assert_renders(dag, plan)
    assert dag.get_task("operators.c").upstream_task_ids == {"operators.a", "operators.b"}
    assert dag.get_task("operators.c").pipeline_ref == "my.module:diamond"


def test_a_cleanup_built_by_hand_takes_its_groups_tasks_for_operators():
    """Without the plan's operator tasks (a DAG written by hand), the tasks of its
    operator group are the operators, by their names."""
    cleanup = CheckpointCleanupOperator(task_id="cleanup", pipeline_ref=REF)
    assert cleanup.operator_of("operators.balances") == "balances"
    assert cleanup.operator_of("finalize") is None and cleanup.operator_of("operators.") is None
