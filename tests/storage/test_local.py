"""What only the local backend has to get right: its bookkeeping files stay invisible,
its writes are atomic for readers, and keys cannot escape the root directory."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from batchpoint.errors import ConfigError, ObjectNotFound, StorageError
from batchpoint.storage import open_store
from batchpoint.storage.local import LocalObjectStore

SIZE = 2 * 1024 * 1024


def test_leftover_temp_files_are_invisible(local_store: LocalObjectStore) -> None:
    # What a writer killed between writing its temp file and linking it leaves behind.
    (local_store.root / "ck" / "only-temp").mkdir(parents=True)
    (local_store.root / "ck" / "only-temp" / ".bp-tmp-crashed").write_bytes(b"partial")
    (local_store.root / "ck" / ".bp-tmp-crashed").write_bytes(b"partial")
    local_store.put("ck/real", b"x")
    assert [o.key for o in local_store.list()] == ["ck/real"]
    assert local_store.list_dirs("ck/") == []
    local_store.create("ck/only-temp/obj", b"y")  # a leftover never blocks a create
    assert local_store.list_dirs("ck/") == ["ck/only-temp/"]


def test_lock_files_are_not_listed(local_store: LocalObjectStore) -> None:
    etag = local_store.put("cas", b"1")
    local_store.replace("cas", b"2", etag)
    assert (local_store.root / ".bp-locks").is_dir()
    assert [o.key for o in local_store.list()] == ["cas"]
    assert local_store.list_dirs("") == []


def test_writes_leave_no_temp_files(local_store: LocalObjectStore, tmp_path: Path) -> None:
    local_store.put("a/b", b"1")
    local_store.create("a/c", b"2")
    local_store.replace("a/b", b"3", local_store.head("a/b").etag)  # type: ignore[union-attr]
    source = tmp_path / "src"
    source.write_bytes(b"4" * 1000)
    local_store.upload_file("a/d", source)
    names = sorted(p.name for p in (local_store.root / "a").iterdir())
    assert names == ["b", "c", "d"]


@pytest.mark.parametrize("key", ["../outside", "a/../../outside", "/etc/passwd", "a/..", ""])
def test_keys_cannot_escape_the_root(local_store: LocalObjectStore, key: str) -> None:
    for operation in (
        lambda: local_store.put(key, b"x"),
        lambda: local_store.create(key, b"x"),
        lambda: local_store.get(key),
        lambda: local_store.head(key),
        lambda: local_store.delete(key),
    ):
        with pytest.raises(StorageError, match="invalid object key"):
            operation()
    assert not (local_store.root.parent / "outside").exists()


def test_readers_never_see_partial_objects(local_store: LocalObjectStore) -> None:
    """Readers racing creates and overwrites of 2 MiB objects see a whole version or
    nothing, never a prefix of one."""
    versions = {bytes([v]) * SIZE for v in range(1, 4)}
    stop = threading.Event()
    seen: list[int] = []
    bad: list[str] = []

    def read(key: str) -> None:
        while not stop.is_set():
            try:
                data = local_store.get(key).data
            except ObjectNotFound:
                continue
            seen.append(len(data))
            if data not in versions:
                bad.append(f"{key}: {len(data)} bytes")

    readers = [threading.Thread(target=read, args=(k,)) for k in ("created", "overwritten")]
    for reader in readers:
        reader.start()
    try:
        for version in sorted(versions):
            local_store.create("created", version)
            local_store.put("overwritten", version)
            local_store.delete("created")
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert bad == []
    assert seen  # the readers did read while the writes went on


def test_delete_prunes_empty_directories(local_store: LocalObjectStore) -> None:
    local_store.put("x/y/z/obj", b"1")
    local_store.put("x/keep", b"1")
    local_store.delete("x/y/z/obj")
    assert not (local_store.root / "x" / "y").exists()
    assert (local_store.root / "x" / "keep").exists()


def test_file_uri_opens_a_local_store(tmp_path: Path) -> None:
    store = open_store((tmp_path / "root").as_uri())
    assert isinstance(store, LocalObjectStore)
    store.put("k", b"v")
    assert (tmp_path / "root" / "k").read_bytes() == b"v"
    with pytest.raises(ConfigError):
        LocalObjectStore(tmp_path / "absent", create=False)


def test_a_confined_store_lists_no_link_sizes_either(tmp_path: Path) -> None:
    from batchpoint.storage.confined import ConfinedLocalStore

    store = ConfinedLocalStore(tmp_path / "root")
    store.put("a/x", b"abc")
    (tmp_path / "secret").write_bytes(b"outside the root")
    (tmp_path / "root" / "a" / "link").symlink_to(tmp_path / "secret")
    # The plain folder walk would follow the link to a file outside the root.
    assert [o.key for o in LocalObjectStore(tmp_path / "root").list("a/")] == ["a/link", "a/x"]
    assert [o.key for o in store.list("a/")] == ["a/x"]
    assert list(store.list_sizes("a/")) == [("a/x", 3)]


def _unprivileged(argv: list[str]) -> list[str]:
    """`argv` as a user the filesystem's modes bind: root keeps no override of them."""
    import os
    import shutil

    if os.geteuid() != 0:
        return argv
    if shutil.which("setpriv") is None:
        pytest.skip("root without setpriv ignores file modes")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", *argv]


@pytest.mark.parametrize("locked", ["folder", "record"])
def test_a_store_this_user_may_not_read_is_one_line_naming_the_path(
    tmp_path: Path, locked: str
) -> None:
    """The CLI on a store whose pipeline folder or control record this user cannot
    read: one line naming the path, exit 2 (a setting to fix), where the filesystem's
    PermissionError was a traceback (the S3 store reports a refused credential so)."""
    import os
    import subprocess
    import sys

    store = LocalObjectStore(tmp_path / "root")
    store.put("pipelines/p/head.json", b"{}")
    victim = store.root / ("pipelines" if locked == "folder" else "pipelines/p/head.json")
    victim.chmod(0)
    project = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{project}:{project / 'include'}"}
    try:
        run = subprocess.run(
            _unprivileged(
                [sys.executable, "-m", "batchpoint", "--root", store.uri, "--pipeline", "p",
                 "checkpoints", "list"]
            ),
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip
    finally:
        victim.chmod(0o755)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith(f"error: permission denied on '{victim}'"), run.stderr
    assert store.uri in run.stderr


def test_a_confined_store_this_user_may_not_read_says_so_in_one_error(tmp_path: Path) -> None:
    """A reviewer's finding: the confined store (savepoint folders: export, verify,
    restore) overrides every call and lost the plain store's wrapping, so a folder this
    user may not open was a PermissionError traceback instead of one line."""
    import os
    import subprocess
    import sys

    from batchpoint.storage.confined import ConfinedLocalStore

    store = ConfinedLocalStore(tmp_path / "sp")
    store.put("data/part-0.parquet", b"x")
    (store.root / "data").chmod(0)
    script = tmp_path / "probe.py"
    script.write_text(
        "import sys\n"
        "from batchpoint.errors import StorageAccessDenied\n"
        "from batchpoint.storage.confined import ConfinedLocalStore\n"
        "store = ConfinedLocalStore(sys.argv[1])\n"
        "for call in (lambda: store.get('data/part-0.parquet'),\n"
        "             lambda: list(store.list('data/')), lambda: store.put('data/new', b'y')):\n"
        "    try:\n"
        "        call()\n"
        "    except StorageAccessDenied as exc:\n"
        "        print(exc)\n"
    )
    project = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{project}:{project / 'include'}"}
    try:
        run = subprocess.run(
            _unprivileged([sys.executable, str(script), str(store.root)]),
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip
    finally:
        (store.root / "data").chmod(0o755)
    assert run.returncode == 0, run.stderr
    said = run.stdout.splitlines()
    assert len(said) == 3 and all(line.startswith("permission denied on ") for line in said), said
