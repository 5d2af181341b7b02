"""The local stores' conditional writes between real processes, and the files they must
not leave behind: a replace whose etag check passed never lands after another process's
delete or create of the key; a dead writer's temp file never keeps a collected folder;
a folder pruned under a writer is made again; keys the filesystem would alias are
refused (invariants 12 and 13)."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from batchpoint.errors import ObjectNotFound, PreconditionFailed, StorageError
from batchpoint.storage.confined import ConfinedLocalStore
from batchpoint.storage.local import LocalObjectStore

CTX = multiprocessing.get_context("fork")
KINDS = ["local", "confined"]
KEY = "cascades/active.json"
#: How long a paused replace waits for the other process to change the key: without the
#: key lock, that change lands within milliseconds; with it, it waits for the replace.
WINDOW = 1.0
JOIN = 15.0


class PausedLocal(LocalObjectStore):
    """A real local store whose replace pauses after its etag check (it writes its temp
    file only after the check) until another process has changed the key, or WINDOW."""

    compared: Any
    changed: Any

    def _write_temp(self, directory: Path, source: bytes | Path) -> Path:
        self.compared.set()
        self.changed.wait(WINDOW)
        return super()._write_temp(directory, source)


class PausedConfined(ConfinedLocalStore):
    compared: Any
    changed: Any

    def _temp_in(self, fd: int, source: Any) -> str:
        self.compared.set()
        self.changed.wait(WINDOW)
        return super()._temp_in(fd, source)


def _store(kind: str, root: Path) -> LocalObjectStore:
    return ConfinedLocalStore(root) if kind == "confined" else LocalObjectStore(root)


def _temps(root: Path) -> list[str]:
    return [
        os.path.relpath(os.path.join(d, name), root)
        for d, _, names in os.walk(root)
        for name in names
        if name.startswith(".bp-tmp-")
    ]


# --- D1: replace linearises with delete, create and put --------------------------------


def _paused_replace(
    kind: str, root: Path, etag: str, compared: Any, changed: Any, out: Any
) -> None:
    store = (PausedConfined if kind == "confined" else PausedLocal)(root)
    store.compared, store.changed = compared, changed
    try:
        store.replace(KEY, b"stale update of the first record", etag)
        out.put("replaced")
    except PreconditionFailed:
        out.put("refused")


def _delete_then_create(kind: str, root: Path, recreate: bool, compared: Any, changed: Any) -> None:
    compared.wait(JOIN)
    store = _store(kind, root)
    store.delete(KEY)
    if recreate:
        store.create(KEY, b"second record")
    changed.set()


@pytest.mark.parametrize("recreate", [False, True], ids=["delete", "delete-then-create"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_replace_past_its_etag_check_never_lands_after_a_delete(
    tmp_path: Path, kind: str, recreate: bool
) -> None:
    store = _store(kind, tmp_path / "store")
    etag = store.create(KEY, b"first record")
    compared, changed, out = CTX.Event(), CTX.Event(), CTX.Queue()
    procs = [
        CTX.Process(target=_paused_replace, args=(kind, store.root, etag, compared, changed, out)),
        CTX.Process(
            target=_delete_then_create, args=(kind, store.root, recreate, compared, changed)
        ),
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(JOIN)
    assert [proc.exitcode for proc in procs] == [0, 0]
    assert out.get(timeout=1) in ("replaced", "refused")  # either order is linearisable
    if recreate:
        assert store.get(KEY).data == b"second record"  # a create is write-once
    else:
        assert store.head(KEY) is None  # a deleted record never comes back


def _race_replacer(kind: str, root: Path, rounds: int, data: bytes, barrier: Any) -> None:
    store, etag = _store(kind, root), hashlib.md5(data, usedforsecurity=False).hexdigest()
    for _ in range(rounds):
        barrier.wait()
        with contextlib.suppress(PreconditionFailed):
            store.replace(KEY, b"stale", etag)
        barrier.wait()


def _race_deleter(kind: str, root: Path, rounds: int, barrier: Any) -> None:
    store = _store(kind, root)
    for _ in range(rounds):
        barrier.wait()
        store.delete(KEY)
        barrier.wait()


@pytest.mark.parametrize("kind", KINDS)
def test_racing_replace_and_delete_never_resurrect_the_record(tmp_path: Path, kind: str) -> None:
    """No pause injected: a replace racing a delete either fails or is deleted after."""
    store, rounds, data = _store(kind, tmp_path / "store"), 200, b"r" * (256 << 10)
    barrier = CTX.Barrier(3, timeout=JOIN)
    procs = [
        CTX.Process(target=_race_replacer, args=(kind, store.root, rounds, data, barrier)),
        CTX.Process(target=_race_deleter, args=(kind, store.root, rounds, barrier)),
    ]
    for proc in procs:
        proc.start()
    resurrected = 0
    for _ in range(rounds):
        store.put(KEY, data)
        barrier.wait()
        barrier.wait()
        if store.head(KEY) is not None:
            resurrected += 1
    for proc in procs:
        proc.join(JOIN)
    assert [proc.exitcode for proc in procs] == [0, 0]
    assert resurrected == 0


# --- D2: temp files of failed or dead writers ------------------------------------------


def _failing(exc: OSError) -> Callable[..., None]:
    def fail(*_args: Any, **_kwargs: Any) -> None:
        raise exc

    return fail


@pytest.mark.parametrize("op", ["put", "replace", "upload_file", "create"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_rename_or_link_leaves_no_temp_file(
    tmp_path: Path, kind: str, op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(kind, tmp_path / "store")
    etag = store.put("ck/1/obj", b"old")
    source = tmp_path / "source"
    source.write_bytes(b"new")
    calls = {
        "put": lambda: store.put("ck/1/obj", b"new"),
        "replace": lambda: store.replace("ck/1/obj", b"new", etag),
        "upload_file": lambda: store.upload_file("ck/1/obj", source),
        "create": lambda: store.create("ck/1/other", b"new"),
    }
    full = OSError(errno.ENOSPC, "No space left on device")
    for name in ("replace", "rename", "link"):  # the step that installs the temp file
        monkeypatch.setattr(os, name, _failing(full))
    with pytest.raises(OSError, match="No space left"):
        calls[op]()
    monkeypatch.undo()
    assert _temps(store.root) == []
    assert store.get("ck/1/obj").data == b"old"


def _writer_killed_at_fsync(kind: str, root: Path, key: str, stuck: Any) -> None:
    def hang(_fd: int) -> None:  # the temp is written, not yet renamed: the crash window
        stuck.set()
        threading.Event().wait(JOIN)  # killed long before this ends

    os.fsync = hang
    _store(kind, root).put(key, b"new" * 1000)


def _kill_a_writer_of(kind: str, root: Path, key: str) -> None:
    stuck = CTX.Event()
    proc = CTX.Process(target=_writer_killed_at_fsync, args=(kind, root, key, stuck))
    proc.start()
    assert stuck.wait(JOIN)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(JOIN)


@pytest.mark.parametrize("kind", KINDS)
def test_a_dead_writers_temp_file_goes_when_its_folder_is_collected(
    tmp_path: Path, kind: str
) -> None:
    store = _store(kind, tmp_path / "store")
    dead, live = "p/chk-000001/state/part-0", "p/chk-000002/state/part-0"
    for key in (dead, live):
        store.put(key, b"old")
        _kill_a_writer_of(kind, store.root, key)
    assert len(_temps(store.root)) == 2
    (old_temp,) = [t for t in _temps(store.root) if t.startswith("p/chk-000001/")]
    two_hours_ago = time.time() - 7200
    os.utime(store.root / old_temp, (two_hours_ago, two_hours_ago))

    store.delete(dead)  # what GC does to every listed object of a collected checkpoint
    store.delete(live)
    assert not (store.root / "p" / "chk-000001").exists()
    # A temp file seconds old may be a live writer's: it stays, and so does its folder.
    assert [t.split("/")[:3] for t in _temps(store.root)] == [["p", "chk-000002", "state"]]
    assert list(store.list("p/")) == []


# --- D3: keys the filesystem would alias, or could not hold ----------------------------

ALIASING = [".", "./y", "a/./b", "a//b", "x/", "n\x00ul", ".bp-locks/z", ".bp-tmp-x", "a/.bp-tmp-y"]


@pytest.mark.parametrize("key", ALIASING)
@pytest.mark.parametrize("kind", KINDS)
def test_keys_the_filesystem_would_alias_are_refused(tmp_path: Path, kind: str, key: str) -> None:
    store = _store(kind, tmp_path / "store")
    store.put("a/b", b"1")
    source = tmp_path / "source"
    source.write_bytes(b"x")
    before = sorted(os.listdir(tmp_path))
    for operation in (
        lambda: store.put(key, b"x"),
        lambda: store.create(key, b"x"),
        lambda: store.replace(key, b"x", "0" * 32),
        lambda: store.get(key),
        lambda: store.head(key),
        lambda: store.delete(key),
        lambda: store.upload_file(key, source),
        lambda: store.download_file(key, tmp_path / "copy"),
    ):
        with pytest.raises(StorageError, match="invalid object key"):
            operation()
    assert sorted(os.listdir(tmp_path)) == before  # nothing written beside the root
    assert [o.key for o in store.list()] == ["a/b"]
    assert store.get("a/b").data == b"1"


@pytest.mark.parametrize(
    ("kind", "key"),
    [
        ("local", "L" * 300),
        ("confined", "L" * 300),
        # The confined store walks folder by folder, so only a part can be too long there.
        ("local", "d/" + "seg/" * 1200 + "f"),
    ],
    ids=["local-part", "confined-part", "local-path"],
)
def test_a_key_too_long_for_the_filesystem_is_a_storage_error(
    tmp_path: Path, kind: str, key: str
) -> None:
    store = _store(kind, tmp_path / "store")
    for operation in (lambda: store.put(key, b"x"), lambda: store.create(key, b"x")):
        with pytest.raises(StorageError, match="too long for the filesystem"):
            operation()
    with pytest.raises((ObjectNotFound, StorageError)):
        store.get(key)
    assert _temps(store.root) == []


# --- D4: a folder pruned under a writer ------------------------------------------------


def _pruned_under_mkdir(target: Path, fault: str) -> Callable[..., None]:
    """os.mkdir, with another process's delete pruning `target` (or its parent) at the
    one moment that breaks `Path.mkdir(parents=True, exist_ok=True)`, once."""
    real, calls = os.mkdir, {"n": 0}

    def mkdir(path: Any, mode: int = 0o777, **kwargs: Any) -> None:
        if Path(path) != target or calls["n"] >= 2:
            return real(path, mode, **kwargs)
        calls["n"] += 1
        if fault == "made-then-pruned":  # made by another writer, pruned before is_dir()
            calls["n"] = 2
            real(path, mode)
            os.rmdir(path)
            raise FileExistsError(errno.EEXIST, "File exists", str(path))
        if calls["n"] == 2:  # the parent mkdir's walk just made is pruned again
            os.rmdir(target.parent)
        return real(path, mode, **kwargs)

    return mkdir


@pytest.mark.parametrize("fault", ["made-then-pruned", "parent-pruned"])
def test_a_write_retries_when_a_delete_prunes_its_folder(
    tmp_path: Path, fault: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalObjectStore(tmp_path / "store")
    store.put("ck/keep", b"1")
    target = store.root / "ck" / "7" / "acks"
    if fault == "made-then-pruned":
        store.put("ck/7/other", b"1")
    monkeypatch.setattr(os, "mkdir", _pruned_under_mkdir(target, fault))
    store.create("ck/7/acks/a", b"ack")
    monkeypatch.undo()
    assert store.get("ck/7/acks/a").data == b"ack"


def _ack_writer(kind: str, root: Path, me: int, rounds: int, out: Any) -> None:
    store, errors = _store(kind, root), []
    for n in range(rounds):
        try:
            store.create(f"ck/7/acks/w{me}-{n}", b"ack")
            store.put("ck/7/acks/a", b"x")
        except Exception as exc:  # every failure is the finding here
            errors.append(f"{type(exc).__name__}: {exc}")
        store.delete(f"ck/7/acks/w{me}-{n}")
        store.delete("ck/7/acks/a")  # the folder empties: the other writer's may be pruned
    out.put(errors)


@pytest.mark.parametrize("kind", KINDS)
def test_writers_and_deleters_of_one_folder_never_fail(tmp_path: Path, kind: str) -> None:
    store, out = _store(kind, tmp_path / "store"), CTX.Queue()
    procs = [
        CTX.Process(target=_ack_writer, args=(kind, store.root, me, 200, out)) for me in range(3)
    ]
    for proc in procs:
        proc.start()
    errors = [e for _ in procs for e in out.get(timeout=JOIN)]
    for proc in procs:
        proc.join(JOIN)
    assert errors == []
    assert list(store.list()) == []
