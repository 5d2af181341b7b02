"""Connect mode's configuration mistakes fail the operator task without a retry
(AirflowFailException, as operators/base.py says of every configuration mistake), in one
line naming the connection id that was looked up: a retry of a typo only fails again,
later. Real Airflow connections (AIRFLOW_CONN_*), the real operator task and launcher;
no Spark and no server is reached (each mistake is found before any client starts)."""

from __future__ import annotations

import json
import types
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from batchpoint.airflow.compat import AirflowFailException
from batchpoint.airflow.config import AirflowDeployment
from batchpoint.airflow.connect_launcher import ConnectLauncher
from batchpoint.airflow.operators.checkpoint import SparkOperatorJob
from batchpoint.settings import Settings

pytestmark = pytest.mark.airflow

TOKEN = "tok-7d1c-never-shown"
FALLBACK_REMOTE = "sc://fallback-server:15002"


@pytest.fixture
def connect_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """Connect mode naming connection `bp_spark_typo`, which does not exist, and no
    BATCHPOINT_SPARK_REMOTE to fall back on."""
    monkeypatch.setenv("BATCHPOINT_ROOT", (tmp_path / "root").as_uri())
    monkeypatch.setenv("BATCHPOINT_SPARK_MODE", "connect")
    monkeypatch.setenv("BATCHPOINT_SPARK_CONN_ID", "bp_spark_typo")
    for name in (
        "BATCHPOINT_SPARK_REMOTE",
        "BATCHPOINT_SPARK_CONF",
        "AIRFLOW_CONN_BP_SPARK_TYPO",
        "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT",
    ):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def operator_task() -> SparkOperatorJob:
    return SparkOperatorJob(
        task_id="dedup",
        pipeline_ref="demo.payments:pipeline",
        operator="dedup",
        deployment=AirflowDeployment.from_env(),
    )


def context() -> dict[str, Any]:
    """What execute reads of its context: the try, and the trigger's XCom."""
    ti = types.SimpleNamespace(
        try_number=1, map_index=-1, xcom_pull=lambda task_ids: {"checkpoint_id": 1}
    )
    return {"ti": ti, "run_id": "manual__1"}


def test_a_connection_id_that_does_not_exist_fails_the_task_naming_it(connect_env) -> None:
    with pytest.raises(AirflowFailException) as failed:
        operator_task().execute(context())  # type: ignore[arg-type]
    message = str(failed.value)
    assert "'bp_spark_typo' not found" in message and "BATCHPOINT_SPARK_REMOTE" in message
    assert "\n" not in message


def test_with_the_variable_set_a_missing_connection_still_falls_back(connect_env) -> None:
    connect_env.setenv("BATCHPOINT_SPARK_REMOTE", FALLBACK_REMOTE)
    assert operator_task().spark_settings().spark_remote == FALLBACK_REMOTE


def test_a_config_error_at_launch_fails_the_task_without_a_retry(connect_env) -> None:
    """The connection exists when the task reads its settings; the fault: the launcher
    then finds no server (as if the connection had been deleted meanwhile), and its real
    ConfigError reaches execute, which must not leave it to Airflow's retries."""
    connection = {"conn_type": "spark_connect", "host": "127.0.0.1", "port": 1, "password": TOKEN}
    connect_env.setenv("AIRFLOW_CONN_BP_SPARK_TYPO", json.dumps(connection))
    real = ConnectLauncher.remote_of

    def deleted_meanwhile(self: ConnectLauncher, settings: Settings) -> str:
        return real(self, replace(settings, spark_remote=None))

    connect_env.setattr(ConnectLauncher, "remote_of", deleted_meanwhile)
    with pytest.raises(AirflowFailException) as failed:
        operator_task().execute(context())  # type: ignore[arg-type]
    message = str(failed.value)
    assert "no Spark Connect server" in message and "'bp_spark_typo'" in message
    assert TOKEN not in message
