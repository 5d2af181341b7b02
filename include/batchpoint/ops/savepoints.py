"""Savepoints: export a completed checkpoint to a folder, dispose of a retained one,
import a folder.

Taking one is an epoch, planned as any other (`epoch_plan.py`: a SAVEPOINT trigger, the
operator tasks, finalize, then the export): the savepoint DAG renders that plan, and
`batchpoint savepoint` runs it in this process (`local_epoch.take_savepoint`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from batchpoint.errors import BatchpointError, RecordError
from batchpoint.protocol.checkpoint import CheckpointStatus, CheckpointType, CompletedCheckpoint
from batchpoint.protocol.control import ControlUnreadable
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.protocol.savepoints import SavepointLocation, confined, refuse_occupied

Progress = Callable[[str], None]


def _quiet(_line: str) -> None:
    pass


@dataclass
class ExportResult:
    pipeline: str
    checkpoint_id: int
    type: str
    location: str
    files: int
    bytes: int
    seconds: float

    @property
    def savepoint(self) -> bool:
        return self.type == CheckpointType.SAVEPOINT.value

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "savepoint": self.savepoint}


def savepoint_target(
    coordinator: PipelineHistory,
    checkpoint_id: int,
    target: str | None,
    store_options: Mapping[str, str] | None = None,
) -> SavepointLocation:
    """The folder named (a URI, or a path under the storage root), else
    savepoints/<pipeline>/savepoint-<id>-<time> under the root."""
    text = (target or "").strip()
    if text:
        return coordinator.savepoints.locate(text, store_options)
    return coordinator.savepoints.default_location(checkpoint_id)


def check_target(
    coordinator: PipelineHistory,
    target: str | None,
    store_options: Mapping[str, str] | None = None,
    roots: Sequence[str] | None = None,
) -> None:
    """Refuse a savepoint target the export would refuse (outside `roots`, keys in it, a
    path that is no folder name, a savepoint there already), before the savepoint's
    epoch runs: a run refused only at its export has taken the savepoint (and, asked
    to, stopped the pipeline) for nothing. The export checks again (another export may
    write the folder meanwhile). No target: the default folder, a new one under the
    root's savepoints/."""
    if (target or "").strip():
        location = coordinator.savepoints.locate(target.strip(), store_options)
        roots = coordinator.savepoints.default_roots() if roots is None else roots
        refuse_occupied(location, confined(location, roots))


def discarded(coordinator: PipelineHistory, checkpoint_id: int) -> str | None:
    """Why a completed checkpoint is no longer there to read (subsumed or expired: its
    files collected, or queued for GC), or None: retained, not completed, or the
    control record cannot say (lost or unreadable: a finding of its own)."""
    try:
        control = coordinator.control_record()  # None: lost, or no checkpoint yet
        if control is None or control.retained_entry(checkpoint_id) is not None:
            return None
        outcome = coordinator.get_outcome(checkpoint_id)
    except (ControlUnreadable, RecordError):
        return None
    if outcome is None or outcome.completed is None:
        return None
    retained = control.retained_ids()
    return (
        f"checkpoint {checkpoint_id} of pipeline '{coordinator.pipeline}' was discarded (no "
        "longer retained: its files are collected or queued for GC; retained: "
        f"{', '.join(map(str, retained)) or 'none'})"
    )


def export(
    coordinator: PipelineHistory,
    checkpoint_id: int,
    target: str | None = None,
    *,
    store_options: Mapping[str, str] | None = None,
    description: str = "",
    roots: Sequence[str] | None = None,
    progress: Progress = _quiet,
) -> ExportResult:
    """Copy a completed checkpoint (normally a savepoint) into its folder with relative
    paths and `_metadata`; the folder must lie under `roots` (BATCHPOINT_SAVEPOINT_ROOTS;
    None: the storage root's savepoints/)."""
    outcome = coordinator.get_outcome(checkpoint_id)
    if outcome is None or outcome.status is not CheckpointStatus.COMPLETED:
        raise BatchpointError(f"checkpoint {checkpoint_id} did not complete: nothing to export")
    if (gone := discarded(coordinator, checkpoint_id)) is not None:
        raise BatchpointError(f"{gone}: nothing to export")
    location = savepoint_target(coordinator, checkpoint_id, target, store_options)
    started = time.monotonic()
    report = coordinator.savepoints.export(
        checkpoint_id,
        location,
        description=description,
        roots=roots,
        progress=progress,
    )
    return ExportResult(
        coordinator.pipeline,
        checkpoint_id,
        outcome.pending.type.value,
        report.location.uri,
        report.files,
        report.bytes,
        round(time.monotonic() - started, 3),
    )


def dispose(coordinator: PipelineHistory, checkpoint_id: int) -> None:
    """Remove a retained savepoint from the pipeline; GC collects its files. Refused
    while it is the head, a pending checkpoint's base, or a retained checkpoint uses it."""
    coordinator.savepoints.dispose(checkpoint_id)


def import_folder(
    coordinator: PipelineHistory,
    location: str,
    *,
    store_options: Mapping[str, str] | None = None,
    checksums: bool = False,
    roots: Sequence[str] | None = None,
    progress: Progress = _quiet,
) -> CompletedCheckpoint:
    """Bring a savepoint folder into the pipeline's storage as a new retained
    checkpoint (a restore does this itself; this is the step alone)."""
    folder = coordinator.savepoints.locate(location, store_options)
    return coordinator.savepoints.import_folder(
        folder, checksums=checksums, roots=roots, progress=progress
    )
