"""Secrets stay secret (invariant 13; issue 24, reproduction 7): a store option taken
from `${VAR}` and a literal secret_access_key appear in no repr, no error message and no
log line, while the store still signs with them: against the real SeaweedFS, whose one
identity is the key and secret the `seaweed` fixture configures."""

from __future__ import annotations

import logging
import pickle
from typing import Any

import pytest

from batchpoint.errors import BatchpointError, StorageAccessDenied
from batchpoint.runtime.api import Pipeline
from batchpoint.spark.remote import portable_store_ref
from batchpoint.storage import StoreRef, open_store, probe
from batchpoint.storage.probe import ConditionalWritesUnsupported
from batchpoint.storage.redaction import REDACTED, Secret
from batchpoint.storage.s3 import S3ObjectStore, S3Settings
from devstack.seaweed import SeaweedServer

pytestmark = pytest.mark.s3

# A session token of short-lived keys, in the environment too (SeaweedFS takes a request
# that carries one for an STS key it does not have, so it only shows up in reprs here).
TOKEN = "token-from-the-environment-9f1c2e"
# An endpoint taken from ${VAR} is a value from the environment like any other: masked.
DEAD = "http://127.0.0.9:9"


@pytest.fixture
def env_secrets(seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The server's secret in LANDING_SECRET and a token in LANDING_TOKEN; a source's
    options name them as ${VAR}."""
    monkeypatch.setenv("LANDING_SECRET", seaweed.secret_key)
    monkeypatch.setenv("LANDING_TOKEN", TOKEN)
    return {"secret": seaweed.secret_key, "token": TOKEN}


def options_of(seaweed: SeaweedServer, **more: str) -> dict[str, str]:
    return {
        "endpoint_url": seaweed.endpoint_url,
        "region": seaweed.region,
        "access_key_id": seaweed.access_key,
        "secret_access_key": "${LANDING_SECRET}",
        **more,
    }


def source_ref(seaweed: SeaweedServer, prefix: str, **more: str) -> StoreRef:
    pipeline = Pipeline("p")
    source = pipeline.source(
        "events",
        root=seaweed.uri(prefix),
        schema="id STRING",
        storage_options=options_of(seaweed, **more),
    )
    assert source.location is not None
    return source.location


def leaks(texts: list[str], *secrets: str) -> list[str]:
    return [text for text in texts for secret in secrets if secret in text]


def test_reprs_errors_and_logs_never_show_a_secret(
    seaweed: SeaweedServer,
    env_secrets: dict[str, str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secrets = list(env_secrets.values())
    caplog.set_level(logging.DEBUG, logger="batchpoint")
    seen: list[str] = []

    pipeline = Pipeline("p")
    source = pipeline.source(
        "events",
        root=seaweed.uri("tests/secrets"),
        schema="id STRING",
        storage_options=options_of(seaweed),
    )
    tokens = pipeline.source(
        "tokens",
        root=seaweed.uri("tests/tokens"),
        schema="id STRING",
        storage_options={**options_of(seaweed), "session_token": "${LANDING_TOKEN}"},
    )
    assert source.location is not None and tokens.location is not None
    store = source.location.open()
    assert isinstance(store, S3ObjectStore)
    literal = S3Settings.from_options({**seaweed.storage_options(), "session_token": TOKEN})
    seen += [repr(source), str(source), repr(source.location), repr(store.settings)]
    seen += [repr(tokens), repr(tokens.location.open()), repr(literal), repr(pipeline)]
    seen += [repr(portable_store_ref(source.location)), repr(store)]
    literal_ref = StoreRef.of(seaweed.uri("tests/secrets"), seaweed.storage_options())
    seen += [repr(literal_ref), repr(literal_ref.open())]

    # A bad option: the secret's variable given to an option that is no secret.
    errors: list[BaseException] = []
    for bad in ({"retry_mode": "${LANDING_SECRET}"}, {"endpoint_url": "${LANDING_TOKEN}"}):
        with pytest.raises(BatchpointError) as info:
            source_ref(seaweed, "tests/secrets", **bad).open()
        errors.append(info.value)
    with pytest.raises(BatchpointError) as info:
        S3Settings.from_options({"secret_access_key": seaweed.secret_key})  # no key id
    errors.append(info.value)
    # A bad endpoint: nothing listens there (given literally, and from ${VAR}).
    monkeypatch.setenv("DEAD_ENDPOINT", DEAD)
    for endpoint in ("http://127.0.0.1:9", "${DEAD_ENDPOINT}"):
        dead = source_ref(seaweed, "x", endpoint_url=endpoint, max_attempts="1")
        with pytest.raises(BatchpointError) as info:
            dead.open().get("k")
        errors.append(info.value)
    secrets.append(DEAD)
    # Refused credentials: the key with another secret.
    monkeypatch.setenv("LANDING_SECRET", "not-the-secret-4b1d")
    with pytest.raises(StorageAccessDenied) as info:
        source_ref(seaweed, "tests/secrets").open().get("k")
    errors.append(info.value)
    secrets.append("not-the-secret-4b1d")
    # A refused probe: the endpoint seems to ignore conditional writes.
    monkeypatch.setattr(probe, "_PASSED", set())
    refusing = pickle.loads(pickle.dumps(store))
    refusing.client.meta.events.register("before-sign.s3.PutObject", _strip_conditions)
    with pytest.raises(ConditionalWritesUnsupported) as info:
        refusing.create("ack", b"x")
    errors.append(info.value)

    seen += [str(e) for e in errors] + [repr(e) for e in errors]
    seen += [r.getMessage() for r in caplog.records]
    assert not leaks(seen, *secrets), leaks(seen, *secrets)
    assert REDACTED in repr(source.location) and REDACTED in repr(literal)
    assert str(errors[0]).startswith(f"S3 option retry_mode='{REDACTED}' must be one of")


def _strip_conditions(request: Any, **_: Any) -> None:
    for header in ("If-None-Match", "If-Match"):
        if header in request.headers:
            del request.headers[header]


def test_the_store_still_signs_with_the_secret_wherever_it_goes(
    seaweed: SeaweedServer, env_secrets: dict[str, str]
) -> None:
    ref = source_ref(seaweed, "tests/secrets-work")
    assert dict(ref.options)["secret_access_key"] == Secret(seaweed.secret_key)
    # What Spark executors (pickled) and Connect servers (made portable) receive.
    for shipped in (ref, pickle.loads(pickle.dumps(ref)), portable_store_ref(ref)):
        store = open_store(shipped.uri, dict(shipped.options))
        assert isinstance(store, S3ObjectStore)
        credentials = store.client._request_signer._credentials
        assert credentials.secret_key == seaweed.secret_key
        store.put("k", b"signed")
        assert store.get("k").data == b"signed"
        store.delete("k")
