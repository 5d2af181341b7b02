"""The one storage interface that the coordinator, the Spark tasks, the Airflow
trigger, the CLI and the UI plugin all share.

Keys are '/'-separated paths relative to the store's root. Two conditional writes carry
the whole protocol: `create` (write once, like S3 `If-None-Match: *`) and `replace`
(compare-and-swap on the etag, like S3 `If-Match`).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    etag: str


class ListedSize(NamedTuple):
    """A listed object without its etag (`list_sizes`): what a listing that only
    needs keys and sizes asks for."""

    key: str
    size: int


@dataclass(frozen=True)
class StoredObject:
    key: str
    data: bytes
    etag: str


class ObjectStore(abc.ABC):
    """Blob storage with conditional writes. Implementations must be safe to share
    between threads and must give the same answers as every other implementation
    (tests/storage/test_conformance.py is the contract)."""

    #: The URI the store was opened with, e.g. ``s3://bucket/prefix`` or ``file:///srv/bp``.
    uri: str

    @abc.abstractmethod
    def get(self, key: str) -> StoredObject:
        """Read a whole object. Raises ObjectNotFound."""

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo | None:
        """Size and etag of an object, or None when it does not exist."""

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> str:
        """Write unconditionally; returns the new etag."""

    @abc.abstractmethod
    def create(self, key: str, data: bytes) -> str:
        """Write only if the key does not exist; raises ObjectAlreadyExists otherwise."""

    @abc.abstractmethod
    def replace(self, key: str, data: bytes, etag: str) -> str:
        """Write only if the object's current etag is `etag`; raises PreconditionFailed
        (also when the object no longer exists)."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with `prefix`, in key order, at any depth."""

    def list_sizes(self, prefix: str = "") -> Iterator[ListedSize]:
        """Key and size of every object `list` gives, in its order. A store whose etags
        cost a read of each object (a local folder hashes its files) answers without
        them: whatever lists data files for their keys or sizes (a source at each
        trigger, GC, a table's checks) lists this way, never reading the files."""
        return (ListedSize(info.key, info.size) for info in self.list(prefix))

    @abc.abstractmethod
    def list_dirs(self, prefix: str) -> list[str]:
        """The immediate 'sub-folders' under `prefix` (which should end with '/'),
        as full key prefixes ending with '/', in key order."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Delete one object; deleting a missing key is not an error."""

    @abc.abstractmethod
    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete many objects (batched); returns how many keys were asked for."""

    @abc.abstractmethod
    def upload_file(self, key: str, path: Path) -> ObjectInfo:
        """Upload a local file of any size (multipart where the backend has it)."""

    @abc.abstractmethod
    def download_file(self, key: str, path: Path) -> ObjectInfo:
        """Download an object of any size to a local file without holding it in memory."""

    def exists(self, key: str) -> bool:
        return self.head(key) is not None

    def child(self, key: str) -> str:
        """The URI of a key, for messages and for readers that open URIs directly."""
        return f"{self.uri.rstrip('/')}/{key}"

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the default has nothing to release."""
