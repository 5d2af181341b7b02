"""The Spark endpoint from an Airflow connection of the apache-spark provider's types
(`spark_connect` in connect mode, `spark` in submit mode), given as a real Airflow
connection in an AIRFLOW_CONN_* variable (JSON and URI forms), with the BATCHPOINT_SPARK_*
variables as the fallback; the connection's token never shows in a repr, an error or
the job's command line. No Spark here: the Connect run is in test_end_to_end.py."""

from __future__ import annotations

import json

import pytest
from airflow.sdk.exceptions import AirflowFailException

from batchpoint.airflow.config import AirflowDeployment
from batchpoint.airflow.connect_launcher import ConnectLauncher
from batchpoint.airflow.operators.checkpoint import SparkOperatorJob
from batchpoint.errors import ConfigError
from batchpoint.spark.connect import unreachable_error

pytestmark = pytest.mark.airflow

TOKEN = "tok-3f9a7c1e-never-shown"
FALLBACK_REMOTE = "sc://fallback-server:15002"


@pytest.fixture
def deployment_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> pytest.MonkeyPatch:
    """A connect-mode deployment whose BATCHPOINT_SPARK_REMOTE is the fallback."""
    for name in ("AIRFLOW_CONN_SPARK_CONNECT_DEFAULT", "AIRFLOW_CONN_SPARK_DEFAULT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BATCHPOINT_ROOT", f"file://{tmp_path}/root")
    monkeypatch.setenv("BATCHPOINT_SPARK_MODE", "connect")
    monkeypatch.setenv("BATCHPOINT_SPARK_REMOTE", FALLBACK_REMOTE)
    for name in ("BATCHPOINT_SPARK_CONN_ID", "BATCHPOINT_SPARK_CONF"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def operator_task(**kwargs) -> SparkOperatorJob:
    return SparkOperatorJob(
        task_id="dedup",
        pipeline_ref="demo.payments:pipeline",
        operator="dedup",
        deployment=AirflowDeployment.from_env(),
        **kwargs,
    )


def spark_connect_json(**fields) -> str:
    return json.dumps({"conn_type": "spark_connect", **fields})


def test_the_connect_endpoint_comes_from_the_spark_connect_connection(deployment_env):
    deployment_env.setenv(
        "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT",
        spark_connect_json(
            host="spark-connect.internal",
            port=15003,
            login="alice",
            password=TOKEN,
            extra={"use_ssl": True},
        ),
    )
    settings = operator_task().spark_settings()
    # As the provider's SparkConnectHook.get_connection_url builds it.
    assert settings.spark_remote == (
        f"sc://spark-connect.internal:15003/;user_id=alice;token={TOKEN};use_ssl=true"
    )
    assert TOKEN not in repr(settings)
    assert "token=**********" in repr(settings)
    # The job's command line (ps, the task log) carries no token: the child reads the
    # server from its environment.
    launcher = ConnectLauncher(AirflowDeployment.from_env(), "demo.payments:pipeline")
    argv = launcher.command(settings, 1, "dedup", "a1")
    assert "--connect" in argv and not any(TOKEN in arg for arg in argv)
    assert launcher.environment(settings)["BATCHPOINT_SPARK_REMOTE"] == settings.spark_remote
    # An unreachable server's one line names the server, not its token.
    assert TOKEN not in str(unreachable_error(settings.spark_remote, OSError("refused")))


def test_a_connection_in_uri_form_named_by_the_setting(deployment_env):
    deployment_env.setenv("BATCHPOINT_SPARK_CONN_ID", "bp_spark")
    deployment_env.setenv(
        "AIRFLOW_CONN_BP_SPARK", f"spark-connect://bob:{TOKEN}@10.1.2.3:15009?use_ssl=false"
    )
    settings = operator_task().spark_settings()
    assert settings.spark_remote == f"sc://10.1.2.3:15009/;user_id=bob;token={TOKEN};use_ssl=false"
    # The operator's own argument wins over the setting.
    deployment_env.setenv("AIRFLOW_CONN_OTHER_SPARK", "spark-connect://other-host:15010")
    assert operator_task(spark_conn_id="other_spark").spark_settings().spark_remote == (
        "sc://other-host:15010/"
    )


def test_without_the_connection_the_variables_are_the_fallback(deployment_env):
    assert operator_task().spark_settings().spark_remote == FALLBACK_REMOTE
    deployment_env.setenv("BATCHPOINT_SPARK_MODE", "submit")
    deployment_env.setenv("BATCHPOINT_SPARK_MASTER", "local[3]")
    deployment_env.setenv("BATCHPOINT_SPARK_SUBMIT", "/bin/true")
    assert operator_task().spark_settings().spark_master == "local[3]"
    # A spark_default connection (SparkSubmitHook's) gives the submit master.
    deployment_env.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT",
        json.dumps({"conn_type": "spark", "host": "spark://spark-master", "port": 7077}),
    )
    assert operator_task().spark_settings().spark_master == "spark://spark-master:7077"


def test_the_operators_spark_conf_goes_over_the_setting(deployment_env):
    deployment_env.setenv(
        "BATCHPOINT_SPARK_CONF",
        json.dumps({"spark.sql.shuffle.partitions": "8", "spark.sql.ansi.enabled": "true"}),
    )
    settings = operator_task(spark_conf={"spark.sql.shuffle.partitions": "3"}).spark_settings()
    assert settings.spark_conf == {
        "spark.sql.shuffle.partitions": "3",
        "spark.sql.ansi.enabled": "true",
    }
    # ...and reaches a job in a child process through its environment.
    launcher = ConnectLauncher(AirflowDeployment.from_env(), "demo.payments:pipeline")
    env = launcher.environment(settings)
    assert json.loads(env["BATCHPOINT_SPARK_CONF"]) == settings.spark_conf


@pytest.mark.parametrize(
    ("connection", "says"),
    [
        # a connection of another type
        (json.dumps({"conn_type": "aws", "password": TOKEN}), "needs a 'spark_connect'"),
        # a host no Spark Connect address can be made of
        (spark_connect_json(host="bad host name", password=TOKEN), "not a Spark Connect address"),
        # a path, which a gRPC endpoint cannot have
        (spark_connect_json(host="sc://h:15002/x", password=TOKEN), "path '/x' is not supported"),
    ],
)
def test_a_bad_connection_fails_the_task_in_one_line_without_its_token(
    deployment_env, connection, says
):
    deployment_env.setenv("AIRFLOW_CONN_SPARK_CONNECT_DEFAULT", connection)
    with pytest.raises(AirflowFailException) as failed:
        operator_task().spark_settings()
    message = str(failed.value)
    assert says in message and "spark_connect_default" in message
    assert TOKEN not in message and "\n" not in message


def test_spark_conf_values_that_are_credentials_stay_out_of_reprs_and_errors(deployment_env):
    from batchpoint.settings import Settings

    secret = "s3a-secret-9d2e"
    deployment_env.setenv(
        "BATCHPOINT_SPARK_CONF",
        json.dumps({"spark.hadoop.fs.s3a.secret.key": secret, "spark.sql.ansi.enabled": "true"}),
    )
    settings = Settings.from_env()
    assert secret not in repr(settings) and "'spark.sql.ansi.enabled': 'true'" in repr(settings)
    deployment_env.setenv("BATCHPOINT_SPARK_CONF", f'{{"spark.hadoop.fs.s3a.secret.key": {secret}')
    with pytest.raises(ConfigError) as bad:
        Settings.from_env()
    assert "BATCHPOINT_SPARK_CONF" in str(bad.value) and secret not in str(bad.value)
