"""A local store that never follows a symbolic link: the store for confined folders
(savepoint roots, invariant 13).

The plain local store lets the kernel resolve each path, so a link anywhere under its
root sends a read or a write wherever the link points. Here the root is resolved once,
when the store is made (a root that is itself a link is fine: its real path is the
root), and every operation walks from `/` to the object one component at a time with
O_NOFOLLOW, holding each folder open while it opens the next. A link met on the way,
there from the start or swapped in between two operations (or during one), is refused
with PathRefused, never followed; temp files, renames and links are made relative to the
folder descriptor that was checked, so nothing can redirect them afterwards.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from batchpoint.errors import (
    ObjectAlreadyExists,
    ObjectNotFound,
    PathRefused,
    PreconditionFailed,
    StorageError,
)
from batchpoint.storage.base import ListedSize, ObjectInfo, StoredObject
from batchpoint.storage.local import (
    _LOCK_DIR,
    _STALE_TEMP_SECONDS,
    _TMP_PREFIX,
    LocalObjectStore,
    _access_checked,
)

# O_PATH (Linux): a folder is walked through, not read, so a parent that grants only
# search permission (a home folder of mode 0711) is passed as the kernel would pass it.
_DIR = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LISTABLE = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_LOCK = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_BLOCK = 1 << 20


class ConfinedLocalStore(LocalObjectStore):
    """Everything a LocalObjectStore does, through no link at all."""

    def __init__(self, root: Path | str, *, create: bool = True) -> None:
        super().__init__(os.path.realpath(root), create=create)

    # -- walking ------------------------------------------------------------------------

    def _parts(self, key: str) -> tuple[list[str], str]:
        self._path(key)  # the plain store's checks: no empty, '.' or '..' part, no NUL
        parts = key.split("/")
        return parts[:-1], parts[-1]

    def _refused(self, path: str) -> PathRefused:
        return PathRefused(
            f"'{path}' is a symbolic link: nothing under {self.root} is read or written "
            "through a link"
        )

    def _is_link(self, name: str, parent: int) -> bool:
        try:
            return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
        except OSError:
            return False

    def _step(self, parent: int, name: str, path: str, create: bool) -> int | None:
        """The folder `name` in `parent`, opened without following a link (made first
        when `create`); None when it is missing or a file and `create` is off."""
        for _ in range(100):  # a concurrent delete may prune a folder just made
            try:
                return os.open(name, _DIR, dir_fd=parent)
            except FileNotFoundError:
                if not create:
                    return None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=parent)
            except OSError as exc:
                if exc.errno == errno.ELOOP or self._is_link(name, parent):
                    raise self._refused(path) from None
                if exc.errno != errno.ENOTDIR:
                    raise
                if not create:
                    return None  # a file where a folder would be: nothing under it
                raise StorageError(f"'{path}' is a file, not a folder") from None
        raise StorageError(f"could not create folder '{path}'")

    def _open_dir(self, parts: Sequence[str], *, create: bool) -> int | None:
        """A descriptor of root/parts (the caller closes it), or None (see `_step`)."""
        path = "/"
        fd = os.open(path, _DIR)
        try:
            for name in (*self.root.parts[1:], *parts):
                path = os.path.join(path, name)
                nxt = self._step(fd, name, path, create)
                os.close(fd)
                fd = -1
                if nxt is None:
                    return None
                fd = nxt
            return fd
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise

    @contextlib.contextmanager
    def _dir(self, parts: Sequence[str], *, create: bool = False) -> Iterator[int | None]:
        fd = self._open_dir(parts, create=create)
        try:
            yield fd
        finally:
            if fd is not None:
                os.close(fd)

    def _open_object(self, key: str) -> int | None:
        """A descriptor of the regular file at `key`, or None when there is none."""
        parents, leaf = self._parts(key)
        with self._dir(parents) as parent:
            if parent is None:
                return None
            try:
                fd = os.open(leaf, _READ, dir_fd=parent)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno == errno.ELOOP or self._is_link(leaf, parent):
                    raise self._refused(os.path.join(self.root, *parents, leaf)) from None
                raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None  # a folder (a prefix of other keys) is no object
        return fd

    # -- reads --------------------------------------------------------------------------

    @_access_checked
    def get(self, key: str) -> StoredObject:
        fd = self._open_object(key)
        if fd is None:
            raise ObjectNotFound(key, self.uri)
        with os.fdopen(fd, "rb") as handle:
            data = handle.read()
        return StoredObject(key, data, hashlib.md5(data, usedforsecurity=False).hexdigest())

    @_access_checked
    def head(self, key: str) -> ObjectInfo | None:
        fd = self._open_object(key)
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as handle:
            return ObjectInfo(key, os.fstat(fd).st_size, _digest(handle))

    @_access_checked
    def download_file(self, key: str, path: Path) -> ObjectInfo:
        fd = self._open_object(key)
        if fd is None:
            raise ObjectNotFound(key, self.uri)
        with os.fdopen(fd, "rb") as source, open(path, "wb") as target:
            etag = _digest(source, into=target)
        return ObjectInfo(key, path.stat().st_size, etag)

    @_access_checked
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        # Each file read by key, which refuses one swapped for a link since the walk.
        for key in self._keys(prefix):
            with contextlib.suppress(PathRefused):
                info = self.head(key)
                if info is not None:
                    yield info

    @_access_checked
    def list_sizes(self, prefix: str = "") -> Iterator[ListedSize]:
        # Opened by key as list() reads them (a link refused), but only measured.
        for key in self._keys(prefix):
            fd = None
            with contextlib.suppress(PathRefused):
                fd = self._open_object(key)
            if fd is not None:
                with os.fdopen(fd, "rb"):
                    size = os.fstat(fd).st_size
                yield ListedSize(key, size)

    def _keys(self, prefix: str) -> list[str]:
        """The regular files under the folder the prefix names, sorted (fwalk never
        enters a linked folder)."""
        base = [p for p in prefix.rsplit("/", 1)[0].split("/") if p] if "/" in prefix else []
        keys: list[str] = []
        with self._dir(base) as start:
            if start is None:
                return []
            for dirpath, dirnames, filenames, dirfd in os.fwalk(dir_fd=start):
                dirnames[:] = [d for d in dirnames if d != _LOCK_DIR]
                rel = os.path.normpath(os.path.join(*base, dirpath))
                for name in filenames:
                    key = name if rel == "." else f"{rel}/{name}"
                    if name.startswith(_TMP_PREFIX) or not key.startswith(prefix):
                        continue
                    mode = os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode
                    if stat.S_ISREG(mode):
                        keys.append(key)
        return sorted(keys)

    @_access_checked
    def list_dirs(self, prefix: str) -> list[str]:
        with self._dir([p for p in prefix.split("/") if p]) as fd:
            if fd is None:
                return []
            with _opened(fd) as listable, os.scandir(listable) as entries:
                names = [
                    e.name
                    for e in entries
                    if e.is_dir(follow_symlinks=False) and e.name != _LOCK_DIR
                ]
        subs = [f"{prefix.rstrip('/')}/{name}/".lstrip("/") for name in names]
        # Sorted with their trailing '/', as S3 does: 'a-b/' comes before 'a/'.
        return sorted(s for s in subs if next(iter(self.list_sizes(s)), None) is not None)

    # -- writes -------------------------------------------------------------------------

    def _new_temp(self, parents: list[str]) -> tuple[int, str, int]:
        """The folder `parents` (made if missing) held open, and a new temp file in it:
        (folder, temp name, temp descriptor)."""
        for _ in range(100):
            # A concurrent delete may prune a folder on the way, or the folder itself
            # before the temp is in it (the descriptor then names a removed folder): the
            # walk then meets FileNotFoundError, and goes again.
            try:
                parent = self._open_dir(parents, create=True)
            except FileNotFoundError:
                continue
            assert parent is not None
            name = f"{_TMP_PREFIX}{uuid.uuid4().hex}"
            try:
                return parent, name, os.open(name, _NEW, 0o666, dir_fd=parent)
            except BaseException as exc:
                os.close(parent)
                if not isinstance(exc, FileNotFoundError):
                    raise
        raise StorageError(f"could not create a file in '{os.path.join(self.root, *parents)}'")

    def _temp_in(self, fd: int, source: BinaryIO | bytes) -> str:
        """Write `source` into the temp file `fd` (closed after) and sync it: its md5."""
        with os.fdopen(fd, "wb") as handle:
            if isinstance(source, bytes):
                handle.write(source)
                etag = hashlib.md5(source, usedforsecurity=False).hexdigest()
            else:
                etag = _digest(source, into=handle)
            handle.flush()
            os.fsync(handle.fileno())
        return etag

    @contextlib.contextmanager
    def _temp_beside(
        self, key: str, source: BinaryIO | bytes
    ) -> Iterator[tuple[int, str, str, str]]:
        """A fully written temp file in the key's folder: (folder, temp name, object
        name, md5). The temp's name is gone on leaving, whether it was used or not."""
        parents, leaf = self._parts(key)
        parent, tmp, fd = self._new_temp(parents)
        try:
            etag = self._temp_in(fd, source)
            yield parent, tmp, leaf, etag
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=parent)
            os.close(parent)

    def _install(self, key: str, source: BinaryIO | bytes, *, locked: bool = False) -> str:
        """Write a temp file beside the object, then rename it onto the object's name (a
        rename replaces a link found there; it never writes through it) under the key's
        lock (`locked`: the caller holds it)."""
        with self._temp_beside(key, source) as (parent, tmp, leaf, etag):
            with contextlib.nullcontext() if locked else self._key_lock(key):
                os.rename(tmp, leaf, src_dir_fd=parent, dst_dir_fd=parent)
            _sync(parent)
        return etag

    @_access_checked
    def put(self, key: str, data: bytes) -> str:
        return self._install(key, data)

    @_access_checked
    def upload_file(self, key: str, path: Path) -> ObjectInfo:
        with open(path, "rb") as source:
            etag = self._install(key, source)
        return ObjectInfo(key, path.stat().st_size, etag)

    @_access_checked
    def create(self, key: str, data: bytes) -> str:
        with self._temp_beside(key, data) as (parent, tmp, leaf, etag):
            try:
                # link() never follows a link at the new name: one there is EEXIST.
                with self._key_lock(key):
                    os.link(tmp, leaf, src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False)
            except FileExistsError:
                raise ObjectAlreadyExists(key) from None
            _sync(parent)
        return etag

    @_access_checked
    def replace(self, key: str, data: bytes, etag: str) -> str:
        with self._key_lock(key, legacy=True):
            try:
                current = self.get(key).etag
            except ObjectNotFound:
                raise PreconditionFailed(key) from None
            if current != etag:
                raise PreconditionFailed(key)
            return self._install(key, data, locked=True)

    def _open_lock(self, name: str) -> int:
        with self._dir([_LOCK_DIR], create=True) as locks:
            return os.open(name, _LOCK, 0o666, dir_fd=locks)

    @_access_checked
    def delete(self, key: str) -> None:
        parents, leaf = self._parts(key)
        with self._dir(parents) as parent:
            if parent is None:
                return
            try:
                if stat.S_ISDIR(os.stat(leaf, dir_fd=parent, follow_symlinks=False).st_mode):
                    return  # a prefix of other keys is no object
                with self._key_lock(key):
                    os.unlink(leaf, dir_fd=parent)  # a link is removed itself, not its target
            except FileNotFoundError:
                return
        self._prune(parents)

    def _prune(self, parents: list[str]) -> None:
        # S3 has no folders; removing empty ones keeps list_dirs() answering alike.
        for depth in range(len(parents), 0, -1):
            with self._dir(parents[: depth - 1]) as fd:
                if fd is None or not _rmdir(parents[depth - 1], fd):
                    return


def _rmdir(name: str, parent: int) -> bool:
    """Remove the folder `name` in `parent` if it is empty but for dead writers' temp
    files (see _STALE_TEMP_SECONDS), which go with it: whether it went."""
    try:
        os.rmdir(name, dir_fd=parent)  # a link is ENOTDIR: kept
        return True
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not _only_dead_temps(name, parent):
            return False
    with contextlib.suppress(OSError):
        os.rmdir(name, dir_fd=parent)
        return True
    return False


def _only_dead_temps(name: str, parent: int) -> bool:
    """Whether the folder `name` holds nothing but dead writers' temp files (removed
    here); it stops at the first other entry, so a delete in a big folder stays cheap."""
    try:
        fd = os.open(name, _LISTABLE | os.O_NOFOLLOW, dir_fd=parent)
    except OSError:
        return False  # gone, or a link: nothing to sweep
    try:
        with os.scandir(fd) as entries:
            temps = []
            for entry in entries:
                if not entry.name.startswith(_TMP_PREFIX):
                    return False
                temps.append(entry.name)
        for temp in temps:
            with contextlib.suppress(FileNotFoundError):  # renamed or removed meanwhile
                info = os.stat(temp, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISREG(info.st_mode) or not _stale(info.st_mtime):
                    return False  # perhaps a live writer's: it keeps its folder
                os.unlink(temp, dir_fd=fd)
        return True
    finally:
        os.close(fd)


@contextlib.contextmanager
def _opened(parent: int) -> Iterator[int]:
    """`parent` (walked through, perhaps not readable) opened for reading."""
    fd = os.open(".", _LISTABLE, dir_fd=parent)
    try:
        yield fd
    finally:
        os.close(fd)


def _stale(mtime: float) -> bool:
    return time.time() - mtime > _STALE_TEMP_SECONDS


def _sync(parent: int) -> None:
    """Make a rename or link in `parent` durable."""
    with _opened(parent) as fd:
        os.fsync(fd)


def _digest(source: BinaryIO, into: BinaryIO | None = None) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    for block in iter(lambda: source.read(_BLOCK), b""):
        digest.update(block)
        if into is not None:
            into.write(block)
    return digest.hexdigest()
