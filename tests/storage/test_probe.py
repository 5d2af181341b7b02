"""The start-up probe of conditional writes, against a real SeaweedFS (which honours
them) and against the same server behind fault injectors that make it ignore them: a
botocore hook that strips the condition headers from every PutObject on the way out,
and an ObjectStore wrapper whose conditional writes are plain puts."""

from __future__ import annotations

import pickle
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from batchpoint.storage import open_store, probe
from batchpoint.storage.base import ObjectInfo, ObjectStore, StoredObject
from batchpoint.storage.probe import ConditionalWritesUnsupported, probe_conditional_writes
from batchpoint.storage.s3 import S3ObjectStore
from devstack.seaweed import SeaweedServer

pytestmark = pytest.mark.s3

MakeStore = Callable[..., S3ObjectStore]


@pytest.fixture(autouse=True)
def unprobed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every endpoint unprobed for this test only: the session's other tests keep the
    probe done once at start-up, so their injected faults never meet it."""
    monkeypatch.setattr(probe, "_PASSED", set())


def puts(store: S3ObjectStore) -> list[str]:
    """The keys of every PutObject the store sends from now on."""
    keys: list[str] = []
    store.client.meta.events.register(
        "before-parameter-build.s3.PutObject", lambda params, **_: keys.append(params["Key"])
    )
    return keys


def ignore_conditions(store: S3ObjectStore, *headers: str) -> None:
    """Fault injector: the endpoint never sees these condition headers, as if it ignored
    them. Removed before signing, so the request is otherwise exactly what S3 gets."""

    def strip(request: Any, **_: Any) -> None:
        for header in headers:
            if header in request.headers:
                del request.headers[header]

    store.client.meta.events.register("before-sign.s3.PutObject", strip)


def probe_objects(seaweed: SeaweedServer, store: S3ObjectStore) -> list[str]:
    """Probe objects left under the store's root, seen by a plain client of the server."""
    listing = seaweed.client().list_objects_v2(
        Bucket=seaweed.bucket, Prefix=f"{store.prefix}/_probe/"
    )
    return [o["Key"] for o in listing.get("Contents", [])]


def test_seaweedfs_passes_once_per_endpoint(
    make_s3_store: MakeStore, seaweed: SeaweedServer
) -> None:
    store = make_s3_store()
    sent = puts(store)
    probe_conditional_writes(store)
    # create, refused create, replace, refused stale replace: then cached.
    assert len(sent) == 4 and all(key.startswith(f"{store.prefix}/_probe/") for key in sent)
    assert probe_objects(seaweed, store) == []  # the probe cleans up after itself
    probe_conditional_writes(store)
    other = make_s3_store()  # another prefix on the same endpoint and bucket
    other_sent = puts(other)
    other.create("k", b"v")
    assert len(sent) == 4 and other_sent == [f"{other.prefix}/k"]


def test_first_conditional_write_probes_then_writes(make_s3_store: MakeStore) -> None:
    store = make_s3_store()
    sent = puts(store)
    store.put("plain", b"x")  # unconditional writes need no probe
    assert sent == [f"{store.prefix}/plain"]
    store.create("once", b"1")
    assert len(sent) == 6 and sent[-1] == f"{store.prefix}/once"
    store.replace("once", b"2", store.head("once").etag)  # type: ignore[union-attr]
    assert len(sent) == 7


def test_read_only_use_never_probes(make_s3_store: MakeStore, seaweed: SeaweedServer) -> None:
    writer = make_s3_store(probe_conditional_writes="false")
    writer.create("a/b", b"1")
    reader = make_s3_store(prefix=writer.prefix)
    sent = puts(reader)
    assert reader.get("a/b").data == b"1"
    assert reader.head("a/b") is not None
    assert [o.key for o in reader.list("")] == ["a/b"]
    assert reader.list_dirs("") == ["a/"]
    assert sent == [] and probe_objects(seaweed, reader) == []


def test_endpoint_ignoring_if_none_match_is_refused(
    make_s3_store: MakeStore, seaweed: SeaweedServer
) -> None:
    store = make_s3_store()
    ignore_conditions(store, "If-None-Match", "If-Match")
    with pytest.raises(ConditionalWritesUnsupported) as info:
        store.create("ack", b"mine")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"storage endpoint {seaweed.endpoint_url} does not honour ")
    assert "If-None-Match: * (a second create of the same key was accepted)" in message
    assert store.head("ack") is None  # refused before anything was written
    assert probe_objects(seaweed, store) == []
    with pytest.raises(ConditionalWritesUnsupported):  # not cached as sound
        store.create("ack", b"mine")


def test_endpoint_ignoring_if_match_is_refused(
    make_s3_store: MakeStore, seaweed: SeaweedServer
) -> None:
    store = make_s3_store()
    ignore_conditions(store, "If-Match")
    with pytest.raises(ConditionalWritesUnsupported, match=r"does not honour If-Match \(a replace"):
        store.create("ack", b"mine")
    assert probe_objects(seaweed, store) == []


def test_concurrent_first_writers_share_one_probe(make_s3_store: MakeStore) -> None:
    store = make_s3_store()
    sent = puts(store)
    barrier = threading.Barrier(8)

    def first_write(i: int) -> str:
        barrier.wait()
        return store.create(f"k{i}", b"v")

    with ThreadPoolExecutor(8) as pool:
        assert len(list(pool.map(first_write, range(8)))) == 8
    assert sum("/_probe/" in key for key in sent) == 4


def test_open_store_probes_and_a_pickled_copy_reuses_the_result(seaweed: SeaweedServer) -> None:
    prefix = f"tests/probe-open-{uuid.uuid4().hex[:8]}"
    store = open_store(seaweed.uri(prefix), seaweed.storage_options())
    assert isinstance(store, S3ObjectStore)
    store.create("first", b"1")
    copy = pickle.loads(pickle.dumps(store))
    sent = puts(copy)
    copy.create("second", b"2")
    assert sent == [f"{prefix}/second"]  # the process already knows this endpoint
    store.delete_many(["first", "second"])


class IgnoringConditions(ObjectStore):
    """Fault injector around a real store: conditional writes become plain puts."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.uri = inner.uri

    def create(self, key: str, data: bytes) -> str:
        return self.inner.put(key, data)

    def replace(self, key: str, data: bytes, etag: str) -> str:
        return self.inner.put(key, data)

    def get(self, key: str) -> StoredObject:
        return self.inner.get(key)

    def head(self, key: str) -> ObjectInfo | None:
        return self.inner.head(key)

    def put(self, key: str, data: bytes) -> str:
        return self.inner.put(key, data)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self.inner.list(prefix)

    def list_dirs(self, prefix: str) -> list[str]:
        return self.inner.list_dirs(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def delete_many(self, keys: Iterable[str]) -> int:
        return self.inner.delete_many(keys)

    def upload_file(self, key: str, path: Path) -> ObjectInfo:
        return self.inner.upload_file(key, path)

    def download_file(self, key: str, path: Path) -> ObjectInfo:
        return self.inner.download_file(key, path)


def test_wrapped_store_ignoring_conditions_is_refused(
    s3_store: S3ObjectStore, seaweed: SeaweedServer
) -> None:
    probe_conditional_writes(s3_store)  # the real store passes...
    with pytest.raises(ConditionalWritesUnsupported, match="If-None-Match"):
        probe_conditional_writes(IgnoringConditions(s3_store))  # ...the wrapper does not
    assert probe_objects(seaweed, s3_store) == []


def test_local_store_passes(local_store: ObjectStore) -> None:
    probe_conditional_writes(local_store)
    assert list(local_store.list("")) == []
