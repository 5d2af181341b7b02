"""The one settings model: every BATCHPOINT_* variable is read, every bad value is refused
with one line naming the variable, and reading creates nothing."""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from batchpoint.errors import ConfigError
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.settings import KNOWN_VARIABLES, Settings, read_environment
from batchpoint.settings.values import UPSTREAM
from batchpoint.storage import StoreRef
from batchpoint.storage.redaction import REDACTED, Secret, redact_uri, revealed_options

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture
def root(tmp_path) -> str:
    return (tmp_path / "root").as_uri()


def refused(env: dict[str, str], **overrides: str) -> str:
    with pytest.raises(ConfigError) as raised:
        Settings.from_env(env, **overrides)
    message = str(raised.value)
    assert "\n" not in message
    return message


# -- every variable is read ---------------------------------------------------------


def test_every_variable_is_read(tmp_path, root):
    job = tmp_path / "job.py"
    job.write_text("")
    env = {
        "BATCHPOINT_ROOT": "s3://bucket/prefix",
        "BATCHPOINT_S3_ENDPOINT_URL": "http://127.0.0.1:8333",
        "BATCHPOINT_S3_REGION": "eu-1",
        "BATCHPOINT_S3_ACCESS_KEY_ID": "AK",
        "BATCHPOINT_S3_SECRET_ACCESS_KEY": "SK",
        "BATCHPOINT_S3_SESSION_TOKEN": "TOKEN",
        "BATCHPOINT_SAVEPOINT_ROOTS": "s3://bucket/sp, s3://other/keep/",
        "BATCHPOINT_SPARK_MASTER": "spark://master:7077",
        "BATCHPOINT_SPARK_MODE": "Connect",
        "BATCHPOINT_SPARK_REMOTE": "sc://spark-connect:15002",
        "BATCHPOINT_SPARK_CONN_ID": "my_spark",
        # JSON numbers and booleans as Spark reads them
        "BATCHPOINT_SPARK_CONF": '{"spark.sql.shuffle.partitions": 8, "spark.sql.ansi.enabled": '
        "true}",
        "BATCHPOINT_CONNECT_CLIENT": "Subprocess",
        "BATCHPOINT_CHECKPOINT_TIMEOUT": "15m",
        "BATCHPOINT_MIN_PAUSE": "90s",
        "BATCHPOINT_MAX_CONCURRENT": "2",
        "BATCHPOINT_TOLERABLE_FAILED_CHECKPOINTS": "0",
        "BATCHPOINT_NUM_RETAINED": "5",
        "BATCHPOINT_VERIFY_CHECKSUMS": "TRUE",
        "BATCHPOINT_RESTORE_VERIFY_CHECKSUMS": "false",
        "BATCHPOINT_HISTORY_LIMIT": "0",
        "BATCHPOINT_GC_GRACE": "2h",
        "BATCHPOINT_CHANGELOG_CHAIN": "3",
        "BATCHPOINT_CHANGELOG_MIN_BYTES": "512 KiB",
        "BATCHPOINT_SKIP_IDLE_EPOCHS": "false",
        "BATCHPOINT_QUALITY_GATE": "demo.payments_quality:restore_gate",
        "BATCHPOINT_PIPELINE_REF": "a.b:p, c:q",
        "BATCHPOINT_CHECKPOINT_INTERVAL": "*/10 * * * *",
        "BATCHPOINT_CHECKPOINT_INTERVALS": '{"reports": "Upstream", "p": null, "q": "5m"}',
        "BATCHPOINT_SPARK_SUBMIT": sys.executable,  # any executable file
        "BATCHPOINT_SPARK_JOB": str(job),
        "BATCHPOINT_SPARK_SUBMIT_ARGS": "--conf spark.x=1 --driver-memory '2 g'",
        "BATCHPOINT_PYSPARK_PYTHON": "/usr/bin/python3",
        "BATCHPOINT_ACK_SENSOR_MODE": "Poke",
        "BATCHPOINT_ACK_POLL_INTERVAL": "0.5",
        "BATCHPOINT_TASK_RETRIES": "4",
        "BATCHPOINT_TASK_RETRY_DELAY": "1m",
        "BATCHPOINT_CLEANUP_GRACE": "10",
        "BATCHPOINT_STORAGE_CONN_ID": "my_storage",
        "BATCHPOINT_API_CONN_ID": "my.api-conn",
        "BATCHPOINT_AUDIT": "true",
        "BATCHPOINT_TABLE_CATALOG": "sqlite:////shared/catalog.db",
    }
    assert set(env) == KNOWN_VARIABLES - {
        "BATCHPOINT_S3_PROFILE"
    }  # a profile and keys exclude each other

    s = Settings.from_env(env)
    assert s.root == "s3://bucket/prefix"
    assert revealed_options(s.store_options) == {
        "endpoint_url": "http://127.0.0.1:8333",
        "region": "eu-1",
        "access_key_id": "AK",
        "secret_access_key": "SK",
        "session_token": "TOKEN",
    }
    assert isinstance(s.store_options["secret_access_key"], Secret)
    assert s.savepoint_roots == ("s3://bucket/sp/", "s3://other/keep/")
    assert s.spark_master == "spark://master:7077"
    assert (s.spark_mode, s.spark_remote) == ("connect", "sc://spark-connect:15002")
    assert s.spark_conf == {"spark.sql.shuffle.partitions": "8", "spark.sql.ansi.enabled": "true"}
    assert s.checkpoint == CheckpointConfig(
        timeout=900,
        min_pause=90,
        max_concurrent=2,
        tolerable_failed_checkpoints=0,
        num_retained=5,
        verify_checksums=True,
        restore_verify_checksums=False,
        history_limit=0,
        gc_grace=7200,
        changelog_chain=3,
        changelog_min_bytes=512 << 10,
        skip_idle=False,
    )
    assert s.quality_gate_ref == "demo.payments_quality:restore_gate"
    assert read_environment(env).table_catalog == "sqlite:////shared/catalog.db"

    pytest.importorskip("airflow")
    from batchpoint.airflow.config import AirflowDeployment

    d = AirflowDeployment.from_env(env)
    assert d.settings == s
    assert d.pipeline_refs == ("a.b:p", "c:q")
    assert d.schedule == "*/10 * * * *"
    assert d.schedules == {"reports": UPSTREAM, "p": None, "q": timedelta(minutes=5)}
    assert (d.schedule_of("reports"), d.schedule_of("other")) == (UPSTREAM, "*/10 * * * *")
    assert d.connect_client == "subprocess"
    assert (d.spark_submit, d.spark_job) == (sys.executable, str(job))
    assert d.spark_submit_args == ("--conf", "spark.x=1", "--driver-memory", "2 g")
    assert d.pyspark_python == "/usr/bin/python3"
    assert (d.sensor_mode, d.poll_interval) == ("poke", 0.5)
    assert (d.task_retries, d.retry_delay, d.cleanup_grace) == (4, 60, 10)
    assert (d.storage_conn_id, d.api_conn_id) == ("my_storage", "my.api-conn")
    assert d.quality_gate_ref == s.quality_gate_ref and d.audit is True
    assert (d.spark_mode, d.spark_remote) == ("connect", "sc://spark-connect:15002")
    assert d.spark_conn_id == "my_spark"
    # Both sources of the jobs' Spark settings, BATCHPOINT_SPARK_CONF the stronger.
    assert d.spark_conf == {"spark.x": "1", **s.spark_conf}


def test_defaults(root):
    s = Settings.from_env({"BATCHPOINT_ROOT": root})
    assert s.store_options == {} and s.spark_master == "local[2]"
    assert s.savepoint_roots == (root + "/savepoints/",)
    # The protocol's bare default is Flink's, a checkpoint per trigger and a changelog for
    # any state; a deployment skips idle epochs and writes states under 4 MiB in full
    # unless told otherwise.
    assert s.checkpoint == CheckpointConfig(skip_idle=True, changelog_min_bytes=4 << 20)
    assert s.checkpoint.restore_verify_checksums is True
    assert s.checkpoint.gc_grace == 3600 and s.checkpoint.history_limit == 100
    assert s.quality_gate_ref is None
    # no mode: each front end picks its own (connect for Airflow, local for the CLI)
    assert s.spark_mode is None and s.spark_remote is None


def test_connect_mode_needs_the_server_address(root):
    message = refused({"BATCHPOINT_ROOT": root, "BATCHPOINT_SPARK_MODE": "connect"})
    assert "BATCHPOINT_SPARK_REMOTE" in message and "sc://host:port" in message
    for mode in ("submit", "local"):
        assert Settings.from_env({"BATCHPOINT_ROOT": root, "BATCHPOINT_SPARK_MODE": mode})


@pytest.mark.parametrize(
    "remote",
    [
        "sc://localhost:15002",
        "sc://10.0.0.5",
        "sc://[::1]:15002",
        "sc://h:443/;use_ssl=true;token=t",
    ],
)
def test_spark_connect_addresses(remote, root):
    env = {"BATCHPOINT_ROOT": root, "BATCHPOINT_SPARK_REMOTE": remote}
    assert Settings.from_env(env).spark_remote == remote


def test_the_default_root_is_beside_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Settings.from_env({}).root == (tmp_path / ".batchpoint").as_uri()
    assert not (tmp_path / ".batchpoint").exists()


def test_gc_grace_follows_a_long_timeout_unless_given(root):
    env = {"BATCHPOINT_ROOT": root, "BATCHPOINT_CHECKPOINT_TIMEOUT": "2h"}
    assert Settings.from_env(env).checkpoint.gc_grace == 7200 + 120  # + cleanup grace
    env["BATCHPOINT_CLEANUP_GRACE"] = "0"
    assert Settings.from_env(env).checkpoint.gc_grace == 7200
    message = refused({**env, "BATCHPOINT_GC_GRACE": "1h"})
    assert message.startswith("BATCHPOINT_GC_GRACE=3600: must be at least the checkpoint timeout")


def test_overrides_win_and_empty_ones_do_not_count(root, tmp_path):
    other = (tmp_path / "other").as_uri()
    env = {"BATCHPOINT_ROOT": root, "BATCHPOINT_SPARK_MASTER": "local[1]"}
    assert Settings.from_env(env, root=other).root == other
    assert Settings.from_env(env, root="", spark_master="").root == root
    assert Settings.from_env(env, spark_master="local[*]").spark_master == "local[*]"
    with pytest.raises(TypeError, match="colour"):
        Settings.from_env(env, colour="blue")


def test_empty_variables_mean_the_default(root):
    s = Settings.from_env({"BATCHPOINT_ROOT": root, "BATCHPOINT_MAX_CONCURRENT": ""})
    assert s.checkpoint.max_concurrent == 1


def test_variables_are_read_from_the_process_environment_by_default(root, monkeypatch):
    monkeypatch.setenv("BATCHPOINT_ROOT", root)
    monkeypatch.setenv("BATCHPOINT_NUM_RETAINED", "7")
    assert Settings.from_env().checkpoint.num_retained == 7
    # a given mapping replaces the process environment entirely
    assert Settings.from_env({"BATCHPOINT_ROOT": root}).checkpoint.num_retained == 3


# -- a child process gets the same settings -----------------------------------------


def test_as_env_reproduces_the_settings_in_a_child(root):
    env = {
        "BATCHPOINT_ROOT": "s3://b/p",
        "BATCHPOINT_S3_ACCESS_KEY_ID": "AK",
        "BATCHPOINT_S3_SECRET_ACCESS_KEY": "SK",
        "BATCHPOINT_S3_SESSION_TOKEN": "T",
        "BATCHPOINT_S3_ADDRESSING_STYLE": "path",  # an option beyond the model's fields
        "BATCHPOINT_SAVEPOINT_ROOTS": "s3://b/sp",
        "BATCHPOINT_CHECKPOINT_TIMEOUT": "2.5m",
        "BATCHPOINT_VERIFY_CHECKSUMS": "true",
        "BATCHPOINT_QUALITY_GATE": "m:gate",
        "BATCHPOINT_SPARK_MODE": "connect",
        "BATCHPOINT_SPARK_REMOTE": "sc://spark:15002",
    }
    s = Settings.from_env(env)
    assert s.store_options["addressing_style"] == "path"
    assert Settings.from_env(s.as_env()) == s
    local = Settings.from_env({"BATCHPOINT_ROOT": root})
    assert Settings.from_env(local.as_env()) == local


def test_other_storage_moves_the_default_savepoint_root_only(root, tmp_path):
    other = (tmp_path / "other").as_uri()
    moved = Settings.from_env({"BATCHPOINT_ROOT": root}).with_storage(other, {})
    assert moved.root == other and moved.savepoint_roots == (other + "/savepoints/",)
    explicit = Settings(root, savepoint_roots=("s3://keep/",)).with_storage(other, {})
    assert explicit.savepoint_roots == ("s3://keep/",)


def test_the_secret_does_not_show_in_the_model_repr():
    model = read_environment(
        {
            "BATCHPOINT_ROOT": "s3://b/p",
            "BATCHPOINT_S3_ACCESS_KEY_ID": "AK",
            "BATCHPOINT_S3_SECRET_ACCESS_KEY": "very-secret",
            "BATCHPOINT_S3_SESSION_TOKEN": "token-secret",
        }
    )
    assert "very-secret" not in repr(model) and "token-secret" not in repr(model)


def test_credentials_show_in_no_repr_or_error_and_reach_a_child_whole():
    # Invariant 13 (issue 24, reproduction 7): a secret given alone named the variable
    # and printed its value.
    secret, token, password = "very-secret-9c1", "token-secret-7aa", "catalog-pw-31f"
    connect_token = "connect-token-5e2"
    env = {
        "BATCHPOINT_ROOT": "s3://b/p",
        "BATCHPOINT_SPARK_MODE": "connect",
        "BATCHPOINT_SPARK_REMOTE": f"sc://spark:15002/;token={connect_token}",
        "BATCHPOINT_S3_ACCESS_KEY_ID": "AK",
        "BATCHPOINT_S3_SECRET_ACCESS_KEY": secret,
        "BATCHPOINT_S3_SESSION_TOKEN": token,
        "BATCHPOINT_TABLE_CATALOG": f"postgresql+psycopg2://bp:{password}@db/catalog",
    }
    model = read_environment(env)
    settings = Settings.of(model, env)
    texts = [repr(model), repr(settings), repr(settings.store_ref), str(settings)]
    for alone in ("BATCHPOINT_S3_SECRET_ACCESS_KEY", "BATCHPOINT_S3_SESSION_TOKEN"):
        message = refused({"BATCHPOINT_ROOT": "s3://b/p", alone: env[alone]})
        assert message.startswith(f"{alone}='**********': S3 option"), message
        texts.append(message)
    pytest.importorskip("airflow")
    from batchpoint.airflow.config import AirflowDeployment
    from batchpoint.spark.connect import connect_session

    deployment = AirflowDeployment.of(model, env)
    texts += [deployment.spark_description, repr(deployment)]
    with pytest.raises(ConfigError) as bad_address:
        connect_session(f"spark:15002/;token={connect_token}", "t")
    texts.append(str(bad_address.value))
    leaked = (secret, token, password, connect_token)
    assert not [t for t in texts for s in leaked if s in t], texts
    assert "sc://spark:15002/;token=**********" in repr(settings)
    child = settings.as_env()
    assert child["BATCHPOINT_SPARK_REMOTE"].endswith(connect_token)
    assert child["BATCHPOINT_S3_SECRET_ACCESS_KEY"] == secret
    assert child["BATCHPOINT_S3_SESSION_TOKEN"] == token


# -- each bad value is refused, naming it ---------------------------------------------

DURATIONS = [
    "BATCHPOINT_CHECKPOINT_TIMEOUT",
    "BATCHPOINT_MIN_PAUSE",
    "BATCHPOINT_GC_GRACE",
    "BATCHPOINT_ACK_POLL_INTERVAL",
    "BATCHPOINT_TASK_RETRY_DELAY",
    "BATCHPOINT_CLEANUP_GRACE",
    "BATCHPOINT_CHECKPOINT_INTERVAL",
]
COUNTS = [
    "BATCHPOINT_MAX_CONCURRENT",
    "BATCHPOINT_TOLERABLE_FAILED_CHECKPOINTS",
    "BATCHPOINT_NUM_RETAINED",
    "BATCHPOINT_HISTORY_LIMIT",
    "BATCHPOINT_TASK_RETRIES",
]


@pytest.mark.parametrize("variable", DURATIONS)
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("inf", "not a finite duration"),
        ("-inf", "not a finite duration"),
        ("nan", "not a finite duration"),
        ("1e400", "not a finite duration"),
        ("-5", "must be"),
        ("31d", "more than 30 days"),
        ("99999999999999999999", "more than 30 days"),
        ("soon", "a duration"),
    ],
)
def test_non_finite_negative_and_absurd_durations(variable, value, reason, root):
    message = refused({"BATCHPOINT_ROOT": root, variable: value})
    assert message.startswith(f"{variable}={value!r}: ") and reason in message


@pytest.mark.parametrize("variable", COUNTS)
@pytest.mark.parametrize(("value", "reason"), [("-1", "must be at least"), ("1.5", "whole")])
def test_negative_and_fractional_counts(variable, value, reason, root):
    message = refused({"BATCHPOINT_ROOT": root, variable: value})
    assert message.startswith(f"{variable}={value!r}: ") and reason in message


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("BATCHPOINT_CHECKPOINT_TIMEOUT", "0", "more than 0"),
        ("BATCHPOINT_MAX_CONCURRENT", "0", "at least 1"),
        ("BATCHPOINT_NUM_RETAINED", "0", "at least 1"),
        ("BATCHPOINT_ACK_POLL_INTERVAL", "0.01", "at least 0.1"),
        ("BATCHPOINT_CHECKPOINT_INTERVAL", "0", "more than 0"),
        ("BATCHPOINT_CHECKPOINT_INTERVAL", "@once", "must repeat"),
        ("BATCHPOINT_CHECKPOINT_INTERVAL", "every tuesday", "cron"),
        ("BATCHPOINT_CHECKPOINT_INTERVALS", "upstream", "not a JSON object"),
        ("BATCHPOINT_CHECKPOINT_INTERVALS", '{"9x": "5m"}', "pipeline name '9x' is invalid"),
        (
            "BATCHPOINT_CHECKPOINT_INTERVALS",
            '{"p": "@once"}',
            "pipeline 'p': '@once': a checkpoint schedule must",
        ),
        ("BATCHPOINT_CHANGELOG_MIN_BYTES", "4MB", "KiB, MiB or GiB"),
        ("BATCHPOINT_CHANGELOG_MIN_BYTES", "-1", "not a size"),
        ("BATCHPOINT_CHANGELOG_MIN_BYTES", "1.5MiB", "not a size"),
        ("BATCHPOINT_VERIFY_CHECKSUMS", "yes", "true or false"),
        ("BATCHPOINT_RESTORE_VERIFY_CHECKSUMS", "ture", "true or false"),
        ("BATCHPOINT_AUDIT", "maybe", "true or false"),
        ("BATCHPOINT_ROOT", "/no/scheme", "did you mean file:///no/scheme"),
        ("BATCHPOINT_ROOT", "s3a://bucket/p", "use s3://"),
        ("BATCHPOINT_ROOT", "s3:///p", "no bucket"),
        ("BATCHPOINT_ROOT", "file://relative/path", "file:///absolute/path"),
        ("BATCHPOINT_ROOT", "ftp://host/x", "use s3://bucket/prefix"),
        ("BATCHPOINT_SAVEPOINT_ROOTS", "s3://b/sp,/tmp/x", "did you mean file:///tmp/x"),
        ("BATCHPOINT_SPARK_MASTER", "lokal[2]", "not a Spark master"),
        ("BATCHPOINT_SPARK_MODE", "cluster", "connect, submit or local"),
        ("BATCHPOINT_CONNECT_CLIENT", "thread", "task or subprocess"),
        ("BATCHPOINT_SPARK_REMOTE", "localhost:15002", "sc://host:port"),
        ("BATCHPOINT_SPARK_REMOTE", "http://spark:15002", "did you mean sc://spark:15002"),
        ("BATCHPOINT_SPARK_REMOTE", "sc://spark:99999", "between 1 and 65535"),
        ("BATCHPOINT_SPARK_REMOTE", "sc://spark:15002 x", "sc://host:port"),
        ("BATCHPOINT_QUALITY_GATE", "no_colon", "module:attribute"),
        ("BATCHPOINT_QUALITY_GATE", "a.b:c d", "module:attribute"),
        ("BATCHPOINT_PIPELINE_REF", "ok.module:p,just_a_module", "module:attribute"),
        ("BATCHPOINT_PIPELINE_REF", " , ", "empty"),
        ("BATCHPOINT_SPARK_SUBMIT_ARGS", "--conf 'unclosed", "quotation"),
        ("BATCHPOINT_ACK_SENSOR_MODE", "sleepy", "deferrable, reschedule or poke"),
        ("BATCHPOINT_STORAGE_CONN_ID", "my conn", "connection id"),
        ("BATCHPOINT_API_CONN_ID", "a/b", "connection id"),
    ],
)
def test_each_bad_value_is_refused_naming_it(variable, value, reason, root):
    message = refused({"BATCHPOINT_ROOT": root, variable: value})
    assert message.startswith(variable) and reason in message, message


@pytest.mark.parametrize(
    ("values", "variable", "reason"),
    [
        ({"BATCHPOINT_S3_ENDPOINT_URL": "ftp://x"}, "BATCHPOINT_S3_ENDPOINT_URL", "http(s)"),
        ({"BATCHPOINT_S3_ACCESS_KEY_ID": "AK"}, "BATCHPOINT_S3_ACCESS_KEY_ID", "together"),
        ({"BATCHPOINT_S3_MULTIPART_CHUNKSIZE": "1k"}, "BATCHPOINT_S3_MULTIPART_CHUNKSIZE", "5 MiB"),
        ({"BATCHPOINT_S3_BUCKET": "x"}, "BATCHPOINT_S3_BUCKET", "unknown S3 storage option"),
        (
            {
                "BATCHPOINT_S3_PROFILE": "dev",
                "BATCHPOINT_S3_ACCESS_KEY_ID": "AK",
                "BATCHPOINT_S3_SECRET_ACCESS_KEY": "SK",
            },
            "BATCHPOINT_S3_* variables",
            "either profile",
        ),
    ],
)
def test_bad_s3_options_are_named(values, variable, reason):
    message = refused({"BATCHPOINT_ROOT": "s3://b/p", **values})
    assert message.startswith(variable) and reason in message, message


def test_s3_options_do_not_matter_to_a_file_root(root):
    assert Settings.from_env({"BATCHPOINT_ROOT": root, "BATCHPOINT_S3_BUCKET": "x"}).root == root


def test_a_bad_override_is_named_like_its_variable(root):
    assert refused({"BATCHPOINT_ROOT": root}, root="nope").startswith("BATCHPOINT_ROOT='nope'")


# -- roots that cannot be folders, and nothing is created -----------------------------


@pytest.mark.parametrize(
    "password", ["sup3rSECRETvalue", "p@ssw0rdSECRET", "abc/defSECRETpart", "a:b@c/d%2FSECRET"]
)
def test_an_s3_root_with_credentials_is_refused_showing_none(password):
    """Keys in a root's user info went to botocore as a bucket name, whose error and the
    settings' repr showed them; a password with '@' or '/' (common in an AWS secret
    key) escaped the mask (a reviewer's finding)."""
    root = f"s3://AKIAEXAMPLE:{password}@bucket/prefix"
    message = refused({"BATCHPOINT_ROOT": root})
    assert "holds credentials before '@'" in message and "BATCHPOINT_S3_ACCESS_KEY_ID" in message
    assert "SECRET" not in message.replace("BATCHPOINT_S3_SECRET_ACCESS_KEY", "")
    # and wherever such a URI is shown (a savepoint path, a source's location)
    shown = redact_uri(f"list failed at {root}: denied")
    assert "SECRET" not in shown and f"AKIAEXAMPLE:{REDACTED}@bucket/prefix:" in shown


def test_a_store_opened_by_hand_on_a_uri_with_keys_shows_none():
    """A savepoint path or a location given with keys in it never reaches the settings'
    check: the reprs of its reference mask them, and opening it is refused as the
    settings refuse such a root, showing none (a reviewer saw the savepoint commands'
    refusals echo the whole path)."""
    uri = "s3://AKIAEXAMPLE:abc/defSECRET@bucket/p"
    ref = StoreRef.of(uri, {"endpoint_url": "http://127.0.0.1:9"})
    for shown in (repr(ref), str(ref)):
        assert "SECRET" not in shown and f"AKIAEXAMPLE:{REDACTED}@bucket/p" in shown, shown
    with pytest.raises(ConfigError) as refused_open:
        ref.open()
    assert "refused, not shown" in str(refused_open.value)
    assert "defSECRET" not in str(refused_open.value) and "AKIA" not in str(refused_open.value)


def test_a_root_under_a_regular_file_is_refused(tmp_path):
    (tmp_path / "plain").write_text("not a folder")
    uri = (tmp_path / "plain" / "sub" / "root").as_uri()
    message = refused({"BATCHPOINT_ROOT": uri})
    assert message == (
        f"BATCHPOINT_ROOT={uri!r}: {tmp_path / 'plain'} is a file, so no folder can be "
        "created under it"
    )


def test_a_root_that_is_a_regular_file_is_refused(tmp_path):
    (tmp_path / "plain").write_text("not a folder")
    message = refused({"BATCHPOINT_ROOT": (tmp_path / "plain").as_uri()})
    assert "exists and is not a folder" in message


def test_a_savepoint_root_under_a_regular_file_is_refused(tmp_path, root):
    (tmp_path / "plain").write_text("")
    sp = (tmp_path / "plain" / "sp").as_uri()
    message = refused({"BATCHPOINT_ROOT": root, "BATCHPOINT_SAVEPOINT_ROOTS": sp})
    assert message.startswith("BATCHPOINT_SAVEPOINT_ROOTS=") and "is a file" in message


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_root_in_a_read_only_folder_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        assert "is not writable" in refused({"BATCHPOINT_ROOT": (locked / "r").as_uri()})
    finally:
        locked.chmod(0o700)


def test_reading_the_settings_creates_nothing(tmp_path):
    deep = tmp_path / "a" / "b" / "root"
    sp = tmp_path / "sp"
    Settings.from_env({"BATCHPOINT_ROOT": deep.as_uri(), "BATCHPOINT_SAVEPOINT_ROOTS": sp.as_uri()})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ("0", 0),
        ("1048576", 1 << 20),
        ("512KiB", 512 << 10),
        (" 4 mib ", 4 << 20),
        ("1GiB", 1 << 30),
    ],
)
def test_changelog_min_bytes_takes_bytes_or_binary_units(value, size, root):
    env = {"BATCHPOINT_ROOT": root, "BATCHPOINT_CHANGELOG_MIN_BYTES": value}
    assert Settings.from_env(env).checkpoint.changelog_min_bytes == size


# -- the core's own config checks the same bounds ---------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        {"timeout": float("inf")},
        {"timeout": float("nan")},
        {"min_pause": 31 * 86400},
        {"gc_grace": -1},
        {"history_limit": -1},
        {"changelog_min_bytes": -1},
    ],
)
def test_checkpoint_config_refuses_impossible_values(values):
    with pytest.raises(ConfigError, match="checkpoint config"):
        CheckpointConfig(**values)


# -- the Spark job reads them the same way ----------------------------------------------


def test_the_spark_job_reports_a_bad_setting_in_one_line(root, monkeypatch, capsys):
    pytest.importorskip("pyspark")
    from batchpoint.jobs.run_operator import main

    monkeypatch.setenv("BATCHPOINT_ROOT", root)
    monkeypatch.setenv("BATCHPOINT_CHECKPOINT_TIMEOUT", "inf")
    args = ["--pipeline", "demo.payments:pipeline", "--checkpoint-id", "1"]
    assert main([*args, "--operator", "dedup"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: BATCHPOINT_CHECKPOINT_TIMEOUT='inf': not a finite duration"


# -- the README lists every variable ---------------------------------------------------


def test_the_readme_configuration_table_lists_every_variable():
    text = (PROJECT / "README.md").read_text()
    table = text[text.index("## Configuration") :]
    table = table[: table.index("\n## ", 1)] if "\n## " in table[1:] else table
    listed = {word.strip("`,") for word in table.split() if word.startswith("`BATCHPOINT_")}
    assert listed >= KNOWN_VARIABLES, sorted(KNOWN_VARIABLES - listed)


def test_an_at_sign_is_refused_only_where_keys_can_be():
    """The reviewer of the fix above: every '@' in an s3 path was refused, and a
    source root or savepoint folder such as `exports/team@corp/` is a legal key."""
    from batchpoint.storage.redaction import holds_credentials

    for keys in (
        "s3://AKIAEXAMPLE:secret@bucket/p",
        "s3://AKIAEXAMPLE:wJalr/K7MDENG/bPx@bucket/p",  # the secret's '/' splits the bucket
        "s3://TOKEN@bucket/p",
        "s3://Key/With/Slash@bucket/p",
        "s3a://AKIAEXAMPLE:secret@bucket/p",
        "https://user:password@example.com/x",
    ):
        assert holds_credentials(keys), keys
    for key in (
        "s3://landing-bucket/exports/team@corp/events",
        "s3://bucket/savepoints/pre-deploy@2026-12-07",
        "s3://bucket/a@b",
        "file:///tmp/x@y",
        "savepoints/x@y",
    ):
        assert not holds_credentials(key), key


@pytest.mark.parametrize(
    ("master", "reason"),
    [
        ("spark://h:99999", "between 1 and 65535"),
        ("spark://h:0", "between 1 and 65535"),
        ("spark://h", "spark://host:port"),
        ("spark://h1:7077,h2", "spark://host:port"),
        ("spark://h:7077/", "spark://host:port"),
        ("local[0]", "at least 1 thread"),
        ("local[0,3]", "at least 1 thread"),
    ],
)
def test_a_master_spark_refuses_is_refused(master, reason, root):
    message = refused({"BATCHPOINT_ROOT": root, "BATCHPOINT_SPARK_MASTER": master})
    assert message.startswith("BATCHPOINT_SPARK_MASTER") and reason in message, message


@pytest.mark.parametrize(
    "master",
    [
        "local",
        "local[*]",
        "local[1]",
        "local[4,2]",
        "local[*,3]",
        "local-cluster[2,1,1024]",
        "yarn",
        "k8s://https://k8s.example:6443",
        "spark://master:7077",
        "spark://m1:7077,m2:7077",
        "spark://[::1]:7077",
    ],
)
def test_every_master_spark_accepts_is_taken(master, root):
    env = {"BATCHPOINT_ROOT": root, "BATCHPOINT_SPARK_MASTER": master}
    assert Settings.from_env(env).spark_master == master


def test_the_repr_shows_no_password_of_a_root_or_master():
    # Built directly, as a connection's root and master reach Settings (not through
    # BATCHPOINT_ROOT, which refuses credentials).
    settings = Settings("s3://AKIAX:pw-7f3e/sec@bucket/p", {}, "k8s://https://admin:pw-7f3e@k8s")
    assert "pw-7f3e" not in repr(settings)
    assert "bucket/p" in repr(settings) and "k8s" in repr(settings)
