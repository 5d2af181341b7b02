"""A real deployment end to end: api-server + scheduler (LocalExecutor) + triggerer.
The savepoint DAG is triggered through the REST API with the conf the UI's trigger form
sends; its ack sensor defers to the real triggerer, and `stop_pipeline` pauses the
checkpoint DAG through the REST API with the `batchpoint_airflow_api` connection. Operator
jobs use the fake spark-submit: this test is about Airflow, test_end_to_end.py about Spark."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from batchpoint.protocol.checkpoint import CheckpointStatus, CheckpointType
from batchpoint.protocol.savepoints import SavepointLocation, read_savepoint
from support.airflow_stack import AirflowStack

DAGS = Path(__file__).resolve().parents[2] / "dags"

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.s3]


#: A user's DAG scheduled on the pipeline's Asset: it runs after each completed checkpoint
#: or savepoint and returns what the triggering events said.
DOWNSTREAM = """
from airflow.sdk import DAG, task

from batchpoint.airflow.assets import batchpoint_asset

with DAG("after_payments", schedule=[batchpoint_asset("payments")]):

    @task
    def report(triggering_asset_events=None):
        return [dict(e.extra) for events in triggering_asset_events.values() for e in events]

    report()
"""


def dags_with_downstream(folder: Path) -> Path:
    """The project's DAG file and the downstream DAG, in a folder of this test's own."""
    folder.mkdir()
    (folder / "batchpoint_dags.py").symlink_to(DAGS / "batchpoint_dags.py")
    (folder / "after_payments.py").write_text(DOWNSTREAM)
    return folder


def test_savepoint_with_stop_through_the_rest_api(bp, write_epoch, airflow_home, tmp_path):
    write_epoch(0)
    # Deferrable sensor (the real triggerer); a checkpoint DAG without a schedule, so
    # unpausing it starts no run and the only thing that happens to it is the pause.
    bp.set(ack_sensor_mode="deferrable", ack_poll_interval=1, checkpoint_interval="none")
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags_with_downstream(tmp_path / "dags"))}
    stack = AirflowStack(tmp_path / "airflow", Path(airflow_home) / "airflow.db", env)
    serialized = stack.airflow("dags", "reserialize")
    assert serialized.returncode == 0, serialized.stderr[-2000:]

    with stack:
        stack.start()
        stack.wait_healthy()
        for dag_id in ("payments_savepoint", "payments_checkpoint", "after_payments"):
            stack.api(
                "PATCH",
                f"/dags/{dag_id}",
                params={"update_mask": "is_paused"},
                json={"is_paused": False},
            )
        assert stack.api("GET", "/dags/payments_checkpoint")["is_paused"] is False

        run = stack.api(
            "POST",
            "/dags/payments_savepoint/dagRuns",
            json={
                "logical_date": None,
                "conf": {"target": "", "stop_pipeline": True, "description": "from the form"},
            },
        )
        state = stack.wait_for_run("payments_savepoint", run["dag_run_id"])
        states = stack.task_states("payments_savepoint", run["dag_run_id"])
        assert state == "success", (states, stack.tail("scheduler"), stack.tail("triggerer"))
        assert states["stop_pipeline"] == "success"
        assert states["wait_for_acks"] == "success"
        assert stack.api("GET", "/dags/payments_checkpoint")["is_paused"] is True

        # the savepoint updated the pipeline's Asset: the scheduler ran the DAG on it
        downstream = stack.wait_for_runs("after_payments", 1)
        assert [r["state"] for r in downstream] == ["success"], stack.tail("scheduler")
        assert downstream[0]["run_type"] == "asset_triggered"
        extras = stack.api(
            "GET",
            f"/dags/after_payments/dagRuns/{downstream[0]['dag_run_id']}"
            "/taskInstances/report/xcomEntries/return_value",
        )["value"]
        assert extras == [{"pipeline": "payments", "checkpoint_id": 1, "type": "savepoint"}]

        # the sensor really deferred: the triggerer ran the trigger and logged its event
        logs = tmp_path / "airflow" / "logs" / "dag_id=payments_savepoint"
        (trigger_log,) = logs.glob("run_id=*/task_id=wait_for_acks/attempt=1.log.trigger.*.log")
        assert "checkpoint 1: every task acknowledged" in trigger_log.read_text()

    c = bp.driver().coordinator
    outcome = c.get_outcome(1)
    assert outcome.status is CheckpointStatus.COMPLETED
    assert outcome.pending.type is CheckpointType.SAVEPOINT
    (folder,) = c.store.list_dirs("savepoints/payments/")
    assert read_savepoint(SavepointLocation(c.store, folder)).description == "from the form"
