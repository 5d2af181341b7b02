"""The restore DAG's check task runs the quality gate on the Spark endpoint of the
deployment's Spark connection (BATCHPOINT_SPARK_CONN_ID, the operator's `spark_conn_id`),
as the operator tasks do, with the BATCHPOINT_SPARK_* variables as the fallback. On a
real Spark Connect server: the restore DAG, run by dag.test() in a process of its own (no
classic Spark session there, as on a worker), gates with the payments suites on the
server its spark_connect connection names, while BATCHPOINT_SPARK_REMOTE names a port
where nothing listens."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from batchpoint.airflow.spark_connection import gate_spark_settings
from batchpoint.settings import Settings, SparkMode

pytestmark = pytest.mark.airflow

PROJECT = Path(__file__).resolve().parents[2]
DEAD_REMOTE = "sc://127.0.0.1:1"
RUN_RESTORE_DAG = """\
import json, sys
from batchpoint.airflow.dag_factory import load_dags

run = load_dags()["payments_restore"].test(run_conf=json.loads(sys.argv[1]))
states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
print(json.dumps({"state": str(run.state), "states": states}))
"""


def spark_connect(host: str, port: int) -> str:
    return json.dumps({"conn_type": "spark_connect", "host": host, "port": port})


@pytest.fixture
def deployment_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in [n for n in os.environ if n.startswith("BATCHPOINT_")]:
        monkeypatch.delenv(name)
    for name in ("AIRFLOW_CONN_SPARK_CONNECT_DEFAULT", "AIRFLOW_CONN_SPARK_DEFAULT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BATCHPOINT_ROOT", (tmp_path / "root").as_uri())
    monkeypatch.setenv("BATCHPOINT_SPARK_REMOTE", DEAD_REMOTE)
    return monkeypatch


def test_the_gates_endpoint_is_the_connections_and_the_variable_its_fallback(deployment_env):
    settings = Settings.from_env()
    # No connection: the variable, in the deployment's default mode (connect).
    found = gate_spark_settings(settings, None)
    assert (found.spark_mode, found.spark_remote) == (SparkMode.CONNECT, DEAD_REMOTE)
    # The provider's default connection of the mode...
    deployment_env.setenv("AIRFLOW_CONN_SPARK_CONNECT_DEFAULT", spark_connect("default", 15002))
    assert gate_spark_settings(settings, None).spark_remote == "sc://default:15002/"
    # ...the deployment's setting over it, the operator's argument over both.
    deployment_env.setenv("AIRFLOW_CONN_BP_SPARK", spark_connect("configured", 15003))
    deployment_env.setenv("BATCHPOINT_SPARK_CONN_ID", "bp_spark")
    assert gate_spark_settings(settings, None).spark_remote == "sc://configured:15003/"
    deployment_env.setenv("AIRFLOW_CONN_OTHER", spark_connect("given", 15004))
    assert gate_spark_settings(settings, "other").spark_remote == "sc://given:15004/"
    # Submit mode: the master of a `spark` connection.
    deployment_env.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "yarn"})
    )
    submit = Settings.from_env({**os.environ, "BATCHPOINT_SPARK_MODE": "submit"})
    assert gate_spark_settings(submit, "spark_default").spark_master == "yarn"


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_restore_dag_gates_on_the_server_of_the_connection(
    airflow_home: Path, good_epochs: Path, connect_server: Any, tmp_path: Path
) -> None:
    from support.connect_env import client_env

    store = tmp_path / "store"
    shutil.copytree(good_epochs, store)
    env = client_env(PROJECT / "include")
    env.update(
        {
            "BATCHPOINT_ROOT": store.as_uri(),
            "BATCHPOINT_PIPELINE_REF": "demo.payments:pipeline",
            "BATCHPOINT_QUALITY_GATE": "demo.payments_quality:restore_gate",
            "BATCHPOINT_CHECKPOINT_INTERVAL": "none",
            "BATCHPOINT_SPARK_MODE": "connect",
            # The fallback names a port where nothing listens: a gate that used it
            # would fail unreachable.
            "BATCHPOINT_SPARK_REMOTE": DEAD_REMOTE,
            "BATCHPOINT_SPARK_CONN_ID": "bp_spark",
            "AIRFLOW_CONN_BP_SPARK": spark_connect(connect_server.host, connect_server.port),
        }
    )
    script = tmp_path / "run_restore_dag.py"  # a file: see tests/packaging/test_wheel.py
    script.write_text(RUN_RESTORE_DAG)
    # The samples, which read the source, are skipped: the suites run on the state.
    conf = {"source": "latest", "dry_run": True, "max_candidates": 1}
    conf["skip_suites"] = ["balance-recompute", "seen-recompute"]
    done = subprocess.run(
        [sys.executable, str(script), json.dumps(conf)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-5000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["states"] == {"check": "success", "restore": "skipped"}, log[-5000:]
    assert "Spark Connect session" in log and connect_server.url in log
    assert "balances/balances" in log and ": passed" in log
