"""The CLI's Spark endpoint from an Airflow connection: `--spark-conn-id` (or
BATCHPOINT_SPARK_CONN_ID) names it, found as Airflow finds it outside a task (here a real
AIRFLOW_CONN_<ID> variable), read only by commands that run Spark; one missing, or of a
type that names no Spark endpoint, is one error line naming it. On a real Spark Connect
server, `batchpoint restore`'s quality gate runs its suites on the server the connection
names, while BATCHPOINT_SPARK_REMOTE (connect mode) names a port where nothing listens."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.cli import Cli

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "tok-5e1d-never-shown"


@pytest.fixture
def airflow_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    # Airflow reads its home when first imported (by this test, if no other did first).
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow-home"))
    for name in ("BATCHPOINT_SPARK_CONN_ID", "BATCHPOINT_SPARK_MODE", "BATCHPOINT_SPARK_REMOTE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def show_state(cli: Cli, *flags: str) -> Any:
    """`state show`, which runs Spark: its progress line is out before the endpoint is
    looked up."""
    return cli(*flags, "state", "show", "payments", "dedup", "seen")


def test_a_missing_connection_is_one_error_naming_it(payments, cli, airflow_env):
    airflow_env.delenv("AIRFLOW_CONN_BP_NOWHERE", raising=False)
    run = show_state(cli, "--spark-conn-id", "bp_nowhere")
    assert run.code == 2
    assert run.err == (
        "error: --spark-conn-id: Airflow connection 'bp_nowhere' not found (Airflow looked "
        "in AIRFLOW_CONN_BP_NOWHERE and its configured secrets backends)\n"
    )
    # Named by the setting instead, the error says so.
    airflow_env.setenv("BATCHPOINT_SPARK_CONN_ID", "bp_nowhere")
    run = show_state(cli, "--json")
    assert run.code == 2  # stderr has the progress line: under --json it goes there
    assert run.json["error"].startswith(
        "BATCHPOINT_SPARK_CONN_ID: Airflow connection 'bp_nowhere' not found"
    )


def test_a_connection_that_names_no_spark_endpoint_is_refused_without_its_secret(
    payments, cli, airflow_env
):
    airflow_env.setenv(
        "AIRFLOW_CONN_BP_S3", json.dumps({"conn_type": "aws", "login": "k", "password": TOKEN})
    )
    run = show_state(cli, "--spark-conn-id", "bp_s3")
    assert run.code == 2
    assert run.err == (
        "error: --spark-conn-id: Airflow connection 'bp_s3' is of type 'aws': the Spark "
        "endpoint is a 'spark_connect' or 'spark' connection (the apache-spark provider's)\n"
    )
    # A spark_connect connection under BATCHPOINT_SPARK_MODE=submit is the wrong kind too.
    airflow_env.setenv("BATCHPOINT_SPARK_MODE", "submit")
    airflow_env.setenv(
        "AIRFLOW_CONN_BP_SPARK",
        json.dumps({"conn_type": "spark_connect", "host": "h", "port": 1, "password": TOKEN}),
    )
    run = show_state(cli, "--spark-conn-id", "bp_spark")
    assert run.code == 2 and TOKEN not in run.err
    assert "is of type 'spark_connect': submit mode needs a 'spark' connection" in run.err


def test_commands_without_spark_never_look_the_connection_up(payments, cli, airflow_env):
    airflow_env.setenv("BATCHPOINT_SPARK_CONN_ID", "bp_nowhere")
    run = cli("--spark-conn-id", "bp_nowhere", "checkpoints", "list", "--json")
    assert run.code == 0, run.err
    assert [c["checkpoint_id"] for c in run.json["checkpoints"]] == [1, 2, 3]


def test_a_bad_connection_id_is_reported_as_the_flag(cli, root):
    argv = ("--spark-conn-id", "no spaces", "checkpoints", "list")
    run = cli(*argv)
    assert run.code == 2
    assert run.refusal(argv).startswith(
        "error: argument --spark-conn-id: a connection id is letters, digits"
    )


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_restore_gate_runs_on_the_server_of_the_connection(
    good_epochs: Path, connect_server: Any, tmp_path: Path
) -> None:
    from support.connect_env import client_env

    store = tmp_path / "store"
    shutil.copytree(good_epochs, store)
    env = client_env(ROOT / "include")
    env.update(
        {
            "AIRFLOW_HOME": str(tmp_path / "airflow-home"),
            "BATCHPOINT_ROOT": store.as_uri(),
            "BATCHPOINT_QUALITY_GATE": "demo.payments_quality:restore_gate",
            # The variables, the fallback, name a port where nothing listens: a gate
            # that used them would fail unreachable.
            "BATCHPOINT_SPARK_MODE": "connect",
            "BATCHPOINT_SPARK_REMOTE": "sc://127.0.0.1:1",
            "AIRFLOW_CONN_BP_SPARK": json.dumps(
                {
                    "conn_type": "spark_connect",
                    "host": connect_server.host,
                    "port": connect_server.port,
                }
            ),
        }
    )
    argv = [sys.executable, "-m", "batchpoint", "--pipeline-ref"]
    argv += ["demo.payments:pipeline", "--spark-conn-id", "bp_spark"]
    # The samples, which read the source, are skipped: the suites run on the state.
    argv += ["restore", "--dry-run", "--skip-suite", "balance-recompute"]
    argv += ["--skip-suite", "seen-recompute", "--max-candidates", "1"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "quality gate demo.payments_quality:restore_gate" in done.stderr
    # The suites ran (on the connection's server: the variables' is not there).
    assert "40 rows" in done.stderr and "checkpoint 2: passed" in done.stderr, done.stderr
    assert ": passed" in done.stdout and "balances/balances" in done.stdout, done.stdout
