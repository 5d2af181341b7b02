"""Keeping a pipeline's storage in order: garbage collection, clearing the failure
counter, and the quarantine that restores and the quality gate fill."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from batchpoint.errors import BatchpointError, ConfigError
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.gc import GarbageCollector, GcReport
from batchpoint.protocol.repair import repair as repair_control
from batchpoint.quality.quarantine import QuarantineRecord, QuarantineStore
from batchpoint.tables.binding import table_bindings


def gc(
    coordinator: CheckpointCoordinator,
    *,
    dry_run: bool = False,
    history_limit: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> GcReport:
    """Delete files no retained checkpoint references (nothing with `dry_run`), and the
    records of settled, unretained checkpoints beyond the newest `history_limit` (the
    pipeline's BATCHPOINT_HISTORY_LIMIT when not given)."""
    if history_limit is not None and history_limit < 0:
        raise ConfigError(f"history limit must be >= 0, got {history_limit}")
    if history_limit is None:
        history_limit = coordinator.config.history_limit
    return GarbageCollector(coordinator, before_delete=_table_expiry(coordinator)).collect(
        dry_run=dry_run, history_limit=history_limit, progress=progress
    )


def _table_expiry(coordinator: CheckpointCoordinator) -> Callable[[], None] | None:
    """For a pipeline with table sinks: expire their snapshots of dropped checkpoints."""
    try:
        bindings = table_bindings(coordinator.load_spec().operators)
    except BatchpointError:
        return None  # no graph registered yet: no table either
    if not bindings:
        return None

    def expire() -> None:
        from batchpoint.tables.service import expire_dropped

        expire_dropped(coordinator.store, coordinator.pipeline, bindings)

    return expire


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
    """The checkpoints a restore found damaged or the quality gate refused, oldest id
    first (one whose record cannot be read is listed all the same: it still holds)."""
    return _quarantine(coordinator).records()


def quarantine_json(record: QuarantineRecord) -> dict[str, Any]:
    return {
        "checkpoint_id": record.checkpoint_id,
        "quarantined_at": record.quarantined_at or None,
        "found_by": record.found_by.value,
        "reason": record.reason,
        "report": None if record.report is None else dict(record.report),
    }


def quarantine_reason(coordinator: CheckpointCoordinator, record: QuarantineRecord) -> str:
    """Why it is held, in one line (the gate's first finding, or what a restore found)."""
    return _quarantine(coordinator).first_finding(record)


def release_quarantine(coordinator: CheckpointCoordinator, checkpoint_id: int) -> QuarantineRecord:
    """Make a quarantined checkpoint a restore candidate again (its records, files and
    the gate are checked afresh); what held it. An error when it is not quarantined."""
    store = _quarantine(coordinator)
    held = store.held(checkpoint_id)
    if held is None or not store.release(checkpoint_id):
        raise BatchpointError(
            f"checkpoint {checkpoint_id} of pipeline {coordinator.pipeline} is not quarantined"
        )
    return held


@dataclass
class RepairResult:
    pipeline: str
    head: int | None
    restore_generation: int
    retained: list[int]
    findings: list[str]
    replaced: bool
    dry_run: bool

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def repair(coordinator: CheckpointCoordinator, *, dry_run: bool = False) -> RepairResult:
    """Rebuild a missing or unreadable control record from the outcome records (the
    newest intact completed checkpoints and every savepoint retained, the head on the
    newest, a new restore generation); what it skipped comes back as findings."""
    report = repair_control(coordinator, dry_run=dry_run)
    return RepairResult(
        coordinator.pipeline,
        report.head,
        report.control.restore_generation,
        report.control.retained_ids(),
        [str(f) for f in report.findings],
        report.replaced,
        dry_run,
    )
