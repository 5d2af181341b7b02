"""The EpochPlan as a value: every task of a checkpoint, an audited checkpoint and a
savepoint with its export and stop, the edges between them, the settings the renderers
need, and the plans that cannot be. Pure: no storage, no Spark, no Airflow."""

from __future__ import annotations

import pytest

from batchpoint.errors import ConfigError
from batchpoint.ops.epoch_plan import (
    EpochSettings,
    RunsWhen,
    TaskKind,
    TaskSettings,
    plan_epoch,
)
from batchpoint.protocol.checkpoint import CheckpointType
from demo.payments import build_pipeline

SPEC = build_pipeline().spec()  # dedup -> balances -> {balances_table, alerts}
SETTINGS = EpochSettings(timeout=600, task_retries=2, retry_delay=30, cleanup_grace=120)
OPERATORS = [
    "operators.dedup",
    "operators.balances",
    "operators.balances_table",
    "operators.alerts",
]
OPERATOR_EDGES = {
    ("trigger", "operators.dedup"),
    ("operators.dedup", "operators.balances"),
    ("operators.balances", "operators.balances_table"),
    ("operators.balances", "operators.alerts"),
}


def ids(plan) -> list[str]:
    return [str(i) for i in plan.ids]


def edges(plan) -> set[tuple[str, str]]:
    return {(str(a), str(b)) for a, b in plan.edges}


def into_cleanup(*tasks: str) -> set[tuple[str, str]]:
    return {(t, "cleanup") for t in tasks}


def test_a_checkpoint_is_trigger_operators_wait_finalize_cleanup():
    plan = plan_epoch(SPEC, SETTINGS)
    assert (plan.pipeline, plan.checkpoint_type, plan.audited) == (
        "payments",
        CheckpointType.CHECKPOINT,
        False,
    )
    assert ids(plan) == ["trigger", *OPERATORS, "wait_for_acks", "finalize", "cleanup"]
    assert [t.kind for t in plan.tasks] == [
        TaskKind.TRIGGER_CHECKPOINT,
        *[TaskKind.OPERATOR] * 4,
        TaskKind.WAIT_FOR_ACKS,
        TaskKind.FINALIZE,
        TaskKind.CLEANUP,
    ]
    assert edges(plan) == OPERATOR_EDGES | {
        ("trigger", "wait_for_acks"),  # beside the operators, not after them
        ("wait_for_acks", "finalize"),
    } | into_cleanup("trigger", *OPERATORS, "wait_for_acks", "finalize")
    assert plan.operators == ("dedup", "balances", "balances_table", "alerts")


def test_the_plan_carries_what_the_renderers_need():
    plan = plan_epoch(SPEC, SETTINGS)
    by_id = {str(t.id): t for t in plan.tasks}
    job = by_id["operators.balances"]
    assert (job.operator, job.settings) == ("balances", TaskSettings(2, 30, 600))
    assert by_id["wait_for_acks"].settings == TaskSettings(timeout=600 + 120)
    assert by_id["finalize"].settings == TaskSettings(retries=2, retry_delay=5)
    # retried as jobs are (a retry finds the run's checkpoint), with no timeout of its own
    assert by_id["trigger"].settings == TaskSettings(2, 30)
    assert [str(t.id) for t in plan.tasks if t.runs_when is RunsWhen.UPSTREAM_DONE] == ["cleanup"]
    # every task comes after its upstream: one process can run them in this order
    seen: set = set()
    for task in plan.tasks:
        assert set(task.upstream) <= seen, task.id
        seen.add(task.id)


def test_an_audited_checkpoint_puts_the_audit_between_wait_and_finalize():
    plan = plan_epoch(SPEC, SETTINGS, audit=True)
    assert plan.audited
    assert ids(plan) == ["trigger", *OPERATORS, "wait_for_acks", "audit", "finalize", "cleanup"]
    assert edges(plan) == OPERATOR_EDGES | {
        ("trigger", "wait_for_acks"),
        ("wait_for_acks", "audit"),
        ("audit", "finalize"),
    } | into_cleanup("trigger", *OPERATORS, "wait_for_acks", "audit", "finalize")
    audit = plan.of_kind(TaskKind.AUDIT)[0]
    assert audit.settings == TaskSettings(2, 30, 600)  # a Spark job, as the operators


def test_a_savepoint_is_exported_then_stops_the_pipeline_after_its_outcome():
    plan = plan_epoch(SPEC, SETTINGS, CheckpointType.SAVEPOINT, export=True, stop=True)
    assert plan.checkpoint_type is CheckpointType.SAVEPOINT and not plan.audited
    assert plan.tasks[0].kind is TaskKind.TRIGGER_SAVEPOINT
    assert ids(plan) == [
        "trigger",
        *OPERATORS,
        "wait_for_acks",
        "finalize",
        "export_savepoint",
        "stop_pipeline",
        "cleanup",
    ]
    # the cleanup settles the checkpoint: it waits for its outcome, not for the export
    assert edges(plan) == OPERATOR_EDGES | {
        ("trigger", "wait_for_acks"),
        ("wait_for_acks", "finalize"),
        ("finalize", "export_savepoint"),
        ("export_savepoint", "stop_pipeline"),
    } | into_cleanup("trigger", *OPERATORS, "wait_for_acks", "finalize")


def test_a_savepoint_without_export_is_a_checkpoint_with_another_trigger():
    plain = plan_epoch(SPEC, SETTINGS)
    savepoint = plan_epoch(SPEC, SETTINGS, CheckpointType.SAVEPOINT)
    assert edges(savepoint) == edges(plain) and ids(savepoint) == ids(plain)
    assert savepoint.tasks[0].kind is TaskKind.TRIGGER_SAVEPOINT


def test_an_operator_reading_two_operators_waits_for_both():
    from batchpoint.runtime.api import Pipeline

    pipeline = Pipeline("diamond")
    pipeline.source("events", root="src", schema="k string")
    for name, inputs in (("a", ["events"]), ("b", ["events"]), ("c", ["a", "b"])):
        pipeline.operator(name, inputs=inputs, key=["k"])(lambda ctx, df: df)
    plan = plan_epoch(pipeline.spec(), SETTINGS)
    by_id = {str(t.id): t for t in plan.tasks}
    assert [str(u) for u in by_id["operators.a"].upstream] == ["trigger"]
    assert sorted(map(str, by_id["operators.c"].upstream)) == ["operators.a", "operators.b"]


@pytest.mark.parametrize(
    ("kind", "options", "message"),
    [
        (CheckpointType.SAVEPOINT, {"audit": True}, "not audited"),
        (CheckpointType.CHECKPOINT, {"export": True}, "only a savepoint"),
        (CheckpointType.CHECKPOINT, {"stop": True}, "only a savepoint"),
        (CheckpointType.SAVEPOINT, {"stop": True}, "after the export"),
    ],
)
def test_plans_that_cannot_be_are_refused(kind, options, message):
    with pytest.raises(ConfigError, match=message):
        plan_epoch(SPEC, SETTINGS, kind, **options)
