"""Storage credentials from an Airflow AWS connection, resolved by the Amazon provider's
AwsBaseHook, against the session's real SeaweedFS: the `batchpoint_storage` connection of
earlier versions, a profile, an assumed role (SeaweedFS answers STS too), and the
short-lived credentials handed on to a child process the way spark-submit gets them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from batchpoint.airflow.config import AirflowDeployment
from batchpoint.airflow.hooks import BatchpointHook, SparkSubmitLauncher, settings_from_connection
from batchpoint.errors import ConfigError, StorageAccessDenied
from batchpoint.settings import Settings
from batchpoint.storage.redaction import Secret, revealed_options

pytestmark = [pytest.mark.airflow, pytest.mark.s3]


def conn(**fields: Any) -> Any:
    extra = fields.pop("extra", {})
    defaults = {"host": None, "port": None, "schema": None, "login": None, "password": None}
    return SimpleNamespace(**{**defaults, **fields}, extra_dejson=extra)


@pytest.fixture
def no_aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No AWS_* credentials, config or instance role: only what a test configures.
    Returns the AWS config folder a test may write profiles into."""
    import os

    for name in list(os.environ):
        if name.startswith(("AWS_", "BATCHPOINT_S3_")):
            monkeypatch.delenv(name)
    aws = tmp_path / "aws"
    aws.mkdir()
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(aws / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(aws / "config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return aws


@pytest.fixture
def root(seaweed: Any) -> str:
    return seaweed.uri(f"tests/conn-{uuid.uuid4().hex[:8]}")


def base(root: str) -> Settings:
    return Settings(root, {}, "local[1]")


def round_trip(settings: Settings) -> None:
    """Open the store the settings describe and make a conditional write there (which
    also runs the probe) and read it back."""
    store = settings.store_ref.open()
    key = f"conn-check/{uuid.uuid4().hex}"
    store.create(key, b"ok")
    assert store.get(key).data == b"ok"
    store.delete(key)


def test_the_old_storage_connection_keeps_working(seaweed: Any, root: str, no_aws_environment):
    old = conn(
        host=seaweed.endpoint_url,
        login=seaweed.access_key,
        password=seaweed.secret_key,
        extra={"root": root, "region": seaweed.region},
    )
    settings = settings_from_connection(old, base("file:///tmp/unused"), "batchpoint_storage")
    assert settings.root == root
    assert revealed_options(settings.store_options) == {**seaweed.storage_options()}
    round_trip(settings)
    # The endpoint may be in extra endpoint_url instead of host.
    moved = conn(
        login=seaweed.access_key,
        password=seaweed.secret_key,
        extra={"endpoint_url": seaweed.endpoint_url, "region_name": seaweed.region},
    )
    round_trip(settings_from_connection(moved, base(root), "batchpoint_storage"))


def test_a_profile_is_resolved_by_the_provider_and_handed_on_as_keys(
    seaweed: Any, root: str, no_aws_environment: Path
):
    (no_aws_environment / "credentials").write_text(
        f"[bp-seaweed]\naws_access_key_id = {seaweed.access_key}\n"
        f"aws_secret_access_key = {seaweed.secret_key}\n"
    )
    profile = conn(
        extra={
            "endpoint_url": seaweed.endpoint_url,
            "region": seaweed.region,
            "profile_name": "bp-seaweed",
        }
    )
    settings = settings_from_connection(profile, base(root), "bp_profile")
    options = revealed_options(settings.store_options)
    assert (options["access_key_id"], options["secret_access_key"]) == (
        seaweed.access_key,
        seaweed.secret_key,
    )
    assert "profile" not in options and "session_token" not in options
    round_trip(settings)
    # Resolved once per process: the next poke or UI request needs neither the profile
    # file nor (for a role) another STS call, and gets the very same keys.
    (no_aws_environment / "credentials").unlink()
    again = settings_from_connection(profile, base(root), "bp_profile")
    assert revealed_options(again.store_options) == options
    assert again.store_ref.open() is settings.store_ref.open()


def test_an_unknown_profile_is_a_one_line_error(seaweed: Any, root: str, no_aws_environment):
    missing = conn(extra={"endpoint_url": seaweed.endpoint_url, "profile_name": "nobody"})
    with pytest.raises(ConfigError) as info:
        settings_from_connection(missing, base(root), "bp_profile")
    message = str(info.value)
    assert message.startswith("Airflow connection 'bp_profile': could not get AWS credentials")
    assert "profile 'nobody'" in message and "\n" not in message


def test_role_arn_is_no_longer_rejected_but_assumed(seaweed: Any, root: str, no_aws_environment):
    # SeaweedFS serves STS on its S3 port and knows no such role: the refusal shows that
    # the provider really went to STS with the connection's keys to assume it.
    role = "arn:aws:iam::000000000000:role/bp-test-role"
    assuming = conn(
        login=seaweed.access_key,
        password=seaweed.secret_key,
        extra={
            "endpoint_url": seaweed.endpoint_url,
            "region": seaweed.region,
            "role_arn": role,
            "assume_role_kwargs": {"DurationSeconds": 900},
            "service_config": {"sts": {"endpoint_url": seaweed.endpoint_url}},
        },
    )
    with pytest.raises(ConfigError) as info:
        settings_from_connection(assuming, base(root), "bp_role")
    message = str(info.value)
    assert f"could not get AWS credentials by assuming role {role}" in message
    assert "AssumeRole" in message and "not authorized" in message and "\n" not in message


def test_short_lived_credentials_reach_the_spark_job_environment(
    seaweed: Any, root: str, no_aws_environment
):
    token = "session-token-from-sts"
    session = conn(
        host=seaweed.endpoint_url,
        extra={
            "region": seaweed.region,
            "aws_access_key_id": seaweed.access_key,
            "aws_secret_access_key": seaweed.secret_key,
            "aws_session_token": token,
        },
    )
    settings = settings_from_connection(session, base(root), "bp_session")
    assert settings.store_options["session_token"] == Secret(token)
    assert token not in repr(settings)  # shown masked, handed on whole
    launcher = SparkSubmitLauncher(
        AirflowDeployment.from_env({"BATCHPOINT_ROOT": root, "BATCHPOINT_SPARK_MODE": "submit"}),
        "m:p",
    )
    child = launcher.environment(settings, {"PATH": "/usr/bin:/bin"})
    assert child["BATCHPOINT_S3_SESSION_TOKEN"] == token
    argv = launcher.command(settings, 1, "op", "a-1")
    assert token not in " ".join(argv)
    # A child process rebuilds the same settings from that environment and signs with
    # the token: SeaweedFS, which issued no such token, refuses it (without the token the
    # same keys are accepted, as the other tests show).
    again = Settings.from_env(child)
    assert dict(again.store_options) == dict(settings.store_options)
    with pytest.raises(StorageAccessDenied, match="short-lived credentials 'batc"):
        again.store_ref.open().get("anything")
    script = (
        "from batchpoint.settings import Settings\n"
        "from batchpoint.errors import StorageAccessDenied\n"
        "try:\n"
        "    Settings.from_env().store_ref.open().get('anything')\n"
        "except StorageAccessDenied as e:\n"
        "    print('refused:', e)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script],
        env=child,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert run.stdout.startswith("refused:") and "InvalidAccessKeyId" in run.stdout


def test_without_credentials_in_the_connection_the_environment_keys_stay(
    seaweed: Any, root: str, no_aws_environment
):
    env_keys = Settings(root, seaweed.storage_options(), "local[1]")
    endpoint_only = conn(host=seaweed.endpoint_url, extra={"region": seaweed.region})
    settings = settings_from_connection(endpoint_only, env_keys, "bp_endpoint")
    assert revealed_options(settings.store_options) == seaweed.storage_options()
    # Nothing anywhere: no credentials resolved, and the store says how to set them.
    bare = settings_from_connection(endpoint_only, base(root), "bp_endpoint")
    assert "access_key_id" not in bare.store_options
    with pytest.raises(StorageAccessDenied, match="no usable AWS credentials"):
        bare.store_ref.open().get("anything")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"extra": {"bucket": "x"}}, r"unknown extra field\(s\) \['bucket'\]"),
        ({"password": "SK"}, "login .* and password .* must be given together"),
        ({"extra": {"assume_role_method": "telepathy", "role_arn": "r"}}, "telepathy"),
    ],
)
def test_a_bad_aws_connection_is_named(fields: dict[str, Any], message: str, no_aws_environment):
    with pytest.raises(ConfigError, match=f"Airflow connection 'bp_bad'.*{message}"):
        settings_from_connection(conn(**fields), Settings("file:///tmp/x"), "bp_bad")


def test_the_hook_takes_an_aws_conn_id(
    seaweed: Any, root: str, monkeypatch: pytest.MonkeyPatch, no_aws_environment: Path
):
    (no_aws_environment / "config").write_text(
        f"[profile bp-cfg]\naws_access_key_id = {seaweed.access_key}\n"
        f"aws_secret_access_key = {seaweed.secret_key}\nregion = {seaweed.region}\n"
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_BP_AWS_STORAGE",
        json.dumps(
            {
                "conn_type": "aws",
                "extra": {
                    "root": root,
                    "endpoint_url": seaweed.endpoint_url,
                    "profile_name": "bp-cfg",
                },
            }
        ),
    )
    hook = BatchpointHook(aws_conn_id="bp_aws_storage")
    assert hook.aws_conn_id == "bp_aws_storage"
    settings = hook.get_settings()
    assert settings.store_options["access_key_id"] == seaweed.access_key
    round_trip(settings)
    from_trigger = asyncio.run(hook.aget_settings())
    assert dict(from_trigger.store_options) == dict(settings.store_options)
