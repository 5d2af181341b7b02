"""Configuration (one place, clear messages) and the hooks: storage settings from an
Airflow connection, the spark-submit command line and environment, the REST API hook."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from types import SimpleNamespace

import pytest

from batchpoint.airflow.config import AirflowDeployment
from batchpoint.errors import ConfigError
from batchpoint.settings import Settings, parse_interval
from batchpoint.settings.sensor_mode import SensorMode
from batchpoint.storage.redaction import revealed_options

pytestmark = pytest.mark.airflow


REMOTE = "sc://spark-connect:15002"


def env(**values: str) -> dict[str, str]:
    return {"BATCHPOINT_ROOT": "file:///tmp/bp-config-test", **values}


def submit_env(**values: str) -> dict[str, str]:
    return env(BATCHPOINT_SPARK_MODE="submit", **values)


def test_defaults():
    # Connect mode unless told otherwise: the tasks are thin clients of one server.
    d = AirflowDeployment.from_env(env(BATCHPOINT_SPARK_REMOTE=REMOTE))
    assert (d.spark_mode, d.spark_remote) == ("connect", REMOTE)
    assert d.settings.spark_mode == "connect"
    d = AirflowDeployment.from_env(submit_env())
    assert d.spark_mode == "submit"
    assert d.pipeline_refs == ()  # none: the library names no pipeline of its own
    assert d.schedule == timedelta(seconds=300)
    assert d.spark_submit == os.path.join(os.path.dirname(sys.executable), "spark-submit")
    # the job ships inside the package, so an installed batchpoint needs no checkout
    assert d.spark_job.endswith("batchpoint/jobs/run_operator.py")
    assert os.path.isfile(d.spark_job)
    assert d.sensor_mode == "deferrable"
    assert (d.storage_conn_id, d.api_conn_id) == ("batchpoint_storage", "batchpoint_airflow_api")
    assert d.audit is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("300", timedelta(seconds=300)),
        ("90s", timedelta(seconds=90)),
        ("5m", timedelta(minutes=5)),
        ("1.5h", timedelta(minutes=90)),
        ("none", None),
        ("*/10 * * * *", "*/10 * * * *"),
        ("@hourly", "@hourly"),
    ],
)
def test_intervals(text, expected):
    assert parse_interval(text) == expected


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"BATCHPOINT_CHECKPOINT_INTERVAL": "0"}, "BATCHPOINT_CHECKPOINT_INTERVAL"),
        ({"BATCHPOINT_CHECKPOINT_INTERVAL": "@once"}, "BATCHPOINT_CHECKPOINT_INTERVAL"),
        ({"BATCHPOINT_MAX_CONCURRENT": "0"}, "BATCHPOINT_MAX_CONCURRENT"),
        ({"BATCHPOINT_MIN_PAUSE": "soon"}, "BATCHPOINT_MIN_PAUSE"),
        ({"BATCHPOINT_ACK_SENSOR_MODE": "sleepy"}, "BATCHPOINT_ACK_SENSOR_MODE"),
        ({"BATCHPOINT_TASK_RETRIES": "1.5"}, "BATCHPOINT_TASK_RETRIES"),
        ({"BATCHPOINT_PIPELINE_REF": "just_a_module"}, "BATCHPOINT_PIPELINE_REF"),
        (
            {"BATCHPOINT_SPARK_MODE": "submit", "BATCHPOINT_SPARK_JOB": "/nope/run.py"},
            "BATCHPOINT_SPARK_JOB",
        ),
        ({"BATCHPOINT_SPARK_MODE": "cluster"}, "BATCHPOINT_SPARK_MODE"),
        ({"BATCHPOINT_SPARK_REMOTE": "http://spark:15002"}, "BATCHPOINT_SPARK_REMOTE"),
        ({"BATCHPOINT_SPARK_MODE": "connect"}, "BATCHPOINT_SPARK_REMOTE"),
        ({}, "BATCHPOINT_SPARK_REMOTE"),  # connect is the default
        ({"BATCHPOINT_SPARK_SUBMIT_ARGS": "--conf 'unclosed"}, "BATCHPOINT_SPARK_SUBMIT_ARGS"),
        ({"BATCHPOINT_QUALITY_GATE": "no_colon"}, "BATCHPOINT_QUALITY_GATE"),
        ({"BATCHPOINT_AUDIT": "yes please"}, "BATCHPOINT_AUDIT"),
        ({"BATCHPOINT_AUDIT": "ture"}, "BATCHPOINT_AUDIT"),
    ],
)
def test_each_bad_setting_is_named(values, named):
    with pytest.raises(ConfigError, match=named) as raised:
        AirflowDeployment.from_env(env(**values))
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("text", ["poke", "Reschedule", "DEFERRABLE"])
def test_the_sensor_mode_is_read_as_its_enum(text):
    d = AirflowDeployment.from_env(submit_env(BATCHPOINT_ACK_SENSOR_MODE=text))
    assert d.sensor_mode is SensorMode(text.lower())


def test_a_bad_sensor_mode_is_refused_naming_the_setting_and_the_modes():
    with pytest.raises(ConfigError) as raised:
        AirflowDeployment.from_env(submit_env(BATCHPOINT_ACK_SENSOR_MODE="sleepy"))
    assert str(raised.value) == (
        "BATCHPOINT_ACK_SENSOR_MODE='sleepy': use one of deferrable, reschedule or poke"
    )


def test_connect_mode_needs_no_spark_submit_nor_job_file():
    """An Airflow image without Spark: only submit mode checks for spark-submit."""
    missing = {"BATCHPOINT_SPARK_JOB": "/nope/run.py"}
    d = AirflowDeployment.from_env(env(BATCHPOINT_SPARK_REMOTE=REMOTE, **missing))
    assert d.spark_mode == "connect"
    local = AirflowDeployment.from_env(env(BATCHPOINT_SPARK_MODE="local", **missing))
    assert local.spark_mode == "local"
    with pytest.raises(ConfigError, match="BATCHPOINT_SPARK_JOB"):
        AirflowDeployment.from_env(submit_env(**missing))


@pytest.mark.parametrize(
    ("text", "audit"), [("true", True), ("TRUE", True), (" false ", False), ("", False)]
)
def test_the_audit_setting_is_true_or_false(text, audit):
    assert AirflowDeployment.from_env(submit_env(BATCHPOINT_AUDIT=text)).audit is audit


def test_the_spark_conf_of_the_submit_args_is_what_an_in_task_session_gets():
    d = AirflowDeployment.from_env(
        submit_env(
            BATCHPOINT_SPARK_SUBMIT_ARGS="--conf spark.driver.host=scheduler "
            "--driver-memory 2g --conf=spark.sql.shuffle.partitions=2 --conf broken"
        )
    )
    assert d.spark_conf == {
        "spark.driver.host": "scheduler",
        "spark.sql.shuffle.partitions": "2",
    }


# -- storage from a connection --------------------------------------------------------------


def conn(**fields):
    extra = fields.pop("extra", {})
    defaults = {"host": None, "port": None, "schema": None, "login": None, "password": None}
    return SimpleNamespace(**{**defaults, **fields}, extra_dejson=extra)


def test_storage_settings_from_a_connection():
    from batchpoint.airflow.hooks import settings_from_connection

    base = Settings("file:///tmp/base", {}, "local[1]")
    s = settings_from_connection(
        conn(
            host="seaweed",
            port=8333,
            login="AK",
            password="SK",
            extra={"root": "s3://bucket/prefix", "region": "eu-1"},
        ),
        base,
        "batchpoint_storage",
    )
    assert s.root == "s3://bucket/prefix"
    assert revealed_options(s.store_options) == {
        "endpoint_url": "http://seaweed:8333",
        "access_key_id": "AK",
        "secret_access_key": "SK",
        "region": "eu-1",
    }
    assert s.spark_master == "local[1]"
    # what the Spark job gets: the connection's values, as BATCHPOINT_* variables
    assert s.as_env()["BATCHPOINT_S3_ENDPOINT_URL"] == "http://seaweed:8333"


def test_an_aws_style_connection_works_too_and_the_root_may_come_from_the_env():
    from batchpoint.airflow.hooks import settings_from_connection

    base = Settings("s3://from-env/p", {"region": "us-east-1"}, "local[1]")
    s = settings_from_connection(
        conn(
            extra={
                "endpoint_url": "https://s3.example.com",
                "aws_access_key_id": "AK",
                "aws_secret_access_key": "SK",
            }
        ),
        base,
        "c",
    )
    assert s.root == "s3://from-env/p"
    assert s.store_options["endpoint_url"] == "https://s3.example.com"
    assert s.store_options["region"] == "us-east-1"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"extra": {"bucket": "x"}}, "unknown extra field"),
        ({"extra": {"root": "s3a://b/p"}}, "extra root"),
        ({"login": "AK"}, "together"),
        ({"host": "ftp://x"}, "http"),
    ],
)
def test_a_bad_connection_is_named(fields, message):
    from batchpoint.airflow.hooks import settings_from_connection

    with pytest.raises(ConfigError, match=f"Airflow connection 'bp_conn'.*{message}"):
        settings_from_connection(conn(**fields), Settings("file:///tmp/x"), "bp_conn")


def test_the_hook_reads_the_connection_from_airflow(monkeypatch):
    from batchpoint.airflow.hooks import BatchpointHook

    monkeypatch.setenv("BATCHPOINT_ROOT", "file:///tmp/from-env")
    monkeypatch.setenv(
        "AIRFLOW_CONN_BP_TEST_STORAGE",
        json.dumps({"conn_type": "aws", "extra": {"root": "file:///tmp/from-conn"}}),
    )
    assert BatchpointHook("bp_test_storage").get_settings().root == "file:///tmp/from-conn"
    assert BatchpointHook("bp_no_such_conn").get_settings().root == "file:///tmp/from-env"


# -- spark-submit ---------------------------------------------------------------------------


def test_the_spark_submit_command_and_environment():
    from batchpoint.airflow.config import package_root
    from batchpoint.airflow.hooks import SparkSubmitLauncher

    deployment = AirflowDeployment.from_env(
        submit_env(BATCHPOINT_SPARK_SUBMIT_ARGS="--conf spark.executor.memory=1g")
    )
    launcher = SparkSubmitLauncher(deployment, "demo.payments:pipeline")
    settings = Settings(
        "s3://b/p",
        {"endpoint_url": "http://s3:8333", "access_key_id": "AK", "secret_access_key": "SK"},
        "spark://master:7077",
    )
    argv = launcher.command(settings, 12, "dedup", "af-1-t2")
    assert argv[:3] == [deployment.spark_submit, "--master", "spark://master:7077"]
    assert argv[argv.index("--conf") + 1] == "spark.executor.memory=1g"
    job = argv.index(deployment.spark_job)
    assert argv[job + 1 :] == [
        "--pipeline",
        "demo.payments:pipeline",
        "--checkpoint-id",
        "12",
        "--operator",
        "dedup",
        "--master",
        "spark://master:7077",
        "--attempt",
        "af-1-t2",
    ]
    assert "SK" not in " ".join(argv)  # credentials travel in the environment only
    # as left by a Connect client that ran earlier in the same worker process
    worker = {"PATH": "/bin", "PYTHONPATH": "/x", "SPARK_CONNECT_MODE_ENABLED": "1"}
    child = launcher.environment(settings, {**worker, "SPARK_REMOTE": "sc://elsewhere:1"})
    assert "SPARK_CONNECT_MODE_ENABLED" not in child and "SPARK_REMOTE" not in child
    assert child["BATCHPOINT_ROOT"] == "s3://b/p"
    assert child["BATCHPOINT_S3_SECRET_ACCESS_KEY"] == "SK"
    assert child["PYSPARK_PYTHON"] == child["PYSPARK_DRIVER_PYTHON"] == sys.executable
    assert child["PYTHONPATH"].split(os.pathsep) == [str(package_root()), "/x"]


def test_the_connect_and_local_commands_run_the_job_module_without_spark_submit():
    from batchpoint.airflow.hooks import ConnectLauncher, LocalLauncher, launcher_for

    settings = Settings("s3://b/p", {"secret_access_key": "SK", "access_key_id": "AK"})
    connect = launcher_for(AirflowDeployment.from_env(env(BATCHPOINT_SPARK_REMOTE=REMOTE)), "m:p")
    assert isinstance(connect, ConnectLauncher)
    argv = connect.command(settings, 7, "dedup", "af-1-t1")
    # a thin client: this Python, the job module, a client of the server its environment
    # names (a token in the address stays off the command line); no spark-submit
    assert argv[:4] == [sys.executable, "-m", "batchpoint.jobs.run_operator", "--connect"]
    assert argv[4:] == [
        "--pipeline", "m:p", "--checkpoint-id", "7", "--operator", "dedup", "--attempt", "af-1-t1"
    ]  # fmt: skip
    child = connect.environment(settings, {"PATH": "/bin"})
    assert child["BATCHPOINT_S3_SECRET_ACCESS_KEY"] == "SK" and "SK" not in " ".join(argv)
    local = launcher_for(AirflowDeployment.from_env(env(BATCHPOINT_SPARK_MODE="local")), "m:p")
    assert isinstance(local, LocalLauncher)
    argv = local.command(settings, 7, "dedup", "a")
    assert argv[1:3] == ["-m", "batchpoint.jobs.run_operator"]
    assert argv[argv.index("--master") + 1] == "local[2]"


def test_an_unreachable_server_or_storage_is_told_apart_from_other_failures():
    """An unreachable server exits 2 as a bad setting does, storage that did not answer
    3 as a failed operator does; the job's status line says which (no output is
    scraped), and only the first of each pair is worth a retry."""
    from batchpoint.airflow.hooks import SparkSubmitLauncher
    from batchpoint.runtime.job_status import JobReport, JobStatus

    launcher = SparkSubmitLauncher(AirflowDeployment.from_env(submit_env()), "m:p")
    line = "Spark Connect server at sc://127.0.0.1:1 is unreachable: connection refused"
    said = {
        JobStatus.SPARK_UNREACHABLE: (2, line),
        JobStatus.BAD_CONFIG: (2, "BATCHPOINT_ROOT='x': bad"),
        JobStatus.STORAGE_UNAVAILABLE: (3, "S3 endpoint http://s3:8333 did not answer get"),
        JobStatus.OPERATOR_FAILED: (3, "dedup failed in checkpoint 7: boom"),
    }
    for status, (exit_code, message) in said.items():
        report = JobReport(status, 7, "dedup", message)
        code = (
            f"print('error: ' + {message!r}); print({report.line()!r}); "
            f"raise SystemExit({exit_code})"
        )
        result = launcher.run([sys.executable, "-c", code], dict(os.environ), lambda _: None)
        assert result.returncode == exit_code and result.report == report
        assert result.status is status and result.message == message
        assert result.output() == f"error: {message}"  # the status line is not output
        assert result.status.retry_may_help is (
            status in (JobStatus.SPARK_UNREACHABLE, JobStatus.STORAGE_UNAVAILABLE)
        )


def test_the_launcher_streams_output_and_reports_the_exit_code(tmp_path):
    from batchpoint.airflow.hooks import SparkSubmitLauncher

    launcher = SparkSubmitLauncher(AirflowDeployment.from_env(submit_env()), "m:p")
    lines: list[str] = []
    result = launcher.run(
        [sys.executable, "-c", "print('one'); print('two'); raise SystemExit(3)"],
        dict(os.environ),
        lines.append,
    )
    assert result.returncode == 3 and lines == ["one", "two"] and result.tail == lines


@pytest.mark.parametrize(
    ("code", "returncode", "status"),
    [
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -9, "died"),
        ("raise SystemExit(137)", 137, "died"),
        ("raise SystemExit(143)", 143, "interrupted"),
        ("raise SystemExit(3)", 3, "operator-failed"),
        ("raise SystemExit(2)", 2, "bad-config"),
        ("raise RuntimeError('a crash')", 1, "died"),
    ],
)
def test_a_job_that_died_before_its_status_line_is_read_by_its_exit_code(
    code: str, returncode: int, status: str
):
    from batchpoint.airflow.hooks import SparkSubmitLauncher
    from batchpoint.runtime.job_status import JobStatus

    launcher = SparkSubmitLauncher(AirflowDeployment.from_env(submit_env()), "m:p")
    child = f"print('[dedup] working', flush=True); {code}"
    result = launcher.run([sys.executable, "-c", child], dict(os.environ), lambda _: None)
    assert (result.returncode, result.report) == (returncode, None)
    assert result.status is JobStatus(status) and result.message == ""


def test_the_status_line_is_read_wherever_it_is_in_the_output():
    """A JVM may log its shutdown after the status line, past the tail that is kept."""
    from batchpoint.airflow.hooks import SparkSubmitLauncher
    from batchpoint.runtime.job_status import JobReport, JobStatus

    launcher = SparkSubmitLauncher(AirflowDeployment.from_env(submit_env()), "m:p")
    report = JobReport(JobStatus.ACKNOWLEDGED, 7, "dedup", "acks dedup#0=SUCCESS")
    child = f"print({report.line()!r}); [print('shutdown', i) for i in range(50)]"
    result = launcher.run([sys.executable, "-c", child], dict(os.environ), lambda _: None, 40)
    assert len(result.tail) == 40 and report.line() not in result.tail
    assert result.report == report and result.status.succeeded


# -- the REST API hook ----------------------------------------------------------------------


def test_a_missing_api_connection_says_how_to_configure_it(monkeypatch):
    from batchpoint.airflow.hooks import AirflowApiHook

    monkeypatch.delenv("AIRFLOW_CONN_BP_NO_API", raising=False)
    with pytest.raises(ConfigError) as raised:
        AirflowApiHook("bp_no_api").check_configured()
    message = str(raised.value)
    assert "'bp_no_api'" in message and "AIRFLOW_CONN_BP_NO_API" in message
    assert "Admin > Connections" in message
