"""Savepoints: take one (trigger a SAVEPOINT epoch, run it in-process on local Spark,
finalize and publish), export a completed checkpoint to a folder, import a folder.

The savepoint DAG runs the same steps as tasks: its trigger, the epoch's operator tasks
and finalize, then `export` (ExportSavepointOperator)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from batchpoint.errors import BatchpointError
from batchpoint.ops.epoch import LocalEpochRunner
from batchpoint.protocol.checkpoint import CheckpointStatus, CheckpointType, CompletedCheckpoint
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.savepoints import SavepointLocation, default_savepoint_prefix
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.restore import savepoint_location
from batchpoint.runtime.runner import OperatorFailed
from batchpoint.settings import Settings

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
    coordinator: CheckpointCoordinator,
    checkpoint_id: int,
    target: str | None,
    store_options: Mapping[str, str] | None = None,
) -> SavepointLocation:
    """The folder named (a URI, or a path under the storage root), else
    savepoints/<pipeline>/savepoint-<id>-<time> under the root."""
    text = (target or "").strip()
    if text:
        return savepoint_location(text, coordinator.store, store_options)
    prefix = default_savepoint_prefix(coordinator.pipeline, checkpoint_id, time.time())
    return SavepointLocation(coordinator.store, prefix)


def export(
    coordinator: CheckpointCoordinator,
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


def run_savepoint_epoch(
    pipeline: Pipeline,
    settings: Settings,
    *,
    description: str = "",
    via: str = "cli",
    stop: bool = False,
    progress: Progress = _quiet,
    allow_non_restored_state: bool = False,
) -> int:
    """Trigger a savepoint, run the epoch on local Spark (settings.spark_master),
    finalize and publish it; its id. A BatchpointError when it does not complete.
    `stop`: a stop-with-savepoint (protocol/stopping.py): no checkpoint starts after it
    until `batchpoint resume` or a restore. `allow_non_restored_state`: the deploy may leave
    state of its base unrestored."""
    # Here, not at the top: batchpoint.spark imports pyspark, which no other verb needs.
    from batchpoint.spark.session import spark_session

    progress(f"starting Spark ({settings.spark_master})")
    spark = spark_session(f"batchpoint-savepoint-{pipeline.name}", settings.spark_master)
    runner = LocalEpochRunner(
        pipeline,
        settings.store_ref,
        spark,
        settings.checkpoint,
        log=lambda line: progress(f"  {line}"),
    )
    pending = runner.driver.trigger(
        CheckpointType.SAVEPOINT,
        properties={"description": description, "via": via, "stop_pipeline": stop},
        allow_non_restored_state=allow_non_restored_state,
    )
    cid = pending.checkpoint_id
    progress(f"savepoint {cid} triggered (base {pending.base_checkpoint_id})")
    try:
        runner.run_operators(cid, progress=progress)
    except OperatorFailed as exc:
        raise BatchpointError(f"savepoint {cid} declined: {exc}") from None
    outcome, published = runner.complete(cid)
    if outcome is None or outcome.status is not CheckpointStatus.COMPLETED:
        message = outcome.message if outcome else "not every task acknowledged"
        raise BatchpointError(f"savepoint {cid} did not complete: {message}")
    progress(f"savepoint {cid} completed; published {', '.join(published) or 'nothing new'}")
    return cid


def take_savepoint(
    pipeline: Pipeline,
    settings: Settings,
    *,
    target: str | None = None,
    description: str = "",
    checkpoint_id: int | None = None,
    stop: bool = False,
    progress: Progress = _quiet,
    allow_non_restored_state: bool = False,
) -> ExportResult:
    """Run one epoch as a savepoint and export it; with `checkpoint_id`, export that
    completed checkpoint instead of running an epoch. `stop`: a stop-with-savepoint."""
    if checkpoint_id is None:
        checkpoint_id = run_savepoint_epoch(
            pipeline,
            settings,
            description=description,
            stop=stop,
            progress=progress,
            allow_non_restored_state=allow_non_restored_state,
        )
    coordinator = CheckpointCoordinator(
        settings.store_ref.open(), pipeline.name, settings.checkpoint
    )
    return export(
        coordinator,
        checkpoint_id,
        target,
        store_options=settings.store_options,
        description=description,
        roots=settings.savepoint_roots,
        progress=progress,
    )


def dispose(coordinator: CheckpointCoordinator, checkpoint_id: int) -> None:
    """Remove a retained savepoint from the pipeline; GC collects its files. Refused
    while it is the head, a pending checkpoint's base, or a retained checkpoint uses it."""
    coordinator.savepoints.dispose(checkpoint_id)


def import_folder(
    coordinator: CheckpointCoordinator,
    location: str,
    *,
    store_options: Mapping[str, str] | None = None,
    checksums: bool = False,
    roots: Sequence[str] | None = None,
    progress: Progress = _quiet,
) -> CompletedCheckpoint:
    """Bring a savepoint folder into the pipeline's storage as a new retained
    checkpoint (a restore does this itself; this is the step alone)."""
    folder = savepoint_location(location, coordinator.store, store_options)
    return coordinator.savepoints.import_folder(
        folder, checksums=checksums, roots=roots, progress=progress
    )
