"""The ObjectStore contract: every backend must pass every test here, unchanged.

Anything backend-specific is only *observed* here (request counts on the real S3
client through botocore event hooks), never assumed.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest

from batchpoint.errors import (
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    StorageError,
)
from batchpoint.storage.base import ObjectInfo, ObjectStore
from batchpoint.storage.confined import ConfinedLocalStore
from batchpoint.storage.s3 import S3ObjectStore
from support import race_workers

MiB = 1024 * 1024


@pytest.fixture(params=["local", "confined", pytest.param("s3", marks=pytest.mark.s3)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """Every backend, and the local store of confined folders (savepoint roots), which
    walks every path without following links: the contract holds for it too."""
    if request.param == "confined":
        return ConfinedLocalStore(tmp_path / "confined")
    return request.getfixturevalue(f"{request.param}_store")


@contextlib.contextmanager
def s3_calls(store: ObjectStore, *operations: str) -> Iterator[Counter[str] | None]:
    """Count API calls by operation name on the store's real boto3 client (None for
    backends that have no requests to count)."""
    if not isinstance(store, S3ObjectStore):
        yield None
        return
    counts: Counter[str] = Counter()

    def hook(event_name: str, **_: object) -> None:
        counts[event_name.rsplit(".", 1)[-1]] += 1

    events = store.client.meta.events
    for op in operations:
        events.register(f"before-call.s3.{op}", hook)
    try:
        yield counts
    finally:
        for op in operations:
            events.unregister(f"before-call.s3.{op}", hook)


def fill(store: ObjectStore, keys: list[str], workers: int = 16) -> None:
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda k: store.put(k, k.encode()), keys))


# --- single objects --------------------------------------------------------------------


def test_put_get_head_round_trip(store: ObjectStore) -> None:
    data = bytes(range(256)) * 3
    etag = store.put("a/b/c.bin", data)
    got = store.get("a/b/c.bin")
    assert (got.key, got.data, got.etag) == ("a/b/c.bin", data, etag)
    assert store.head("a/b/c.bin") == ObjectInfo("a/b/c.bin", len(data), etag)
    assert [o for o in store.list("a/") if o.key == "a/b/c.bin"] == [store.head("a/b/c.bin")]
    assert store.exists("a/b/c.bin")


def test_empty_object(store: ObjectStore) -> None:
    etag = store.put("empty", b"")
    assert store.get("empty").data == b""
    assert store.head("empty") == ObjectInfo("empty", 0, etag)


def test_missing_object(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound) as info:
        store.get("no/such/key")
    assert info.value.key == "no/such/key"
    assert store.head("no/such/key") is None
    assert not store.exists("no/such/key")


def test_put_overwrites(store: ObjectStore) -> None:
    first = store.put("k", b"one")
    second = store.put("k", b"two")
    assert first != second
    assert store.get("k").data == b"two"
    assert store.head("k").etag == second  # type: ignore[union-attr]


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "..", "a/.."])
def test_invalid_keys_refused(store: ObjectStore, key: str) -> None:
    with pytest.raises(StorageError, match="invalid object key"):
        store.put(key, b"x")


def test_child_uri(store: ObjectStore) -> None:
    assert store.child("x/y") == store.uri.rstrip("/") + "/x/y"
    if isinstance(store, S3ObjectStore):
        assert store.child("x/y") == f"s3://{store.bucket}/{store.prefix}/x/y"


def test_store_survives_pickling(store: ObjectStore) -> None:
    store.put("p", b"before")
    copy = pickle.loads(pickle.dumps(store))
    assert copy.get("p").data == b"before"
    copy.put("p", b"after")
    assert store.get("p").data == b"after"


# --- conditional writes ----------------------------------------------------------------


def test_create_once(store: ObjectStore) -> None:
    etag = store.create("once", b"first")
    assert store.head("once").etag == etag  # type: ignore[union-attr]
    with pytest.raises(ObjectAlreadyExists) as info:
        store.create("once", b"second")
    assert info.value.key == "once"
    assert store.get("once").data == b"first"
    assert store.get("once").etag == etag


def test_create_after_delete(store: ObjectStore) -> None:
    store.create("again", b"1")
    store.delete("again")
    store.create("again", b"2")
    assert store.get("again").data == b"2"


def test_replace_with_current_etag(store: ObjectStore) -> None:
    etag = store.put("cas", b"v1")
    new = store.replace("cas", b"v2", etag)
    got = store.get("cas")
    assert (got.data, got.etag) == (b"v2", new)
    assert store.head("cas").etag == new  # type: ignore[union-attr]
    # The old etag is spent.
    with pytest.raises(PreconditionFailed):
        store.replace("cas", b"v3", etag)
    assert store.get("cas").data == b"v2"


def test_replace_with_wrong_etag(store: ObjectStore) -> None:
    store.put("cas", b"v1")
    wrong = store.put("other", b"something else")
    with pytest.raises(PreconditionFailed) as info:
        store.replace("cas", b"v2", wrong)
    assert info.value.key == "cas"
    assert store.get("cas").data == b"v1"


def test_replace_missing_object(store: ObjectStore) -> None:
    etag = store.put("gone", b"v1")
    store.delete("gone")
    with pytest.raises(PreconditionFailed):
        store.replace("gone", b"v2", etag)
    assert store.head("gone") is None


def test_etags_agree_across_calls(store: ObjectStore) -> None:
    tags = {
        "put": store.put("e/put", b"p"),
        "create": store.create("e/create", b"c"),
    }
    tags["replace"] = store.replace("e/create", b"r", tags["create"])
    listed = {o.key: o.etag for o in store.list("e/")}
    assert listed == {"e/put": tags["put"], "e/create": tags["replace"]}
    assert store.get("e/put").etag == tags["put"]
    assert all('"' not in tag for tag in tags.values())


# --- listing ---------------------------------------------------------------------------


def test_list_is_in_key_order_and_filters_by_prefix(store: ObjectStore) -> None:
    # '-' sorts before '/', so 'd/a-b/...' comes before 'd/a/...' in byte order.
    keys = ["d/a/2", "d/a/1", "d/a-b/x", "d/ab", "d/b/c/d/e", "e/z", "d0"]
    for key in random.sample(keys, len(keys)):
        store.put(key, key.encode())
    listed = list(store.list("d/"))
    assert [o.key for o in listed] == sorted(k for k in keys if k.startswith("d/"))
    assert all(o.size == len(o.key) for o in listed)
    assert [o.key for o in store.list("d/a")] == ["d/a-b/x", "d/a/1", "d/a/2", "d/ab"]
    assert [o.key for o in store.list("d/a/")] == ["d/a/1", "d/a/2"]
    assert [o.key for o in store.list("d")] == sorted(k for k in keys if k.startswith("d"))
    assert [o.key for o in store.list()] == sorted(keys)
    assert list(store.list("nothing/")) == []


def test_list_sizes_gives_what_list_gives(store: ObjectStore) -> None:
    keys = ["s/b", "s/a/1", "s/a-x", "s/c/d/e", "t/1"]
    for n, key in enumerate(random.sample(keys, len(keys))):
        store.put(key, b"x" * n)
    for prefix in ("s/", "s/a", "", "nothing/"):
        listed = [(o.key, o.size) for o in store.list(prefix)]
        assert list(store.list_sizes(prefix)) == listed


def test_list_dirs(store: ObjectStore) -> None:
    for key in ["r/x/1", "r/x/y/2", "r/a-b/1", "r/a/1", "r/file", "top/1"]:
        store.put(key, b"")
    assert store.list_dirs("r/") == ["r/a-b/", "r/a/", "r/x/"]
    assert store.list_dirs("r/x/") == ["r/x/y/"]
    assert store.list_dirs("r/x/y/") == []
    assert store.list_dirs("nothing/") == []
    assert store.list_dirs("") == ["r/", "top/"]


def test_more_than_1000_keys_list_and_delete_in_pages(store: ObjectStore) -> None:
    # 1,100 keys, each in its own 'directory': list, list_dirs and delete_many all need
    # a second page (or batch). One test, because creating the keys is the slow part.
    keys = [f"many/{i:05d}/obj" for i in range(1100)]
    fill(store, [*keys, "many_keep"])
    with s3_calls(store, "ListObjectsV2") as calls:
        listed = [o.key for o in store.list("many/")]
        dirs = store.list_dirs("many/")
    assert listed == keys
    assert dirs == [k.rsplit("/", 1)[0] + "/" for k in keys]
    if calls is not None:
        assert calls["ListObjectsV2"] >= 4  # at least two pages for each listing

    with s3_calls(store, "DeleteObjects", "DeleteObject") as calls:
        assert store.delete_many(iter(keys)) == 1100
    if calls is not None:
        assert calls == Counter({"DeleteObjects": 2})
    assert [o.key for o in store.list("many")] == ["many_keep"]
    assert store.list_dirs("many/") == []


# --- deletes ---------------------------------------------------------------------------


def test_delete_is_idempotent(store: ObjectStore) -> None:
    store.put("del/a/x", b"1")
    store.put("del/b", b"2")
    store.delete("del/a/x")
    store.delete("del/a/x")
    store.delete("del/never-existed")
    assert store.head("del/a/x") is None
    assert [o.key for o in store.list("del/")] == ["del/b"]
    assert store.list_dirs("del/") == []


def test_delete_many(store: ObjectStore) -> None:
    fill(store, ["dm/1", "dm/2", "dm/keep"])
    asked = store.delete_many(k for k in ["dm/1", "dm/2", "dm/missing"])
    assert asked == 3
    assert [o.key for o in store.list("dm/")] == ["dm/keep"]
    assert store.delete_many([]) == 0


# --- large files -----------------------------------------------------------------------


def test_upload_and_download_large_file(store: ObjectStore, tmp_path: Path) -> None:
    source = tmp_path / "big.bin"
    data = os.urandom(12 * MiB + 123)
    source.write_bytes(data)
    with s3_calls(store, "CreateMultipartUpload", "UploadPart", "PutObject") as calls:
        uploaded = store.upload_file("files/big.bin", source)
    assert uploaded == store.head("files/big.bin")
    assert uploaded.size == len(data)
    if calls is not None:
        # 5 MiB parts: 5 + 5 + 2 MiB.
        assert calls == Counter({"CreateMultipartUpload": 1, "UploadPart": 3})

    target = tmp_path / "out" / "copy.bin"
    target.parent.mkdir()
    downloaded = store.download_file("files/big.bin", target)
    assert downloaded == uploaded
    assert target.read_bytes() == data


def test_download_missing_file(store: ObjectStore, tmp_path: Path) -> None:
    with pytest.raises(ObjectNotFound):
        store.download_file("files/none", tmp_path / "x")
    assert not (tmp_path / "x").exists()


# --- races -----------------------------------------------------------------------------


def test_concurrent_create_threads_exactly_one_wins(store: ObjectStore) -> None:
    # Few writers: SeaweedFS queues contended writes to one key on a lock it polls
    # once a second, so every extra writer can add a second.
    threads = 6
    barrier = threading.Barrier(threads)

    def attempt(i: int) -> int | None:
        barrier.wait()
        try:
            store.create("race/threads", f"writer-{i}".encode())
            return i
        except ObjectAlreadyExists:
            return None

    with ThreadPoolExecutor(threads) as pool:
        winners = [i for i in pool.map(attempt, range(threads)) if i is not None]
    assert len(winners) == 1
    assert store.get("race/threads").data == f"writer-{winners[0]}".encode()


def test_concurrent_create_processes_exactly_one_wins(
    store: ObjectStore, process_pool: ProcessPoolExecutor
) -> None:
    blob = pickle.dumps(store)
    start_at = time.time() + 0.3
    futures = [
        process_pool.submit(race_workers.create, blob, "race/processes", f"p{i}", start_at)
        for i in range(3)
    ]
    winners = [tag for f in futures if (tag := f.result()) is not None]
    assert len(winners) == 1
    assert store.get("race/processes").data == winners[0].encode()


def test_concurrent_cas_increments_lose_no_update(
    store: ObjectStore, process_pool: ProcessPoolExecutor
) -> None:
    store.create("race/counter", b"0")
    blob = pickle.dumps(store)
    workers, times = 3, 8
    start_at = time.time() + 0.3
    futures = [
        process_pool.submit(race_workers.increment, blob, "race/counter", times, start_at)
        for _ in range(workers)
    ]
    claims = [value for f in futures for value in f.result()]
    final = int(store.get("race/counter").data)
    assert final == workers * times == len(claims)
    # No two successful swaps claim the same step: every value 1..N was written once.
    assert sorted(claims) == list(range(1, final + 1))


def test_a_prefix_is_not_an_object(store: ObjectStore) -> None:
    store.put("dir/inner/obj", b"x")
    for key in ("dir", "dir/inner"):
        assert store.head(key) is None
        with pytest.raises(ObjectNotFound):
            store.get(key)
        with pytest.raises(PreconditionFailed):
            store.replace(key, b"y", "0" * 32)
    store.delete("dir/inner")  # not an object: nothing to delete, and nothing is lost
    assert store.get("dir/inner/obj").data == b"x"
    # Nor is a key 'beneath' an object.
    below = "dir/inner/obj/below"
    assert store.head(below) is None
    with pytest.raises(ObjectNotFound):
        store.get(below)
    with pytest.raises(PreconditionFailed):
        store.replace(below, b"y", "0" * 32)
    store.delete(below)
    assert store.get("dir/inner/obj").data == b"x"
