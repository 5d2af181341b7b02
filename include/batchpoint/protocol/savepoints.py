"""Savepoints as self-contained, relocatable folders (Flink's savepoint directory).

A savepoint is a completed checkpoint of type SAVEPOINT (retained, never subsumed) that
is *exported*: every file its metadata references is copied into one folder, under a
path relative to that folder, and a `_metadata` record describes the checkpoint with
those relative paths. The folder can then be moved or copied anywhere (another prefix,
another bucket, a local disk) and still be restored, because nothing in it names where
it lives.

    <savepoint folder>/_metadata                  written last: its presence means complete
    <savepoint folder>/data/<operator>/<hh>/<stream>/subtask-<i>/<attempt>/...
    <savepoint folder>/external/<key>             files that lived outside the checkpoint

A file keeps its path below the checkpoint's `data/` (`relative_path`): the spread
folder `<hh>` (state/keys.py) or, for a file written before issue 42, none; an import
puts it at the same path below the new checkpoint's `data/`.

Restoring from a savepoint *imports* it: the files are copied back under a new
checkpoint id (ids are never reused), the acks are replayed through the ack accounting
so the usual finalize checks apply, and the result is a retained SAVEPOINT checkpoint that
an explicit restore can then point the head at. The import never references the
savepoint folder afterwards, so deleting or moving the folder cannot break the pipeline.

Paths are confined (`savepoint_paths`): exports write and imports read only under
configured savepoint roots (by default `<storage root>/savepoints/`), a local folder by
its real path and through a store that follows no link, so a link under a root, there
before or made during an export or import, cannot lead a byte outside. A savepoint
leaves the pipeline's retained set only by `Savepoints.dispose`, refused while a retained
checkpoint still depends on its files.

This module is the format (the `_metadata` record, where files go in the folder,
reading and checking a folder, copying); exporting, importing and disposing of a
pipeline's savepoints are protocol/savepoint_transfer.py's.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from batchpoint import codec
from batchpoint.errors import (
    CheckpointError,
    CorruptRecord,
    ObjectNotFound,
    RestoreRefused,
)
from batchpoint.protocol.checkpoint import (
    AckRecord,
    AckRecordV1,
    CompletedCheckpoint,
    FileHandle,
    PendingCheckpoint,
    PendingCheckpointV1,
)
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.ports import Count, ProgressFn, count_due
from batchpoint.protocol.records import to_iso

# Where a savepoint lives (and may live) is asked of this module too: re-exported.
from batchpoint.protocol.savepoint_paths import (  # noqa: F401
    METADATA,
    SavepointLocation,
    SavepointPathRefused,
    confine,
    confined,
    default_savepoint_prefix,
    default_savepoint_roots,
    no_links,
)
from batchpoint.protocol.verify import FileProblem, check_handles
from batchpoint.storage.base import ObjectInfo, ObjectStore

#: What to do about a savepoint whose _metadata is damaged: nothing rebuilds a folder
SAVEPOINT_HINT = "export the savepoint again from its checkpoint, or restore another one"
_DATA = "data/"
_EXTERNAL = "external/"
_COPY_WORKERS = 8


# -- the `_metadata` record -------------------------------------------------------------


def _check_relative(path: str) -> None:
    # A relative path that climbs out of the folder would let a crafted savepoint read
    # (and on import, copy) any object of the store.
    parts = path.split("/")
    if not path.startswith((_DATA, _EXTERNAL)) or ".." in parts or "" in parts:
        raise codec.Invalid(f"file path {path!r} is not inside the savepoint folder")


def _inside_the_folder(acks: tuple[AckRecord, ...]) -> None:
    for handle in (h for a in acks for h in a.handles):
        _check_relative(handle.path)


@dataclass(frozen=True)
class SavepointMetadataV1(codec.Value):
    """Version 1: the pending record and the acks of version 1."""

    DERIVED = {"files": "file_count", "state_size": "state_size"}

    pipeline: str
    checkpoint_id: int
    pending: PendingCheckpointV1 = codec.field(key="checkpoint")
    acks: tuple[AckRecordV1, ...] = codec.field(check=_inside_the_folder)
    completed_at: float = codec.time()
    exported_at: float = codec.time()
    description: str = ""
    taken_from: str = ""

    @property
    def file_count(self) -> int:
        return sum(len(a.handles) for a in self.acks)

    @property
    def state_size(self) -> int:
        return sum(h.size for a in self.acks for h in a.handles)


def _savepoint_from_v1(old: SavepointMetadataV1) -> SavepointMetadata:
    return SavepointMetadata(
        old.pipeline,
        old.checkpoint_id,
        PendingCheckpoint.upgrade(1, old.pending),
        tuple(AckRecord.upgrade(1, a) for a in old.acks),
        old.completed_at,
        old.exported_at,
        old.description,
        old.taken_from,
    )


@dataclass(frozen=True)
class SavepointMetadata(codec.Record):
    """The completed checkpoint, with every handle's path relative to the folder.
    Version 2 holds the pending record and the acks of version 2 (uids, topology)."""

    KIND = "savepoint"
    VERSION = 2
    READS = {1: codec.Upgrade(SavepointMetadataV1, _savepoint_from_v1)}
    # written for people reading the folder, never read back
    DERIVED = {"files": "file_count", "state_size": "state_size"}

    pipeline: str
    checkpoint_id: int  # the id it had in the pipeline it was taken from
    # barrier, expected tasks, properties as triggered
    pending: PendingCheckpoint = codec.field(key="checkpoint")
    # handle paths relative to the savepoint folder
    acks: tuple[AckRecord, ...] = codec.field(check=_inside_the_folder)
    completed_at: float = codec.time()
    exported_at: float = codec.time()
    description: str = ""
    taken_from: str = ""  # the storage root it was exported from (for people, not code)

    @property
    def handles(self) -> tuple[FileHandle, ...]:
        return tuple(h for ack in self.acks for h in ack.handles)

    @property
    def file_count(self) -> int:
        return len(self.handles)

    @property
    def state_size(self) -> int:
        return sum(ack.state_size for ack in self.acks)


def relative_path(layout: PipelineLayout, checkpoint_id: int, path: str) -> str:
    """Where a checkpoint's file goes in a savepoint folder."""
    data = layout.data_prefix(checkpoint_id)
    if path.startswith(data):
        return _DATA + path[len(data) :]
    return _EXTERNAL + path


def imported_path(layout: PipelineLayout, checkpoint_id: int, relative: str) -> str:
    """Where a savepoint's file goes when it is imported as `checkpoint_id`."""
    # Everything lands in the new checkpoint's own data folder, so the imported files
    # belong to it alone and GC treats them like any checkpoint's files.
    return layout.data_prefix(checkpoint_id) + relative.removeprefix(_DATA)


# -- read and check ---------------------------------------------------------------------


def read_savepoint(location: SavepointLocation) -> SavepointMetadata:
    try:
        with no_links(location):
            data = location.store.get(location.metadata_key).data
    except ObjectNotFound:
        raise RestoreRefused(
            f"{location.uri} is not a savepoint: it has no {METADATA} "
            "(an export that did not finish, or the wrong folder)"
        ) from None
    try:
        return SavepointMetadata.decode(location.store.child(location.metadata_key), data)
    except CorruptRecord as exc:  # repair rebuilds a pipeline's records, not a folder's
        raise CorruptRecord(exc.key, exc.problem, SAVEPOINT_HINT) from None


def read_savepoint_of(pipeline: str, location: SavepointLocation) -> SavepointMetadata:
    """read_savepoint, refusing a savepoint that another pipeline took."""
    metadata = read_savepoint(location)
    if metadata.pipeline != pipeline:
        raise RestoreRefused(
            f"{location.uri} is a savepoint of pipeline '{metadata.pipeline}', not of '{pipeline}'"
        )
    return metadata


def check_savepoint(
    location: SavepointLocation,
    metadata: SavepointMetadata | None = None,
    *,
    checksums: bool = False,
    progress: ProgressFn | None = None,
) -> list[FileProblem]:
    """Its `_metadata` holds one ack per expected task, and every file the savepoint
    references exists in its folder with the recorded size (and checksum, when asked);
    problems name paths relative to the folder."""
    metadata = metadata or read_savepoint(location)
    if wrong := ack_problems(metadata):
        return wrong  # a damaged _metadata: its files are not worth reading
    located = [replace(h, path=location.key(h.path)) for h in metadata.handles]
    with no_links(location):
        problems = check_handles(location.store, located, checksums=checksums, progress=progress)
    return [FileProblem(p.path[len(location.prefix) :], p.problem) for p in problems]


def ack_problems(metadata: SavepointMetadata) -> list[FileProblem]:
    """Where the acks of `_metadata` are not one per expected task. Checked before an
    import writes anything: its finalize would refuse a missing ack only once the id,
    the pending record and the files are written, and the ack accounting keeps one of
    two acks of a task, dropping the other's files unseen."""
    expected = metadata.pending.expected_tasks
    acks = Counter(ack.task for ack in metadata.acks)
    found = [f"has no ack for task {task}" for task in expected if task not in acks]
    found += [f"has {n} acks for task {task}" for task, n in acks.items() if n > 1]
    found += [f"has an ack for task {t} it does not expect" for t in acks if t not in expected]
    return [FileProblem(METADATA, problem) for problem in found]


def located_checkpoint(
    location: SavepointLocation, metadata: SavepointMetadata
) -> CompletedCheckpoint:
    """The savepoint as a CompletedCheckpoint whose paths are keys of `location.store`
    (what a quality gate reads before anything is imported)."""
    acks = tuple(
        replace(a, handles=tuple(replace(h, path=location.key(h.path)) for h in a.handles))
        for a in metadata.acks
    )
    return CompletedCheckpoint(metadata.pending, acks, metadata.completed_at)


def refuse_occupied(given: SavepointLocation, target: SavepointLocation) -> None:
    """CheckpointError when the folder already holds a savepoint: an export never
    overwrites one. `target` is `given` confined (a local folder by its real path)."""
    with no_links(given):
        if target.store.exists(target.metadata_key):
            raise CheckpointError(f"{given.uri} already holds a savepoint ({METADATA} exists)")


# -- helpers ----------------------------------------------------------------------------


def copy_objects(
    source: ObjectStore,
    target: ObjectStore,
    pairs: Iterable[tuple[str, str]],
    *,
    progress: ProgressFn | None = None,
    workers: int = _COPY_WORKERS,
) -> list[ObjectInfo]:
    """Copy objects between (possibly different) stores through a local temp file each,
    so no object has to fit in memory."""
    pairs = list(pairs)
    if not pairs:
        return []
    done = 0

    def one(pair: tuple[str, str]) -> ObjectInfo:
        with tempfile.TemporaryDirectory(prefix="bp-copy-") as tmp:
            local = Path(tmp) / "object"
            source.download_file(pair[0], local)
            return target.upload_file(pair[1], local)

    out = []
    with ThreadPoolExecutor(max_workers=min(workers, len(pairs))) as pool:
        for info in pool.map(one, pairs):
            out.append(info)
            done += 1
            if progress is not None and count_due(done, len(pairs)):
                line = f"  copied {done}/{len(pairs)} file(s)"
                progress(Count("copying files", done, len(pairs), line))
    return out


def describe(metadata: SavepointMetadata) -> Mapping[str, Any]:
    """A short JSON-able summary (for XCom, the CLI's --json and logs)."""
    return {
        "pipeline": metadata.pipeline,
        "checkpoint_id": metadata.checkpoint_id,
        "files": len(metadata.handles),
        "state_size": metadata.state_size,
        "description": metadata.description,
        "exported_at": to_iso(metadata.exported_at),
        "taken_from": metadata.taken_from,
    }
