"""Mistakes in the Airflow connections batchpoint reads (real `airflow.sdk.Connection`s,
no server, no S3 call): each is one ConfigError line naming the connection, never a
silent fallback (an extra that is not JSON used to lose its root or use_ssl), a bare
traceback, or a secret in a log line."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from airflow.sdk import Connection

from batchpoint.airflow.config import AirflowDeployment
from batchpoint.airflow.launchers import SparkSubmitLauncher
from batchpoint.airflow.spark_connection import spark_settings
from batchpoint.airflow.storage_connection import settings_from_connection
from batchpoint.errors import ConfigError
from batchpoint.settings import Settings, SparkMode

pytestmark = pytest.mark.airflow

SECRET = "SEKRIT-4b1e-never-shown"


@pytest.fixture
def base(tmp_path: Path) -> Settings:
    return Settings.from_env({"BATCHPOINT_ROOT": f"file://{tmp_path}/env-root"})


def storage(**fields) -> Connection:
    return Connection(conn_id="bp_storage", conn_type="aws", **fields)


def spark_connect(**fields) -> Connection:
    return Connection(conn_id="bp_spark", conn_type="spark_connect", host="spark", **fields)


def connect_settings(base: Settings, conn: Connection) -> Settings:
    return spark_settings(base, SparkMode.CONNECT, "bp_spark", lambda _id: conn)


NOT_AN_OBJECT = "extra is not a JSON object"


@pytest.mark.parametrize("extra", ['{"root": "s3://prod/p", "endpoint_url": "http://s3"', "[1]"])
def test_a_storage_extra_that_is_no_json_object_is_named(base: Settings, extra: str) -> None:
    conn = storage(login="AKIAEXAMPLE1", password=SECRET, extra=extra)
    with pytest.raises(ConfigError, match=f"^Airflow connection 'bp_storage': {NOT_AN_OBJECT}"):
        settings_from_connection(conn, base, "bp_storage")


@pytest.mark.parametrize("extra", ['{"use_ssl": true', '"use_ssl"', "[1]"])
def test_a_spark_connect_extra_that_is_no_json_object_is_named(base: Settings, extra: str) -> None:
    conn = spark_connect(port=15002, password=SECRET, extra=extra)
    with pytest.raises(ConfigError, match=f"^Airflow connection 'bp_spark': {NOT_AN_OBJECT}"):
        connect_settings(base, conn)


def test_use_ssl_still_comes_from_a_json_extra(base: Settings) -> None:
    conn = spark_connect(port=15002, password=SECRET, extra='{"use_ssl": true}')
    assert connect_settings(base, conn).spark_remote.endswith(";use_ssl=true")


@pytest.mark.parametrize("host", ["https://spark", "http://spark", "grpc://spark"])
def test_a_spark_connect_host_of_another_scheme_is_refused(base: Settings, host: str) -> None:
    conn = Connection(conn_id="bp_spark", conn_type="spark_connect", host=host, port=15002)
    with pytest.raises(ConfigError, match=r"^Airflow connection 'bp_spark': host .* not a Spark"):
        connect_settings(base, conn)
    sc = Connection(conn_id="bp_spark", conn_type="spark_connect", host="sc://spark", port=15002)
    assert connect_settings(base, sc).spark_remote == "sc://spark:15002/"


@pytest.mark.parametrize(
    ("host", "port"), [("http://s3:99999", 8333), ("http://s3:abc", None), ("s3", 70000)]
)
def test_a_storage_port_out_of_range_is_named(base: Settings, host: str, port) -> None:
    conn = storage(host=host, port=port, login="AKIAEXAMPLE1", password=SECRET)
    with pytest.raises(ConfigError, match=r"^Airflow connection 'bp_storage': .*1 to 65535"):
        settings_from_connection(conn, base, "bp_storage")


@pytest.mark.parametrize(
    ("host", "endpoint"),
    [("[fd00::5]", "http://[fd00::5]:8333"), ("http://[fd00::5]", "http://[fd00::5]:8333")],
)
def test_an_ipv6_storage_host_with_a_port_field_gives_an_endpoint_that_parses(
    base: Settings, host: str, endpoint: str
) -> None:
    """The port was joined to the address without its brackets (a reviewer)."""
    conn = storage(host=host, port=8333, login="AKIAEXAMPLE1", password=SECRET)
    settings = settings_from_connection(conn, base, "bp_storage")
    assert settings.store_options["endpoint_url"] == endpoint


@pytest.mark.parametrize(
    ("root", "problem"),
    [
        (f"s3://AKIAX:{SECRET}/abc@bucket/p", "holds credentials"),
        (f"s3://AKIAX:{SECRET}@bucket/p", "holds credentials"),
        ("s3:///p", "names no bucket"),
        ("file://rel/p", "file:///absolute/path"),
        ("s3a://bucket/p", "use s3://"),
    ],
)
def test_an_extra_root_is_checked_as_batchpoint_root_is(
    base: Settings, root: str, problem: str
) -> None:
    conn = storage(extra=json.dumps({"root": root}))
    with pytest.raises(ConfigError, match=r"^Airflow connection 'bp_storage': extra root") as e:
        settings_from_connection(conn, base, "bp_storage")
    assert problem in str(e.value) and SECRET not in str(e.value)


def test_a_good_extra_root_is_taken(base: Settings, tmp_path: Path) -> None:
    conn = storage(extra=json.dumps({"root": f"file://{tmp_path}/conn-root"}))
    assert settings_from_connection(conn, base, "bp_storage").root == f"file://{tmp_path}/conn-root"


def test_a_masters_password_is_not_logged(base: Settings, caplog) -> None:
    conn = Connection(
        conn_id="spark_default", conn_type="spark", host=f"k8s://https://admin:{SECRET}@k8s"
    )
    with caplog.at_level(logging.INFO, logger="batchpoint.airflow.spark_connection"):
        found = spark_settings(base, SparkMode.SUBMIT, "spark_default", lambda _id: conn)
    assert found.spark_master == f"k8s://https://admin:{SECRET}@k8s"  # the job still gets it
    assert "Spark master from connection 'spark_default'" in caplog.text
    assert SECRET not in caplog.text
    assert SECRET not in repr(found)


def test_the_submit_command_line_is_logged_without_secret_conf(tmp_path: Path) -> None:
    args = (
        f"--conf spark.kubernetes.authenticate.submission.oauthToken={SECRET} "
        f"--conf=spark.hadoop.fs.s3a.secret.key={SECRET} -c spark.x.password={SECRET} "
        "--conf spark.sql.shuffle.partitions=4"
    )
    env = {
        "BATCHPOINT_ROOT": f"file://{tmp_path}/root",
        "BATCHPOINT_SPARK_MODE": "submit",
        "BATCHPOINT_SPARK_MASTER": "spark://master:7077",
        # A spark-submit that does nothing: the command line is what is looked at.
        "BATCHPOINT_SPARK_SUBMIT": shutil.which("true"),
        "BATCHPOINT_SPARK_SUBMIT_ARGS": args,
    }
    deployment = AirflowDeployment.from_env(env)
    launcher = SparkSubmitLauncher(deployment, "demo.payments:pipeline")
    lines: list[str] = []
    result = launcher.launch(deployment.settings, 7, "dedup", "a1", lines.append)
    assert result.returncode == 0
    assert SECRET not in "\n".join(lines)
    assert "oauthToken=**********" in lines[0] and "s3a.secret.key=**********" in lines[0]
    assert "spark.sql.shuffle.partitions=4" in lines[0]
    # spark-submit itself still gets the real values.
    argv = launcher.command(deployment.settings, 7, "dedup", "a1")
    assert f"spark.hadoop.fs.s3a.secret.key={SECRET}" in " ".join(argv)
