"""A pipeline's savepoints going out and coming in: export a completed checkpoint to a
self-contained folder, import a folder as a new retained SAVEPOINT checkpoint, dispose
of a retained savepoint. The folder's format is protocol/savepoints.py's; where a folder
may lie (the savepoint roots, no links) is protocol/savepoint_paths.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from attrs import define

from batchpoint.errors import (
    CheckpointError,
    CheckpointNotFound,
    ObjectAlreadyExists,
    RestoreRefused,
)
from batchpoint.protocol.checkpoint import (
    SHARED_FROM_META,
    AckRecord,
    CheckpointOutcome,
    CheckpointStatus,
    CheckpointType,
    CompletedCheckpoint,
    FileHandle,
    PendingCheckpoint,
    TaskAcknowledgeResult,
    TaskMetrics,
)
from batchpoint.protocol.completed_store import CompletedCheckpointStore
from batchpoint.protocol.control import ControlUnreadable, PendingEntry
from batchpoint.protocol.control_store import ControlStore
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.ports import Clock, ProgressFn, RollForward
from batchpoint.protocol.quarantine import QuarantineRecord, QuarantineStore
from batchpoint.protocol.restore_candidates import release_hint
from batchpoint.protocol.savepoint_paths import savepoint_location
from batchpoint.protocol.savepoints import (
    METADATA,
    SavepointLocation,
    SavepointMetadata,
    check_savepoint,
    confined,
    copy_objects,
    default_savepoint_prefix,
    default_savepoint_roots,
    imported_path,
    no_links,
    read_savepoint,
    refuse_occupied,
    relative_path,
)
from batchpoint.protocol.verify import FileProblem, check_handles
from batchpoint.storage.base import ObjectStore

#: The attempt id of the acks an import replays.
IMPORT_ATTEMPT = "savepoint-import"

#: Admit an import (`CheckpointTrigger.admit_import`): its entry, no base.
AdmitImport = Callable[[float], PendingEntry]
#: Acknowledge one task (`AckAccounting.acknowledge`).
Acknowledge = Callable[
    [int, str, str, Iterable[FileHandle], TaskMetrics | None], TaskAcknowledgeResult
]
#: Finalize a checkpoint (`CheckpointFinalizer.try_finalize`).
Finalize = Callable[[int], CheckpointOutcome | None]


@dataclass(frozen=True)
class ImportSteps:
    """The protocol's steps an import replays, each owned by another collaborator: admit
    it (the trigger), write its pending record (the records port), acknowledge each task
    (the ack accounting), finalize it (the finalizer)."""

    admit: AdmitImport
    write_pending: Callable[[PendingCheckpoint], None]
    acknowledge: Acknowledge
    finalize: Finalize


@dataclass(frozen=True)
class ExportReport:
    location: SavepointLocation
    metadata: SavepointMetadata
    files: int
    bytes: int


@define(kw_only=True, slots=False, eq=False)
class Savepoints:
    _store: ObjectStore
    _layout: PipelineLayout
    _completed: CompletedCheckpointStore
    _control: ControlStore
    _clock: Clock
    _roll_forward: RollForward
    _steps: ImportSteps

    @property
    def _pipeline(self) -> str:
        return self._layout.pipeline

    # -- where savepoints are -----------------------------------------------------------

    def locate(self, text: str, options: Mapping[str, str] | None = None) -> SavepointLocation:
        """A folder named by a URI (opened with `options`) or by a path under the
        pipeline's storage root."""
        return savepoint_location(text, self._store, options)

    def default_location(self, checkpoint_id: int) -> SavepointLocation:
        """savepoints/<pipeline>/savepoint-<id>-<time> under the storage root."""
        prefix = default_savepoint_prefix(self._pipeline, checkpoint_id, self._clock())
        return SavepointLocation(self._store, prefix)

    def default_roots(self) -> tuple[str, ...]:
        """Where savepoint folders may be read and written when no roots are configured."""
        return default_savepoint_roots(self._store)

    # -- export -------------------------------------------------------------------------

    def export(
        self,
        checkpoint_id: int,
        target: SavepointLocation,
        *,
        description: str = "",
        progress: ProgressFn | None = None,
        roots: Sequence[str] | None = None,
    ) -> ExportReport:
        """Copy a completed checkpoint (normally a savepoint) into `target` with relative
        paths and write `_metadata` last. Refuses a target that already holds a
        savepoint, and one outside `roots` (default: the storage root's `savepoints/`).
        Re-running after a crash redoes the copies (they are plain overwrites) and
        finishes. A local target is written by its real path and through no link."""
        given = target
        target = confined(target, default_savepoint_roots(self._store) if roots is None else roots)
        # check_target asked before the epoch; another export may have written it since
        refuse_occupied(given, target)
        completed = self._completed.get(checkpoint_id)
        problems = check_handles(self._store, completed.durable_handles, checksums=False)
        if problems:
            raise CheckpointError(
                f"checkpoint {checkpoint_id} cannot be exported: {_problems(problems)}"
            )
        copies, acks = self._relocated(completed, target)
        _say(progress, f"exporting checkpoint {checkpoint_id}: {len(copies)} file(s) to {target}")
        with no_links(given):
            copy_objects(self._store, target.store, copies, progress=progress)
        metadata = SavepointMetadata(
            pipeline=self._pipeline,
            checkpoint_id=checkpoint_id,
            pending=completed.pending,
            acks=acks,
            completed_at=completed.completed_at,
            exported_at=self._clock(),
            description=description,
            taken_from=self._store.uri,
        )
        try:
            with no_links(given):
                target.store.create(target.metadata_key, metadata.encode())
        except ObjectAlreadyExists:
            raise CheckpointError(
                f"{target.uri}: another export wrote {METADATA} first; this one is discarded"
            ) from None
        _say(progress, f"savepoint written: {target.uri}")
        return ExportReport(target, metadata, len(copies), completed.full_state_size)

    def _relocated(
        self, completed: CompletedCheckpoint, target: SavepointLocation
    ) -> tuple[list[tuple[str, str]], tuple[AckRecord, ...]]:
        """The copies (source key, target key) and the acks with folder-relative paths."""
        copies: list[tuple[str, str]] = []
        acks = []
        durable = set(completed.durable_handles)
        for ack in completed.acks:
            handles = []
            # A savepoint holds what a restore reads, not the epoch's channels (GC may
            # have taken them already).
            for handle in (h for h in ack.handles if h in durable):
                relative = relative_path(self._layout, completed.checkpoint_id, handle.path)
                copies.append((handle.path, target.key(relative)))
                # Self-contained: a file a checkpoint shared with its base is its own.
                own = {k: v for k, v in handle.meta.items() if k != SHARED_FROM_META}
                handles.append(replace(handle, path=relative, meta=own))
            acks.append(replace(ack, handles=tuple(handles)))
        # A file two handles name (a sink staging its input by reference) is copied once.
        return list(dict.fromkeys(copies)), tuple(acks)

    # -- import -------------------------------------------------------------------------

    def import_folder(
        self,
        location: SavepointLocation,
        *,
        checksums: bool = False,
        progress: ProgressFn | None = None,
        roots: Sequence[str] | None = None,
    ) -> CompletedCheckpoint:
        """Bring a savepoint folder into the pipeline's storage as a new, retained
        SAVEPOINT checkpoint (new id) and return it; the caller then restores to it.

        The steps follow the protocol instead of writing an outcome directly: a pending
        record first (so a crash half-way leaves a pending checkpoint that expires and
        is garbage-collected, never a half-copied completed one), then the files, then
        one ack per task, then the finalize, which checks every file before deciding
        COMPLETED. The source must lie under `roots` (default: the storage root's
        `savepoints/`); a local one is read by its real path and through no link."""
        given = location
        location = confined(
            location, default_savepoint_roots(self._store) if roots is None else roots
        )
        metadata = read_savepoint(location)
        if metadata.pipeline != self._pipeline:
            raise RestoreRefused(
                f"{given.uri} is a savepoint of pipeline '{metadata.pipeline}', "
                f"not of '{self._pipeline}'"
            )
        if (held := held_at_home(self._store, self._pipeline, metadata)) is not None:
            raise RestoreRefused(copy_of_quarantined(given.uri, metadata.checkpoint_id, held))
        problems = check_savepoint(location, metadata, checksums=checksums, progress=progress)
        if problems:
            raise RestoreRefused(f"savepoint {given.uri} is damaged: {_problems(problems)}")
        self._roll_forward()
        checkpoint_id = self._write_pending(given, metadata)
        _say(
            progress,
            f"importing savepoint {given.uri} as checkpoint {checkpoint_id}: "
            f"{len(metadata.handles)} file(s)",
        )
        copies = dict.fromkeys(
            (location.key(h.path), imported_path(self._layout, checkpoint_id, h.path))
            for h in metadata.handles
        )
        with no_links(location):
            copy_objects(location.store, self._store, list(copies), progress=progress)
        self._replay_acks(given, metadata, checkpoint_id)
        outcome = self._steps.finalize(checkpoint_id)
        if outcome is None or outcome.status is not CheckpointStatus.COMPLETED:
            why = outcome.message if outcome else "not every task acknowledged"
            raise RestoreRefused(f"importing savepoint {given.uri} failed: {why}")
        assert outcome.completed is not None
        if checkpoint_id not in self._control.load().retained_ids():
            # A restore abandoned the import after its finalize read the control record:
            # the outcome says COMPLETED, but it is in GC's queue, its files with it.
            raise RestoreRefused(
                f"importing savepoint {given.uri} failed: a restore ran meanwhile and "
                f"abandoned checkpoint {checkpoint_id}; import it again"
            )
        _say(progress, f"savepoint imported as checkpoint {checkpoint_id}")
        return outcome.completed

    def _write_pending(self, given: SavepointLocation, metadata: SavepointMetadata) -> int:
        """Admit the import (one CAS, no base: the state is self-contained) and write
        its pending record; its new id."""
        now = self._clock()
        try:
            entry = self._steps.admit(now)
        except ControlUnreadable as exc:
            raise RestoreRefused(str(exc)) from None
        source = metadata.pending
        pending = PendingCheckpoint(
            pipeline=self._pipeline,
            checkpoint_id=entry.checkpoint_id,
            type=CheckpointType.SAVEPOINT,
            base_checkpoint_id=None,
            restore_generation=entry.restore_generation,
            barrier=dict(source.barrier),
            base_barrier=dict(source.base_barrier),
            expected_tasks=source.expected_tasks,
            trigger_time=now,
            deadline=entry.deadline,
            properties=replace(
                source.properties,
                imported_from=given.uri,
                savepoint_checkpoint_id=metadata.checkpoint_id,
                savepoint_taken_from=metadata.taken_from,
                savepoint_base_checkpoint_id=source.base_checkpoint_id,
                savepoint_description=metadata.description,
            ),
            # the uids and schemas the savepoint was taken with: the replayed acks get
            # their operator uids from it, and the next deploy is judged against it
            topology=source.topology,
        )
        self._steps.write_pending(pending)
        return entry.checkpoint_id

    def _replay_acks(
        self, given: SavepointLocation, metadata: SavepointMetadata, checkpoint_id: int
    ) -> None:
        for ack in metadata.acks:
            handles = [
                replace(h, path=imported_path(self._layout, checkpoint_id, h.path))
                for h in ack.handles
            ]
            result = self._steps.acknowledge(
                checkpoint_id, ack.task, IMPORT_ATTEMPT, handles, ack.metrics
            )
            if result is not TaskAcknowledgeResult.SUCCESS:
                raise RestoreRefused(
                    f"importing savepoint {given.uri}: the ack of {ack.task} was {result.value}"
                )

    # -- dispose ------------------------------------------------------------------------

    def dispose(self, checkpoint_id: int) -> None:
        """Remove a retained savepoint from the pipeline (its files go with the next GC
        passes). Refused while it is the head, the base of a pending checkpoint, or a
        retained checkpoint references its files (an incremental chain built on it)."""
        control = self._control.load()
        entry = control.retained_entry(checkpoint_id)
        if entry is None or entry.type is not CheckpointType.SAVEPOINT:
            raise CheckpointError(
                f"checkpoint {checkpoint_id} of pipeline '{self._pipeline}' is not a "
                "retained savepoint"
            )
        folder = self._layout.checkpoint(checkpoint_id)
        for other in control.retained_ids():
            if other == checkpoint_id:
                continue
            handles = self._completed.get(other).handles
            if any(h.path.startswith(folder) for h in handles):
                raise CheckpointError(
                    f"savepoint {checkpoint_id} cannot be disposed of: retained checkpoint "
                    f"{other} references its files"
                )
        try:
            self._completed.release(checkpoint_id, now=self._clock())
        except CheckpointNotFound:
            raise CheckpointError(
                f"savepoint {checkpoint_id} cannot be disposed of: it is the head or the "
                "base of a pending checkpoint (restore another checkpoint first)"
            ) from None


def _problems(problems: list[FileProblem]) -> str:
    shown = "; ".join(map(str, problems[:5]))
    return shown + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")


def _say(progress: ProgressFn | None, line: str) -> None:
    if progress is not None:
        progress(line)


def held_at_home(
    store: ObjectStore, pipeline: str, metadata: SavepointMetadata | SavepointLocation
) -> QuarantineRecord | None:
    """The quarantine of the checkpoint a savepoint folder was exported from, when that
    was this pipeline in this storage: a copy of a quarantined checkpoint holds the same
    state, and is not restored either (invariant 11). A folder from other storage names
    ids of another history, whose marks are not here."""
    if isinstance(metadata, SavepointLocation):
        metadata = read_savepoint(metadata)
    if metadata.taken_from != store.uri or metadata.pipeline != pipeline:
        return None
    return QuarantineStore(store, PipelineLayout(pipeline)).held(metadata.checkpoint_id)


def copy_of_quarantined(uri: str, checkpoint_id: int, held: QuarantineRecord) -> str:
    return (
        f"savepoint {uri} is a copy of checkpoint {checkpoint_id}, {held.describe()}; "
        f"{release_hint(checkpoint_id)} to restore from it"
    )
