"""The counting store (storage/request_count.py) over the real local store: each call
counted once under its kind, exactly, from many threads at once; and the counts as an
ack records them (protocol/metrics.py)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from batchpoint.errors import ObjectAlreadyExists
from batchpoint.protocol.metrics import StorageRequests, TaskMetrics
from batchpoint.storage.local import LocalObjectStore
from batchpoint.storage.request_count import CountingStore, RequestCount, RequestKind


def test_counts_each_call_by_kind(tmp_path: Path) -> None:
    store = CountingStore(LocalObjectStore(tmp_path / "root"))
    etag = store.create("a/x", b"1")
    with pytest.raises(ObjectAlreadyExists):
        store.create("a/x", b"2")  # refused, still a request
    store.replace("a/x", b"3", etag)
    store.put("a/y", b"4")
    store.get("a/x")
    assert store.head("a/missing") is None
    assert store.exists("a/y")
    assert [o.key for o in store.list("a/")] == ["a/x", "a/y"]
    assert [key for key, _ in store.list_sizes("a/")] == ["a/x", "a/y"]
    assert store.list_dirs("") == ["a/"]
    local = tmp_path / "f.bin"
    local.write_bytes(b"data")
    store.upload_file("b/f", local)
    store.download_file("b/f", tmp_path / "back.bin")
    store.delete("a/y")
    assert store.delete_many(["a/x", "b/f"]) == 2
    assert store.requests.by_kind() == {
        "delete": 2,
        "get": 2,
        "head": 2,
        "list": 3,
        "put": 5,
    }
    assert store.requests.total == 14
    assert list(store.inner.list("")) == []  # it did what it counted


def test_delete_many_counts_s3_batches_of_1000(tmp_path: Path) -> None:
    store = CountingStore(LocalObjectStore(tmp_path))
    store.delete_many(f"k{i}" for i in range(2001))
    store.delete_many([])
    assert store.requests.by_kind() == {"delete": 3}


def test_an_upload_at_the_multipart_threshold_counts_its_parts(tmp_path: Path) -> None:
    class Multipart(LocalObjectStore):
        settings = SimpleNamespace(multipart_threshold=10, multipart_chunksize=4)

    store = CountingStore(Multipart(tmp_path / "root"))
    small, large = tmp_path / "small", tmp_path / "large"
    small.write_bytes(b"123456789")
    large.write_bytes(b"0123456789")
    store.upload_file("s", small)
    store.upload_file("l", large)
    # 10 bytes in parts of 4: create, three parts, complete
    assert store.requests.by_kind() == {"put": 1, "upload_part": 5}


def test_threads_lose_no_count(tmp_path: Path) -> None:
    requests = RequestCount()
    store = CountingStore(LocalObjectStore(tmp_path), requests)

    def work(i: int) -> None:
        store.put(f"t/{i}", b"x")
        store.get(f"t/{i}")
        store.head(f"t/{i}")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(work, range(400)))
    assert requests.by_kind() == {"get": 400, "head": 400, "put": 400}


def test_counts_add_up_from_threads() -> None:
    requests = RequestCount()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: requests.count(RequestKind.LIST), range(1000)))
    requests.add({"put": 3, "get": 0})
    assert requests.by_kind() == {"list": 1000, "put": 3}


def test_an_ack_records_the_kinds_it_knows_and_nothing_when_none() -> None:
    assert StorageRequests.of({}) is None
    assert StorageRequests.of({"put": 0}) is None
    requests = StorageRequests.of({"put": 4, "get": 1, "copy": 9})  # a kind unknown here
    assert requests == StorageRequests(get=1, put=4)
    assert requests is not None and requests.total == 5
    assert TaskMetrics(storage_requests=requests).to_json()["storage_requests"] == {
        "get": 1,
        "put": 4,
    }
    assert "storage_requests" not in TaskMetrics().to_json()
    assert (requests + StorageRequests(put=1, delete=2)).by_kind() == {
        "delete": 2,
        "get": 1,
        "put": 5,
    }
