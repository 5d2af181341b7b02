"""Where a savepoint lives, and where it may (invariant 13).

A `SavepointLocation` is a store and a key prefix. Savepoints are written and read only
under configured roots (`BATCHPOINT_SAVEPOINT_ROOTS`; by default `<storage root>/savepoints/`):
`confine` checks a location against them segment by segment, a `file://` location and
its roots by their real paths (links resolved); `confined` then hands the savepoint
operations the location on a store that follows no link (`storage.confined`), so that a
link made under a root after the check cannot lead a read or a write outside it either.
S3 has no links: an S3 location is compared as written.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from batchpoint.errors import CheckpointError, PathRefused
from batchpoint.protocol.layout import checkpoint_dir_name
from batchpoint.storage import open_store
from batchpoint.storage.base import ObjectStore
from batchpoint.storage.confined import ConfinedLocalStore

METADATA = "_metadata"


# -- where a savepoint lives ------------------------------------------------------------


@dataclass(frozen=True)
class SavepointLocation:
    """A savepoint folder: a store and a key prefix in it ('' for the store's root)."""

    store: ObjectStore
    prefix: str = ""

    def __post_init__(self) -> None:
        prefix = self.prefix.strip("/")
        object.__setattr__(self, "prefix", f"{prefix}/" if prefix else "")

    def key(self, relative: str) -> str:
        return self.prefix + relative

    @property
    def metadata_key(self) -> str:
        return self.key(METADATA)

    @property
    def uri(self) -> str:
        return self.store.child(self.prefix).rstrip("/") if self.prefix else self.store.uri

    def __str__(self) -> str:
        return self.uri


def savepoint_location(
    text: str, root_store: ObjectStore, options: Mapping[str, str] | None = None
) -> SavepointLocation:
    """A savepoint folder named by a URI (s3://bucket/prefix, file:///path, opened with
    the deployment's S3 options) or by a key prefix under the storage root."""
    if "://" in text:
        return SavepointLocation(open_store(text.rstrip("/"), options or {}))
    if text.startswith("/"):  # read as a key under the root, it would name another folder
        raise SavepointPathRefused(
            f"savepoint path '{text}' starts with '/': a folder under the storage root is "
            f"named without it (savepoints/...), a local folder as a URI (file://{text})"
        )
    return SavepointLocation(root_store, text.strip("/"))


def default_savepoint_prefix(pipeline: str, checkpoint_id: int, now: float) -> str:
    """Where a savepoint goes when no target is given: under the storage root, outside
    `pipelines/`, so GC and subsumption never look at it."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    return f"savepoints/{pipeline}/savepoint-{checkpoint_dir_name(checkpoint_id)[4:]}-{stamp}/"


class SavepointPathRefused(CheckpointError):
    """A savepoint target or source outside the configured savepoint roots."""


def default_savepoint_roots(store: ObjectStore) -> tuple[str, ...]:
    return (store.child("savepoints/"),)


def confine(location_uri: str, roots: Iterable[str]) -> str:
    """`location_uri` if it lies under one of `roots` (URIs), else SavepointPathRefused.
    Compared segment by segment, so `.../savepoints-old` is not under `.../savepoints`
    and `..` cannot climb out; `file://` paths by their real paths (every link resolved,
    in the location and in the roots), so a link under a root cannot lead out of it."""
    _root_of(location_uri, roots)
    return location_uri


def confined(location: SavepointLocation, roots: Iterable[str]) -> SavepointLocation:
    """`location` once `confine` accepts it, on a store that keeps every read and write
    under its root: a local folder becomes its real path on a store that follows no link
    (one swapped in later is refused, not followed); S3 has no links, and an S3 folder is
    returned as it is."""
    root = _root_of(location.uri, roots)
    if not root.startswith("file:"):
        return location
    real_root = _local_path(root)
    prefix = os.path.relpath(_local_path(_real(location.uri)), real_root)
    return SavepointLocation(ConfinedLocalStore(real_root), prefix)


def _root_of(location_uri: str, roots: Iterable[str]) -> str:
    """The root that holds `location_uri` (for a file:// root, its real path)."""
    roots = [r for r in roots if r]
    parts = location_uri.split("://", 1)[-1].split("/")
    if "." in parts or ".." in parts:
        raise SavepointPathRefused(f"savepoint path {location_uri} contains '.' or '..'")
    where = _real(location_uri).rstrip("/") + "/"
    for root in roots:
        base = _real(root).rstrip("/") + "/"
        if where.startswith(base) and where != base:
            return base
    listed = ", ".join(roots) or "none configured"
    really = where.rstrip("/")
    link = f" (a link: its real path is {really})" if _moved(location_uri, really) else ""
    raise SavepointPathRefused(
        f"savepoint path {location_uri}{link} is outside the savepoint roots ({listed}); "
        "use a folder under one of them or add a root (BATCHPOINT_SAVEPOINT_ROOTS)"
    )


def _moved(typed: str, real: str) -> bool:
    """Whether resolving `typed` led elsewhere (a link). A real path's URI is
    percent-encoded (a space, a non-ASCII letter) where the typed one need not be: the
    paths are compared decoded."""
    if not typed.startswith("file:"):
        return real != typed.rstrip("/")
    return _local_path(real).rstrip("/") != _local_path(typed).rstrip("/")


def _local_path(uri: str) -> str:
    return unquote(urlparse(uri).path)


def _real(uri: str) -> str:
    """A file:// URI with its path resolved (every existing link followed); any other
    URI as it is (S3 has no links)."""
    if not uri.startswith("file:"):
        return uri
    return Path(os.path.realpath(_local_path(uri))).as_uri()


@contextlib.contextmanager
def no_links(location: SavepointLocation) -> Iterator[None]:
    """A link met under a confined folder (one swapped in after `confined` checked the
    path) refuses the savepoint operation."""
    try:
        yield
    except PathRefused as exc:
        raise SavepointPathRefused(f"savepoint path {location.uri} refused: {exc}") from None
