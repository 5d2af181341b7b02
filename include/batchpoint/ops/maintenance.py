"""Keeping a pipeline's storage in order: garbage collection, clearing the failure
counter, and the quarantine the quality gate fills."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from batchpoint.errors import BatchpointError, ConfigError
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.gc import GarbageCollector, GcReport
from batchpoint.quality.quarantine import QuarantineRecord, QuarantineStore


def gc(
    coordinator: CheckpointCoordinator,
    *,
    dry_run: bool = False,
    history_limit: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> GcReport:
    """Delete files no retained checkpoint references (nothing with `dry_run`); with
    `history_limit`, also drop the records of settled, unretained checkpoints beyond the
    newest that many."""
    if history_limit is not None and history_limit < 0:
        raise ConfigError(f"history limit must be >= 0, got {history_limit}")
    return GarbageCollector(coordinator).collect(
        dry_run=dry_run, history_limit=history_limit, progress=progress
    )


def gc_summary(report: GcReport) -> dict[str, Any]:
    return {
        "dry_run": report.dry_run,
        "deleted_files": len(report.deleted_files),
        "deleted_bytes": report.deleted_bytes,
        "pruned_checkpoints": report.pruned_checkpoints,
        "skipped_pending": report.skipped_pending,
    }


@dataclass
class ResetResult:
    pipeline: str
    status: str
    previous_status: str


def reset(coordinator: CheckpointCoordinator) -> ResetResult:
    """Clear a FAILED pipeline's consecutive-failure counter so that it triggers again."""
    before = coordinator.failures.state().status.value
    coordinator.reset_failures()
    return ResetResult(coordinator.pipeline, coordinator.failures.state().status.value, before)


def _quarantine(coordinator: CheckpointCoordinator) -> QuarantineStore:
    return QuarantineStore(coordinator.store, coordinator.layout)


def quarantined(coordinator: CheckpointCoordinator) -> list[QuarantineRecord]:
    """The checkpoints the quality gate refused, oldest id first."""
    store = _quarantine(coordinator)
    return [r for r in (store.get(i) for i in store.ids()) if r is not None]


def quarantine_json(record: QuarantineRecord) -> dict[str, Any]:
    return {
        "checkpoint_id": record.checkpoint_id,
        "quarantined_at": record.quarantined_at,
        "report": record.report.to_body(),
    }


def release_quarantine(coordinator: CheckpointCoordinator, checkpoint_id: int) -> None:
    """Make a quarantined checkpoint a restore candidate again (the gate checks it
    afresh); an error when it is not quarantined."""
    if not _quarantine(coordinator).release(checkpoint_id):
        raise BatchpointError(
            f"checkpoint {checkpoint_id} of pipeline {coordinator.pipeline} is not quarantined"
        )
