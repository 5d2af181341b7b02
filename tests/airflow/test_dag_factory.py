"""The factory's rendering choices, without running anything: schedules, sensor modes,
the quality-gate hook, and several pipelines in one deployment."""

from __future__ import annotations

import json

import pytest
from airflow.serialization.serialized_objects import DagSerialization

from batchpoint.airflow.config import AirflowDeployment
from batchpoint.airflow.dag_factory import build_pipeline_dags, load_dags
from batchpoint.errors import ConfigError
from batchpoint.runtime.restore import GateResult
from batchpoint.settings import SparkMode
from demo.payments import build_pipeline

pytestmark = pytest.mark.airflow

REF = "demo.payments:pipeline"
REMOTE = "sc://spark-connect:15002"


def deployment(**values: str) -> AirflowDeployment:
    return AirflowDeployment.from_env(
        {
            "BATCHPOINT_ROOT": "file:///tmp/bp-factory",
            "BATCHPOINT_SPARK_REMOTE": REMOTE,
            **values,
        }
    )


@pytest.mark.parametrize(
    ("interval", "timetable"),
    [
        ("90s", "DeltaTriggerTimetable"),
        ("*/10 * * * *", "CronTriggerTimetable"),
        ("none", "NullTimetable"),
    ],
)
def test_the_interval_becomes_the_timetable(interval, timetable):
    dags = build_pipeline_dags(
        build_pipeline(), REF, deployment(BATCHPOINT_CHECKPOINT_INTERVAL=interval)
    )
    assert type(dags["payments_checkpoint"].timetable).__name__ == timetable


@pytest.mark.parametrize(
    ("mode", "deferrable", "sensor_mode"),
    [("deferrable", True, "poke"), ("reschedule", False, "reschedule"), ("poke", False, "poke")],
)
def test_sensor_modes(mode, deferrable, sensor_mode):
    dags = build_pipeline_dags(build_pipeline(), REF, deployment(BATCHPOINT_ACK_SENSOR_MODE=mode))
    sensor = dags["payments_checkpoint"].get_task("wait_for_acks")
    assert (sensor.deferrable, sensor.mode) == (deferrable, sensor_mode)


def test_operator_tasks_get_retries_and_the_checkpoint_timeout():
    dags = build_pipeline_dags(
        build_pipeline(),
        REF,
        deployment(BATCHPOINT_TASK_RETRIES="2", BATCHPOINT_CHECKPOINT_TIMEOUT="120"),
    )
    job = dags["payments_savepoint"].get_task("operators.balances")
    assert job.retries == 2 and job.execution_timeout.total_seconds() == 120


def test_each_cleanup_looks_for_a_checkpoint_of_its_own_dags_type():
    """A run whose trigger returned nothing finds its checkpoint by run id: the savepoint
    DAG's cleanup took (and aborted) the checkpoint DAG's of the same run id."""
    dags = build_pipeline_dags(build_pipeline(), REF, deployment())
    kinds = {
        name: dag.get_task("cleanup").checkpoint_type
        for name, dag in dags.items()
        if "cleanup" in dag.task_ids
    }
    assert kinds == {"payments_checkpoint": "checkpoint", "payments_savepoint": "savepoint"}


def test_the_restore_gate_is_plumbed_to_the_check_task():
    def gate(candidate):
        return GateResult(True)

    dags = build_pipeline_dags(build_pipeline(), REF, deployment(), gate=gate)
    assert dags["payments_restore"].get_task("check").gate is gate
    dags = build_pipeline_dags(
        build_pipeline(), REF, deployment(BATCHPOINT_QUALITY_GATE="my.gates:payments")
    )
    check = dags["payments_restore"].get_task("check")
    assert check.gate is None and check.gate_ref == "my.gates:payments"  # loaded at run time


def test_the_audit_task_is_there_only_with_audit_on():
    off = build_pipeline_dags(build_pipeline(), REF, deployment())
    assert "audit" not in off["payments_checkpoint"].task_ids
    assert off["payments_checkpoint"].get_task("trigger").audit is False

    dags = build_pipeline_dags(
        build_pipeline(),
        REF,
        deployment(
            BATCHPOINT_AUDIT="true",
            BATCHPOINT_SPARK_MASTER="local[3]",
            BATCHPOINT_SPARK_SUBMIT_ARGS="--conf spark.sql.shuffle.partitions=2",
        ),
    )
    checkpoint = dags["payments_checkpoint"]
    audit = checkpoint.get_task("audit")
    assert audit.upstream_task_ids == {"wait_for_acks"}
    assert checkpoint.get_task("finalize").upstream_task_ids == {"audit"}
    assert "audit" in checkpoint.get_task("cleanup").upstream_task_ids
    assert checkpoint.get_task("trigger").audit is True
    # connect mode (the default): the audit is a client of the same server as the jobs,
    # found when it runs; the DAG does not carry the endpoint, which may hold a token (a
    # reviewer found it in the serialized DAG, which the scheduler stores)
    assert audit.spark_mode is SparkMode.CONNECT and audit.spark_remote is None
    with_token = build_pipeline_dags(
        build_pipeline(),
        REF,
        deployment(BATCHPOINT_AUDIT="true", BATCHPOINT_SPARK_REMOTE=f"{REMOTE}/;token=SECRET42"),
    )["payments_checkpoint"]
    assert "SECRET42" not in json.dumps(DagSerialization.to_dict(with_token))
    assert audit.spark_master == "local[3]"
    assert audit.spark_conf == {"spark.sql.shuffle.partitions": "2"}
    submit = build_pipeline_dags(
        build_pipeline(), REF, deployment(BATCHPOINT_AUDIT="true", BATCHPOINT_SPARK_MODE="submit")
    )
    assert submit["payments_checkpoint"].get_task("audit").spark_remote is None
    assert "quality gate" in checkpoint.doc_md
    # savepoints are not audited
    assert "audit" not in dags["payments_savepoint"].task_ids
    assert dags["payments_savepoint"].get_task("trigger").audit is False


@pytest.mark.parametrize(
    ("values", "row"),
    [
        ({}, "changelogs, up to 8 layers; states under 4 MiB written in full"),
        ({"BATCHPOINT_CHANGELOG_MIN_BYTES": "1536KiB"}, "states under 1536 KiB written in full"),
        ({"BATCHPOINT_CHANGELOG_MIN_BYTES": "1000"}, "states under 1000 bytes written in full"),
        ({"BATCHPOINT_CHANGELOG_MIN_BYTES": "0"}, "changelogs, up to 8 layers |"),
        ({"BATCHPOINT_CHANGELOG_CHAIN": "0"}, "off (every state written in full)"),
    ],
)
def test_the_checkpoint_dag_says_how_states_are_snapshotted(values, row):
    doc = build_pipeline_dags(build_pipeline(), REF, deployment(**values))["payments_checkpoint"]
    (line,) = [x for x in doc.doc_md.splitlines() if x.startswith("| incremental checkpoints |")]
    assert row in line, line


def test_a_pipeline_that_declares_audited_checkpoints_gets_the_audit_task():
    from batchpoint.quality.suites import declare_quality
    from demo.payments_quality import payments_quality

    pipeline = declare_quality(build_pipeline(), payments_quality(audit=True))
    dags = build_pipeline_dags(pipeline, REF, deployment())
    assert "audit" in dags["payments_checkpoint"].task_ids


def test_two_references_to_one_pipeline_name_are_refused():
    both = f"{REF},demo.payments:build_pipeline"
    with pytest.raises(
        ConfigError, match=r"BATCHPOINT_PIPELINE_REF: .* are both pipeline 'payments'"
    ):
        load_dags(deployment(BATCHPOINT_PIPELINE_REF=both))


def test_without_a_pipeline_reference_the_setting_is_named():
    # The library has no default pipeline: a deployment names its own.
    with pytest.raises(ConfigError, match=r"^BATCHPOINT_PIPELINE_REF is not set: name the"):
        load_dags(deployment())
