"""Storage requests counted by kind: what an operator attempt's acks record
(`TaskMetrics.storage_requests`) and the bench divides by epochs and gigabytes.

`CountingStore` wraps any store and counts at the ObjectStore API, one call one request,
so the counts are the same over S3, a local directory or a confined folder. Where one
call costs S3 more than one request the count is approximate, and says how:

- `delete_many` is counted as S3 sends it, one DeleteObjects request per 1000 keys;
- `upload_file` is one put, or, at or above the store's multipart threshold (S3 only),
  its parts plus the create and complete calls, counted as `upload_part`;
- a request the S3 store repeats (retries, `_landed` checks after a lost answer, the head
  that follows an upload or brackets a download) is not counted: the figures are what
  the code asks for, a lower bound of what the bill shows;
- `list` is one request per call whatever its pages (S3 pages by 1000 keys).
"""

from __future__ import annotations

import enum
import math
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from batchpoint.storage.base import ListedSize, ObjectInfo, ObjectStore, StoredObject

#: S3's DeleteObjects takes at most this many keys.
DELETE_BATCH = 1000


class RequestKind(enum.StrEnum):
    GET = "get"
    HEAD = "head"
    PUT = "put"  # put, create and replace: a conditional write is one PutObject
    LIST = "list"
    DELETE = "delete"
    UPLOAD_PART = "upload_part"  # a multipart upload's create, parts and complete
    # No copy: the ObjectStore has none (a savepoint copies with get and put).


class RequestCount:
    """Requests by kind, added to from many threads (a task's writers, its acks)."""

    def __init__(self, counts: Mapping[str, int] | None = None) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        if counts:
            self.add(counts)

    def count(self, kind: RequestKind, n: int = 1) -> None:
        with self._lock:
            self._counts[kind.value] += n

    def add(self, counts: Mapping[str, int]) -> None:
        with self._lock:
            self._counts.update({k: n for k, n in counts.items() if n})

    def by_kind(self) -> dict[str, int]:
        """The counts so far, kinds in name order, none that is zero."""
        with self._lock:
            return {k: self._counts[k] for k in sorted(self._counts) if self._counts[k]}

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def __repr__(self) -> str:
        return f"RequestCount({self.by_kind()})"


def _parts(store: ObjectStore, size: int) -> int:
    """The requests of a multipart upload of `size` bytes (create, parts, complete), or 0
    when `store` uploads it in one put. Only the S3 store has settings that say."""
    settings = getattr(store, "settings", None)
    threshold = getattr(settings, "multipart_threshold", None)
    chunk = getattr(settings, "multipart_chunksize", None)
    if not isinstance(threshold, int) or not isinstance(chunk, int) or size < threshold:
        return 0
    return math.ceil(size / chunk) + 2


class CountingStore(ObjectStore):
    """`inner`, counting each request into `requests`. It holds nothing else, so one per
    attempt (or per Spark task) costs nothing; it is never pickled (each executor wraps
    the store it opened)."""

    def __init__(self, inner: ObjectStore, requests: RequestCount | None = None) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.requests = requests if requests is not None else RequestCount()

    def get(self, key: str) -> StoredObject:
        self.requests.count(RequestKind.GET)
        return self.inner.get(key)

    def head(self, key: str) -> ObjectInfo | None:
        self.requests.count(RequestKind.HEAD)
        return self.inner.head(key)

    def put(self, key: str, data: bytes) -> str:
        self.requests.count(RequestKind.PUT)
        return self.inner.put(key, data)

    def create(self, key: str, data: bytes) -> str:
        self.requests.count(RequestKind.PUT)
        return self.inner.create(key, data)

    def replace(self, key: str, data: bytes, etag: str) -> str:
        self.requests.count(RequestKind.PUT)
        return self.inner.replace(key, data, etag)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        self.requests.count(RequestKind.LIST)
        return self.inner.list(prefix)

    def list_sizes(self, prefix: str = "") -> Iterator[ListedSize]:
        self.requests.count(RequestKind.LIST)
        return self.inner.list_sizes(prefix)

    def list_dirs(self, prefix: str) -> list[str]:
        self.requests.count(RequestKind.LIST)
        return self.inner.list_dirs(prefix)

    def delete(self, key: str) -> None:
        self.requests.count(RequestKind.DELETE)
        self.inner.delete(key)

    def delete_many(self, keys: Iterable[str]) -> int:
        asked = self.inner.delete_many(keys)
        self.requests.count(RequestKind.DELETE, math.ceil(asked / DELETE_BATCH))
        return asked

    def upload_file(self, key: str, path: Path) -> ObjectInfo:
        parts = _parts(self.inner, path.stat().st_size)
        if parts:
            self.requests.count(RequestKind.UPLOAD_PART, parts)
        else:
            self.requests.count(RequestKind.PUT)
        return self.inner.upload_file(key, path)

    def download_file(self, key: str, path: Path) -> ObjectInfo:
        # one GET, though boto3 may split a large object into ranged GETs
        self.requests.count(RequestKind.GET)
        return self.inner.download_file(key, path)

    def exists(self, key: str) -> bool:
        return self.head(key) is not None

    def child(self, key: str) -> str:
        return self.inner.child(key)

    def close(self) -> None:
        # the inner store is shared (StoreRef.open caches one per process): not ours to close
        pass

    def __repr__(self) -> str:
        return f"CountingStore({self.inner!r})"


class RequestLedger:
    """Requests by part (a subtask) and kind: what the Spark tasks of an attempt's
    writes report back with their files, each under its own subtask, so the counts add
    up over the acks without counting a request twice."""

    def __init__(self) -> None:
        self._parts: dict[int, RequestCount] = {}
        self._lock = threading.Lock()

    def add(self, part: int, counts: Mapping[str, int]) -> None:
        with self._lock:
            count = self._parts.setdefault(part, RequestCount())
        count.add(counts)

    def by_kind(self, part: int) -> dict[str, int]:
        with self._lock:
            count = self._parts.get(part)
        return count.by_kind() if count is not None else {}

    def parts(self) -> list[int]:
        with self._lock:
            return sorted(self._parts)
