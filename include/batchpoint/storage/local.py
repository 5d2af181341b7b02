"""The embedded default backend: a directory on a local (or shared POSIX) filesystem.

Create-once is a hard link of a fully written temp file onto the final name (link fails
if the name exists, and readers never see a half-written object). Every change of a key
(put, create, replace, delete) holds an exclusive flock on the key's lock file while it
renames, links or unlinks, and compare-and-swap holds it across its compare too, so a
replace whose etag check passed cannot land after another process's delete or create.
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
import stat
import tempfile
import threading
import time
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
#: Keys hash onto this many lock files: a fixed set, so the lock folder stays small however
#: many keys a store ever sees (a file per key would never be freed: invariant 12). Two
#: keys on one stripe only wait for each other's rename.
_LOCK_STRIPES = 1024
_THREAD_STRIPES = 64
#: A temp file older than this is a dead writer's, removed when a delete prunes its folder.
#: A live writer renames its temp a write and an fsync after making it, and every block
#: written moves its mtime, so even a long upload keeps it fresh; an hour is far beyond
#: that and beyond the clock skew between the hosts of a shared filesystem.
_STALE_TEMP_SECONDS = 3600.0


def _etag(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _file_etag(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_key(key: str) -> None:
    """Refuse a key that cannot name an object of its own here: a part the filesystem
    drops or resolves ('', '.', '..') makes two keys one file, or a file outside the
    root, where S3 keeps them apart; the store's own files are never objects."""
    parts = key.split("/")
    if "\x00" in key or any(part in ("", ".", "..") for part in parts):
        problem = "it is empty, holds a NUL byte, or a '/'-separated part is empty, '.' or '..'"
    elif any(part == _LOCK_DIR or part.startswith(_TMP_PREFIX) for part in parts):
        problem = f"names '{_LOCK_DIR}' and '{_TMP_PREFIX}*' are the local store's own files"
    else:
        return
    raise StorageError(f"invalid object key {key!r}: {problem}; use another key")


def _stripe(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % _LOCK_STRIPES


def _discard(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _only_dead_temps(directory: Path) -> bool:
    """Whether `directory` holds nothing but dead writers' temp files (removed here).
    It stops at the first other entry, so a delete in a big folder stays cheap."""
    temps = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if not entry.name.startswith(_TMP_PREFIX):
                return False
            temps.append(entry.path)
    for path in temps:
        with contextlib.suppress(FileNotFoundError):  # renamed or removed meanwhile
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode) or time.time() - info.st_mtime < _STALE_TEMP_SECONDS:
                return False  # perhaps a live writer's: it keeps its folder
            os.unlink(path)
    return True


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
    the S3 store reports a refused credential, not as a traceback. A key too long for
    the filesystem is a StorageError naming it, too."""

    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def listing(self: LocalObjectStore, *args: Any, **kwargs: Any) -> Any:
            try:
                yield from method(self, *args, **kwargs)
            except OSError as exc:
                if (error := _storage_error(self, exc, args)) is None:
                    raise
                raise error from None

        return cast("_Method", listing)

    @functools.wraps(method)
    def call(self: LocalObjectStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            if (error := _storage_error(self, exc, args)) is None:
                raise
            raise error from None

    return cast("_Method", call)


def _storage_error(
    store: LocalObjectStore, exc: OSError, args: tuple[Any, ...]
) -> StorageError | None:
    """The StorageError for a refusal that is the user's to fix, else None."""
    if isinstance(exc, PermissionError):
        where = exc.filename or store.root
        return StorageAccessDenied(
            f"permission denied on '{where}': the store {store.uri} must be readable and "
            "writable by this user"
        )
    if exc.errno == errno.ENAMETOOLONG:
        key = args[0] if args else ""
        return StorageError(
            f"object key {key!r} is too long for the filesystem of {store.uri}: use a key "
            "with shorter parts (at most 255 bytes each) and fewer of them"
        )
    return None


def _thread_locks() -> tuple[threading.Lock, ...]:
    return tuple(threading.Lock() for _ in range(_THREAD_STRIPES))


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
        self._thread_locks = _thread_locks()

    # The store is shipped to Spark executors and worker processes: locks do not pickle.
    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        del state["_thread_locks"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._thread_locks = _thread_locks()

    # -- paths --------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        _check_key(key)
        return self.root / key

    def _write_temp(self, directory: Path, source: bytes | Path) -> Path:
        """A fully written, fsynced temp file in `directory` holding `source` (bytes, or
        the content of a local file)."""
        fd, name = self._make_temp(directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                if isinstance(source, bytes):
                    handle.write(source)
                else:
                    shutil.copyfile(source, name)  # the kernel's copy, into this same file
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            _discard(Path(name))
            raise
        return Path(name)

    def _make_temp(self, directory: Path) -> tuple[int, str]:
        for _ in range(100):
            # A concurrent delete may prune the folder, or a parent of it, between the
            # mkdir and the mkstemp or inside mkdir's own walk (it then raises
            # FileNotFoundError or FileExistsError): make it again.
            try:
                directory.mkdir(parents=True, exist_ok=True)
                return tempfile.mkstemp(prefix=_TMP_PREFIX, dir=directory)
            except (FileNotFoundError, FileExistsError):
                continue
            except NotADirectoryError:
                raise StorageError(
                    f"cannot write under '{directory}': an object of the store is where one "
                    "of its folders would be; use a key that is not under another object"
                ) from None
        raise StorageError(f"could not create a file in '{directory}'")

    @staticmethod
    def _fsync_dir(directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _key_lock(self, key: str, *, legacy: bool = False) -> Iterator[None]:
        # Lock files live apart from the data and are never deleted, so two processes
        # never lock different inodes for one key. The thread lock is for shared
        # filesystems that emulate flock with process-wide fcntl locks.
        stripe = _stripe(key)
        with self._thread_locks[stripe % _THREAD_STRIPES]:
            fds = [self._open_lock(f"stripe-{stripe:04d}")]
            try:
                fcntl.flock(fds[0], fcntl.LOCK_EX)
                if legacy:  # older releases lock a replace by a file per key: wait for them
                    fds.append(self._open_lock(hashlib.sha256(key.encode()).hexdigest()[:32]))
                    fcntl.flock(fds[1], fcntl.LOCK_EX)
                yield
            finally:
                for fd in fds:
                    os.close(fd)  # closing the file releases its flock

    def _open_lock(self, name: str) -> int:
        path = f"{self.root}/{_LOCK_DIR}/{name}"  # no Path: this runs for every write
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except FileNotFoundError:
            (self.root / _LOCK_DIR).mkdir(parents=True, exist_ok=True)
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)

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
        self._install(key, path, self._write_temp(path.parent, data))
        return _etag(data)

    def _install(self, key: str, path: Path, tmp: Path) -> None:
        """Rename the written temp file `tmp` onto `key` at `path`, under the key's lock."""
        try:
            with self._key_lock(key):
                os.replace(tmp, path)
        except BaseException:
            _discard(tmp)
            raise
        self._fsync_dir(path.parent)

    @_access_checked
    def create(self, key: str, data: bytes) -> str:
        path = self._path(key)
        tmp = self._write_temp(path.parent, data)
        try:
            with self._key_lock(key):
                os.link(tmp, path)
        except FileExistsError:
            raise ObjectAlreadyExists(key) from None
        finally:
            _discard(tmp)
        self._fsync_dir(path.parent)
        return _etag(data)

    @_access_checked
    def replace(self, key: str, data: bytes, etag: str) -> str:
        path = self._path(key)
        with self._key_lock(key, legacy=True):
            try:
                current = _etag(path.read_bytes())
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                # A 'directory' (a prefix of other keys) is no object either.
                raise PreconditionFailed(key) from None
            if current != etag:
                raise PreconditionFailed(key)
            tmp = self._write_temp(path.parent, data)
            try:
                os.replace(tmp, path)
            except BaseException:
                _discard(tmp)
                raise
            self._fsync_dir(path.parent)
        return _etag(data)

    @_access_checked
    def delete(self, key: str) -> None:
        path = self._path(key)
        if not os.path.lexists(path):
            return  # nothing to lock for: and no lock folder made in a store never written
        with self._key_lock(key):
            try:
                os.unlink(path)
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                return
        self._prune_empty_dirs(path.parent)

    def _prune_empty_dirs(self, directory: Path) -> None:
        # S3 has no directories; removing empty ones keeps list_dirs() answering alike.
        # Dead writers' temp files go too, in the folders met here only, so a collected
        # checkpoint's folder does not stay for them and GC's work stays its deletes.
        while directory != self.root and directory.is_relative_to(self.root):
            try:
                if not _only_dead_temps(directory):
                    return
            except FileNotFoundError:
                directory = directory.parent
                continue
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
        self._install(key, target, self._write_temp(target.parent, Path(path)))
        return ObjectInfo(key, target.stat().st_size, _file_etag(target))

    @_access_checked
    def download_file(self, key: str, path: Path) -> ObjectInfo:
        source = self._path(key)
        if not source.is_file():
            raise ObjectNotFound(key, self.uri)
        shutil.copyfile(source, path)
        return ObjectInfo(key, path.stat().st_size, _file_etag(path))
