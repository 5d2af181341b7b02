"""What a Spark Connect client ships, checked without a server: store refs made
portable and pinned to the client's version, session ids, job tags, error lines."""

from __future__ import annotations

import uuid

import pytest

from batchpoint.errors import ConfigError
from batchpoint.spark.remote import (
    PinnedStoreRef,
    WorkerVersionMismatch,
    attempt_tag,
    error_line,
    portable_store_ref,
)
from batchpoint.spark.session import pipeline_session_id, successor_session_id
from batchpoint.storage import StoreRef
from batchpoint.storage.redaction import revealed_options


def test_s3_settings_and_credentials_are_resolved_on_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_REGION"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "client-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "client-secret")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:8333")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-3")
    pinned = portable_store_ref(StoreRef.of("s3://bucket/prefix", {"max_attempts": "3"}))
    assert "client-secret" not in repr(pinned)  # shipped whole, shown masked
    assert revealed_options(dict(pinned.options)) == {
        "access_key_id": "client-key",
        "secret_access_key": "client-secret",
        "endpoint_url": "http://127.0.0.1:8333",
        "region": "eu-west-3",
        "max_attempts": "3",
    }


def test_explicit_settings_win_and_file_roots_carry_no_options() -> None:
    ref = StoreRef.of(
        "s3://bucket/p",
        {
            "endpoint_url": "http://s3:9000",
            "region": "r1",
            "access_key_id": "k",
            "secret_access_key": "s",
        },
    )
    assert dict(portable_store_ref(ref).options) == dict(ref.options)
    assert portable_store_ref(StoreRef.of("file:///tmp/x")).options == ()


def test_a_pinned_ref_opens_only_under_the_same_version(tmp_path) -> None:
    ref = portable_store_ref(StoreRef.of(tmp_path.as_uri()), client_version="0.0.0-other")
    assert isinstance(ref, PinnedStoreRef)
    with pytest.raises(WorkerVersionMismatch, match=r"the client runs 0\.0\.0-other but"):
        ref.open()
    assert isinstance(WorkerVersionMismatch("x"), ConfigError)
    portable_store_ref(StoreRef.of(tmp_path.as_uri())).open()


def test_session_ids_are_per_pipeline_and_server() -> None:
    one = pipeline_session_id("payments", "sc://spark:15002")
    assert one == pipeline_session_id("payments", "sc://spark:15002/;user_agent=x")
    assert one != pipeline_session_id("payments", "sc://other:15002")
    assert one != pipeline_session_id("orders", "sc://spark:15002")
    assert str(uuid.UUID(one)) == one
    assert successor_session_id(one) not in (one, successor_session_id(successor_session_id(one)))
    with pytest.raises(ConfigError, match="must start with sc://"):
        pipeline_session_id("payments", "spark://host:7077")


def test_attempt_tags_are_safe_spark_tags() -> None:
    tag = attempt_tag("pay ments", 7, "dedup,x", "a1")
    assert tag == "batchpoint:pay_ments:7:dedup_x:a1"
    assert "," not in tag


def test_a_worker_side_batchpoint_error_is_one_line() -> None:
    text = (
        "[PYTHON_EXCEPTION] An exception was thrown from the Python worker.\n"
        "Traceback (most recent call last):\n"
        '  File "/x/remote.py", line 50, in open\n'
        "batchpoint.spark.remote.WorkerVersionMismatch: batchpoint version mismatch: a\n"
        "\tat org.apache.spark.api.python.BasePythonRunner\n"
    )
    assert error_line(RuntimeError(text)) == (
        "WorkerVersionMismatch: batchpoint version mismatch: a"
    )
    assert error_line(ValueError("plain\nmore")) == "ValueError: plain"
