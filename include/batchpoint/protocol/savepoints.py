"""Savepoints as self-contained, relocatable folders (Flink's savepoint directory).

A savepoint is a completed checkpoint of type SAVEPOINT (retained, never subsumed) that
is *exported*: every file its metadata references is copied into one folder, under a
path relative to that folder, and a `_metadata` record describes the checkpoint with
those relative paths. The folder can then be moved or copied anywhere (another prefix,
another bucket, a local disk) and still be restored, because nothing in it names where
it lives.

    <savepoint folder>/_metadata                  written last: its presence means complete
    <savepoint folder>/data/<operator>/<subtask>/<attempt>/<stream>/...
    <savepoint folder>/external/<key>             files that lived outside the checkpoint

Restoring from a savepoint *imports* it: the files are copied back under a new
checkpoint id (ids are never reused), the acks are replayed through the coordinator so
the usual finalize checks apply, and the result is a retained SAVEPOINT checkpoint that
an explicit restore can then point the head at. The import never references the
savepoint folder afterwards, so deleting or moving the folder cannot break the pipeline.

Paths are confined (`savepoint_paths`): exports write and imports read only under
configured savepoint roots (by default `<storage root>/savepoints/`), a local folder by
its real path and through a store that follows no link, so a link under a root, there
before or made during an export or import, cannot lead a byte outside. A savepoint
leaves the pipeline's retained set only by `dispose_savepoint`, refused while a retained
checkpoint still depends on its files.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from batchpoint.errors import (
    CheckpointError,
    CheckpointNotFound,
    CorruptRecord,
    ObjectAlreadyExists,
    ObjectNotFound,
    RestoreRefused,
)
from batchpoint.protocol import records
from batchpoint.protocol.checkpoint import (
    SHARED_FROM_META,
    AckRecord,
    CheckpointStatus,
    CheckpointType,
    CompletedCheckpoint,
    FileHandle,
    PendingCheckpoint,
    TaskAcknowledgeResult,
)
from batchpoint.protocol.control import ControlRecord, ControlUnreadable, PendingEntry
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.records import from_iso, to_iso
from batchpoint.protocol.restorer import SAVEPOINT_ID_PROPERTY, TAKEN_FROM_PROPERTY

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

_DATA = "data/"
_EXTERNAL = "external/"
_COPY_WORKERS = 8

ProgressFn = Callable[[str], None]


# -- the `_metadata` record -------------------------------------------------------------


@dataclass(frozen=True)
class SavepointMetadata(records.VersionedRecord):
    """The completed checkpoint, with every handle's path relative to the folder."""

    KIND = "savepoint"
    VERSION = 1

    pipeline: str
    checkpoint_id: int  # the id it had in the pipeline it was taken from
    pending: PendingCheckpoint  # barrier, expected tasks, properties as triggered
    acks: tuple[AckRecord, ...]  # handle paths relative to the savepoint folder
    completed_at: float
    exported_at: float
    description: str = ""
    taken_from: str = ""  # the storage root it was exported from (for people, not code)

    @property
    def handles(self) -> tuple[FileHandle, ...]:
        return tuple(h for ack in self.acks for h in ack.handles)

    @property
    def state_size(self) -> int:
        return sum(ack.state_size for ack in self.acks)

    def to_body(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "checkpoint_id": self.checkpoint_id,
            "checkpoint": self.pending.to_body(),
            "acks": [a.to_body() for a in self.acks],
            "completed_at": to_iso(self.completed_at),
            "exported_at": to_iso(self.exported_at),
            "description": self.description,
            "taken_from": self.taken_from,
            "files": len(self.handles),
            "state_size": self.state_size,
        }

    @classmethod
    def from_body(cls, key: str, body: dict[str, Any]) -> SavepointMetadata:
        pending = PendingCheckpoint.from_body(key, records.field(key, body, "checkpoint", dict))
        acks = tuple(AckRecord.from_body(key, a) for a in records.field(key, body, "acks", list))
        for handle in (h for a in acks for h in a.handles):
            _check_relative(key, handle.path)
        return cls(
            pipeline=records.field(key, body, "pipeline", str),
            checkpoint_id=records.field(key, body, "checkpoint_id", int),
            pending=pending,
            acks=acks,
            completed_at=from_iso(key, body.get("completed_at")),
            exported_at=from_iso(key, body.get("exported_at")),
            description=str(body.get("description", "")),
            taken_from=str(body.get("taken_from", "")),
        )


def _check_relative(key: str, path: str) -> None:
    # A relative path that climbs out of the folder would let a crafted savepoint read
    # (and on import, copy) any object of the store.
    parts = path.split("/")
    if not path.startswith((_DATA, _EXTERNAL)) or ".." in parts or "" in parts:
        raise CorruptRecord(key, f"file path {path!r} is not inside the savepoint folder")


def _relative_path(layout: PipelineLayout, checkpoint_id: int, path: str) -> str:
    data = layout.data_prefix(checkpoint_id)
    if path.startswith(data):
        return _DATA + path[len(data) :]
    return _EXTERNAL + path


def _imported_path(layout: PipelineLayout, checkpoint_id: int, relative: str) -> str:
    # Everything lands in the new checkpoint's own data folder, so the imported files
    # belong to it alone and GC treats them like any checkpoint's files.
    return layout.data_prefix(checkpoint_id) + relative.removeprefix(_DATA)


# -- export -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportReport:
    location: SavepointLocation
    metadata: SavepointMetadata
    files: int
    bytes: int


def export_savepoint(
    coordinator: CheckpointCoordinator,
    checkpoint_id: int,
    target: SavepointLocation,
    *,
    description: str = "",
    progress: ProgressFn | None = None,
    roots: Sequence[str] | None = None,
) -> ExportReport:
    """Copy a completed checkpoint (normally a savepoint) into `target` with relative
    paths and write `_metadata` last. Refuses a target that already holds a savepoint,
    and one outside `roots` (default: the storage root's `savepoints/`).
    Re-running after a crash redoes the copies (they are plain overwrites) and finishes.
    A local target is written by its real path and through no link (`confined`)."""
    given = target
    target = confined(
        target, default_savepoint_roots(coordinator.store) if roots is None else roots
    )
    with no_links(given):
        if target.store.exists(target.metadata_key):
            raise CheckpointError(f"{given.uri} already holds a savepoint ({METADATA} exists)")
    completed = coordinator.completed.get(checkpoint_id)
    problems = check_handles(coordinator.store, completed.durable_handles, checksums=False)
    if problems:
        raise CheckpointError(
            f"checkpoint {checkpoint_id} cannot be exported: {_problems(problems)}"
        )
    layout = coordinator.layout
    copies: list[tuple[str, str]] = []
    acks = []
    durable = set(completed.durable_handles)
    for ack in completed.acks:
        handles = []
        # A savepoint holds what a restore reads, not the epoch's channels (GC may have
        # taken them already).
        for handle in (h for h in ack.handles if h in durable):
            relative = _relative_path(layout, checkpoint_id, handle.path)
            copies.append((handle.path, target.key(relative)))
            # Self-contained: a file a checkpoint shared with its base is the savepoint's own.
            own = {k: v for k, v in handle.meta.items() if k != SHARED_FROM_META}
            handles.append(replace(handle, path=relative, meta=own))
        acks.append(replace(ack, handles=tuple(handles)))
    # A file two handles name (a sink staging its input by reference) is copied once.
    copies = list(dict.fromkeys(copies))
    total = completed.full_state_size
    _say(progress, f"exporting checkpoint {checkpoint_id}: {len(copies)} file(s) to {target}")
    with no_links(given):
        copy_objects(coordinator.store, target.store, copies, progress=progress)
    metadata = SavepointMetadata(
        pipeline=coordinator.pipeline,
        checkpoint_id=checkpoint_id,
        pending=completed.pending,
        acks=tuple(acks),
        completed_at=completed.completed_at,
        exported_at=coordinator.clock(),
        description=description,
        taken_from=coordinator.store.uri,
    )
    try:
        with no_links(given):
            target.store.create(target.metadata_key, metadata.encode())
    except ObjectAlreadyExists:
        raise CheckpointError(
            f"{target.uri}: another export wrote {METADATA} first; this one is discarded"
        ) from None
    _say(progress, f"savepoint written: {target.uri}")
    return ExportReport(target, metadata, len(copies), total)


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
    return SavepointMetadata.decode(location.store.child(location.metadata_key), data)


def check_savepoint(
    location: SavepointLocation,
    metadata: SavepointMetadata | None = None,
    *,
    checksums: bool = False,
) -> list[FileProblem]:
    """Every file the savepoint references exists in its folder with the recorded size
    (and checksum, when asked); problems name paths relative to the folder."""
    metadata = metadata or read_savepoint(location)
    located = [replace(h, path=location.key(h.path)) for h in metadata.handles]
    with no_links(location):
        problems = check_handles(location.store, located, checksums=checksums)
    return [FileProblem(p.path[len(location.prefix) :], p.problem) for p in problems]


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


# -- import -----------------------------------------------------------------------------


IMPORT_ATTEMPT = "savepoint-import"


def import_savepoint(
    coordinator: CheckpointCoordinator,
    location: SavepointLocation,
    *,
    checksums: bool = False,
    progress: ProgressFn | None = None,
    roots: Sequence[str] | None = None,
) -> CompletedCheckpoint:
    """Bring a savepoint folder into the pipeline's storage as a new, retained SAVEPOINT
    checkpoint (new id) and return it; the caller then restores to it.

    The steps follow the protocol instead of writing an outcome directly: a pending
    record first (so a crash half-way leaves a pending checkpoint that expires and is
    garbage-collected, never a half-copied completed one), then the files, then one ack
    per task, then `try_finalize`, which checks every file before deciding COMPLETED.
    The source must lie under `roots` (default: the storage root's `savepoints/`); a
    local one is read by its real path and through no link (`confined`)."""
    given = location
    location = confined(
        location, default_savepoint_roots(coordinator.store) if roots is None else roots
    )
    metadata = read_savepoint(location)
    if metadata.pipeline != coordinator.pipeline:
        raise RestoreRefused(
            f"{given.uri} is a savepoint of pipeline '{metadata.pipeline}', "
            f"not of '{coordinator.pipeline}'"
        )
    problems = check_savepoint(location, metadata, checksums=checksums)
    if problems:
        raise RestoreRefused(f"savepoint {given.uri} is damaged: {_problems(problems)}")

    layout = coordinator.layout
    coordinator.finish_restore()
    now = coordinator.clock()
    entry = _admit_import(coordinator, now)
    checkpoint_id = entry.checkpoint_id
    source = metadata.pending
    pending = PendingCheckpoint(
        pipeline=coordinator.pipeline,
        checkpoint_id=checkpoint_id,
        type=CheckpointType.SAVEPOINT,
        base_checkpoint_id=None,
        restore_generation=entry.restore_generation,
        barrier=dict(source.barrier),
        base_barrier=dict(source.base_barrier),
        expected_tasks=source.expected_tasks,
        trigger_time=now,
        deadline=entry.deadline,
        properties={
            **source.properties,
            "imported_from": given.uri,
            SAVEPOINT_ID_PROPERTY: metadata.checkpoint_id,
            TAKEN_FROM_PROPERTY: metadata.taken_from,
            "savepoint_description": metadata.description,
        },
    )
    coordinator.store.create(layout.active(checkpoint_id), pending.encode())
    _say(
        progress,
        f"importing savepoint {given.uri} as checkpoint {checkpoint_id}: "
        f"{len(metadata.handles)} file(s)",
    )
    copies = list(
        dict.fromkeys(
            (location.key(h.path), _imported_path(layout, checkpoint_id, h.path))
            for h in metadata.handles
        )
    )
    with no_links(location):
        copy_objects(location.store, coordinator.store, copies, progress=progress)
    for ack in metadata.acks:
        handles = [
            replace(h, path=_imported_path(layout, checkpoint_id, h.path)) for h in ack.handles
        ]
        result = coordinator.acknowledge(
            checkpoint_id, ack.task, IMPORT_ATTEMPT, handles, ack.metrics
        )
        if result is not TaskAcknowledgeResult.SUCCESS:
            raise RestoreRefused(
                f"importing savepoint {given.uri}: the ack of {ack.task} was {result.value}"
            )
    outcome = coordinator.try_finalize(checkpoint_id)
    if outcome is None or outcome.status is not CheckpointStatus.COMPLETED:
        why = outcome.message if outcome else "not every task acknowledged"
        raise RestoreRefused(f"importing savepoint {given.uri} failed: {why}")
    assert outcome.completed is not None
    _say(progress, f"savepoint imported as checkpoint {checkpoint_id}")
    return outcome.completed


def _admit_import(coordinator: CheckpointCoordinator, now: float) -> PendingEntry:
    """Admit the import like a savepoint trigger (one CAS), with no base: the imported
    state is self-contained."""
    history = coordinator.ids.peek() > 1
    checkpoint_id = coordinator.ids.get_and_increment()
    deadline = now + coordinator.config.timeout

    def admit(current: ControlRecord | None) -> ControlRecord:
        control = coordinator.decider.check(
            current, CheckpointType.SAVEPOINT, now, has_history=history
        )
        entry = PendingEntry(
            checkpoint_id, CheckpointType.SAVEPOINT, None, control.restore_generation, deadline
        )
        return replace(control, pending=(*control.pending, entry))

    try:
        admitted, _ = coordinator.control.update(admit)
    except ControlUnreadable as exc:
        raise RestoreRefused(str(exc)) from None
    assert admitted is not None
    entry = admitted.pending_entry(checkpoint_id)
    assert entry is not None
    return entry


# -- dispose ----------------------------------------------------------------------------


def dispose_savepoint(coordinator: CheckpointCoordinator, checkpoint_id: int) -> None:
    """Remove a retained savepoint from the pipeline (its files go with the next GC
    passes). Refused while it is the head, the base of a pending checkpoint, or a
    retained checkpoint references its files (an incremental chain built on it)."""
    c = coordinator
    control = c.control.load()
    entry = control.retained_entry(checkpoint_id)
    if entry is None or entry.type is not CheckpointType.SAVEPOINT:
        raise CheckpointError(
            f"checkpoint {checkpoint_id} of pipeline '{c.pipeline}' is not a retained savepoint"
        )
    folder = c.layout.checkpoint(checkpoint_id)
    for other in control.retained_ids():
        if other == checkpoint_id:
            continue
        handles = c.completed.get(other).handles
        if any(h.path.startswith(folder) for h in handles):
            raise CheckpointError(
                f"savepoint {checkpoint_id} cannot be disposed of: retained checkpoint "
                f"{other} references its files"
            )
    try:
        c.completed.release(checkpoint_id, now=c.clock())
    except CheckpointNotFound:
        raise CheckpointError(
            f"savepoint {checkpoint_id} cannot be disposed of: it is the head or the "
            "base of a pending checkpoint (restore another checkpoint first)"
        ) from None


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
    step = max(1, len(pairs) // 10)

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
            if progress is not None and (done % step == 0 or done == len(pairs)):
                progress(f"  copied {done}/{len(pairs)} file(s)")
    return out


def _problems(problems: list[FileProblem]) -> str:
    shown = "; ".join(map(str, problems[:5]))
    return shown + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")


def _say(progress: ProgressFn | None, line: str) -> None:
    if progress is not None:
        progress(line)


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
