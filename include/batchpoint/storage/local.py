"""The embedded default backend: a directory on a local (or shared POSIX) filesystem.

Create-once is a hard link of a fully written temp file onto the final name (link fails
if the name exists, and readers never see a half-written object); compare-and-swap
holds an exclusive flock on a per-directory lock file while it compares and renames.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import inspect
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

from batchpoint.errors import (
    ConfigError,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    StorageAccessDenied,
    StorageError,
)
from batchpoint.storage.base import ListedSize, ObjectInfo, ObjectStore, StoredObject

_Method = TypeVar("_Method", bound=Callable[..., Any])
_TMP_PREFIX = ".bp-tmp-"
_LOCK_DIR = ".bp-locks"


def _etag(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _file_etag(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_creatable(root: Path) -> None:
    """The nearest existing ancestor must be a folder, else no write could ever work."""
    for parent in root.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(
                    f"storage root '{root}' cannot be created: '{parent}' is not a directory"
                )
            return


def _access_checked(method: _Method) -> _Method:
    """`method` raising StorageAccessDenied, naming the path and the store, where the
    filesystem refused this user (a folder or record another user owns, mode 000): as
    the S3 store reports a refused credential, not as a traceback."""

    def denied(store: LocalObjectStore, exc: PermissionError) -> StorageAccessDenied:
        where = exc.filename or store.root
        return StorageAccessDenied(
            f"permission denied on '{where}': the store {store.uri} must be readable and "
            "writable by this user"
        )

    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def listing(self: LocalObjectStore, *args: Any, **kwargs: Any) -> Any:
            try:
                yield from method(self, *args, **kwargs)
            except PermissionError as exc:
                raise denied(self, exc) from None

        return cast("_Method", listing)

    @functools.wraps(method)
    def call(self: LocalObjectStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except PermissionError as exc:
            raise denied(self, exc) from None

    return cast("_Method", call)


class LocalObjectStore(ObjectStore):
    def __init__(self, root: Path | str, *, create: bool = True) -> None:
        self.root = Path(root).absolute()
        self.uri = self.root.as_uri()
        if not self.root.exists():
            if not create:
                raise ConfigError(f"storage directory '{self.root}' does not exist")
            # Created by the first write, not here: opening a store to read (verify,
            # list, a savepoint folder given by mistake) must leave no folder behind.
            _check_creatable(self.root)
        elif not self.root.is_dir():
            raise ConfigError(f"storage root '{self.root}' is not a directory")
        self._thread_lock = threading.Lock()

    # The store is shipped to Spark executors and worker processes: locks do not pickle.
    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        del state["_thread_lock"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._thread_lock = threading.Lock()

    # -- paths --------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise StorageError(f"invalid object key '{key}'")
        return self.root / key

    def _write_temp(self, directory: Path, data: bytes) -> Path:
        for _ in range(100):
            # A concurrent delete may prune the directory between mkdir and mkstemp.
            directory.mkdir(parents=True, exist_ok=True)
            try:
                fd, name = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=directory)
                break
            except FileNotFoundError:
                continue
        else:
            raise StorageError(f"could not create a file in '{directory}'")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
            raise
        return Path(name)

    @staticmethod
    def _fsync_dir(directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _key_lock(self, key: str) -> Iterator[None]:
        # Lock files live apart from the data and are never deleted, so two processes
        # can never hold locks on different inodes for the same key.
        lock_dir = self.root / _LOCK_DIR
        lock_dir.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(key.encode()).hexdigest()[:32]
        with self._thread_lock, open(lock_dir / name, "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    # -- reads --------------------------------------------------------------------------

    @_access_checked
    def get(self, key: str) -> StoredObject:
        path = self._path(key)
        try:
            data = path.read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(key, self.uri) from None
        return StoredObject(key, data, _etag(data))

    @_access_checked
    def head(self, key: str) -> ObjectInfo | None:
        path = self._path(key)
        try:
            if not path.is_file():
                return None
            return ObjectInfo(key, path.stat().st_size, _file_etag(path))
        except FileNotFoundError:
            return None

    @_access_checked
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        for key in self._keys(prefix):
            path = self.root / key
            try:
                yield ObjectInfo(key, path.stat().st_size, _file_etag(path))
            except FileNotFoundError:
                continue  # deleted while listing: S3 would not list it either

    @_access_checked
    def list_sizes(self, prefix: str = "") -> Iterator[ListedSize]:
        for key in self._keys(prefix):
            try:
                yield ListedSize(key, (self.root / key).stat().st_size)
            except FileNotFoundError:
                continue

    def _keys(self, prefix: str) -> list[str]:
        # Walk only the directory the prefix names, then filter by the remaining text,
        # so listing one checkpoint does not walk the whole store.
        base_dir = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self.root / base_dir if base_dir else self.root
        if not start.is_dir():
            return []
        found: list[str] = []
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames[:] = sorted(d for d in dirnames if d != _LOCK_DIR)
            rel_dir = os.path.relpath(dirpath, self.root)
            for name in filenames:
                if name.startswith(_TMP_PREFIX):
                    continue
                key = name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")
                if key.startswith(prefix):
                    found.append(key)
        return sorted(found)

    @_access_checked
    def list_dirs(self, prefix: str) -> list[str]:
        directory = self.root / prefix.rstrip("/") if prefix.strip("/") else self.root
        if not directory.is_dir():
            return []
        out = []
        for entry in directory.iterdir():
            if entry.is_dir() and entry.name != _LOCK_DIR and any(self._has_objects(entry)):
                out.append(f"{prefix.rstrip('/')}/{entry.name}/".lstrip("/"))
        # Sort the prefixes with their trailing '/', as S3 does: 'a-b/' comes before 'a/'.
        return sorted(out)

    def _has_objects(self, directory: Path) -> Iterator[bool]:
        for _dirpath, _dirnames, filenames in os.walk(directory):
            for name in filenames:
                if not name.startswith(_TMP_PREFIX):
                    yield True
                    return

    # -- writes -------------------------------------------------------------------------

    @_access_checked
    def put(self, key: str, data: bytes) -> str:
        path = self._path(key)
        tmp = self._write_temp(path.parent, data)
        os.replace(tmp, path)
        self._fsync_dir(path.parent)
        return _etag(data)

    @_access_checked
    def create(self, key: str, data: bytes) -> str:
        path = self._path(key)
        tmp = self._write_temp(path.parent, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise ObjectAlreadyExists(key) from None
        finally:
            os.unlink(tmp)
        self._fsync_dir(path.parent)
        return _etag(data)

    @_access_checked
    def replace(self, key: str, data: bytes, etag: str) -> str:
        path = self._path(key)
        with self._key_lock(key):
            try:
                current = _etag(path.read_bytes())
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                # A 'directory' (a prefix of other keys) is no object either.
                raise PreconditionFailed(key) from None
            if current != etag:
                raise PreconditionFailed(key)
            tmp = self._write_temp(path.parent, data)
            os.replace(tmp, path)
            self._fsync_dir(path.parent)
        return _etag(data)

    @_access_checked
    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            os.unlink(path)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return
        self._prune_empty_dirs(path.parent)

    def _prune_empty_dirs(self, directory: Path) -> None:
        # S3 has no directories; removing empty ones keeps list_dirs() answering alike.
        while directory != self.root and directory.is_relative_to(self.root):
            try:
                entries = os.listdir(directory)
            except FileNotFoundError:
                directory = directory.parent
                continue
            if entries:
                return
            try:
                os.rmdir(directory)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                    return
                raise
            directory = directory.parent

    @_access_checked
    def delete_many(self, keys: Iterable[str]) -> int:
        count = 0
        for key in keys:
            self.delete(key)
            count += 1
        return count

    @_access_checked
    def upload_file(self, key: str, path: Path) -> ObjectInfo:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f"{_TMP_PREFIX}{uuid.uuid4().hex}"
        shutil.copyfile(path, tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        return ObjectInfo(key, target.stat().st_size, _file_etag(target))

    @_access_checked
    def download_file(self, key: str, path: Path) -> ObjectInfo:
        source = self._path(key)
        if not source.is_file():
            raise ObjectNotFound(key, self.uri)
        shutil.copyfile(source, path)
        return ObjectInfo(key, path.stat().st_size, _file_etag(path))
