"""Keeping a pipeline's storage in order: garbage collection, clearing the failure
counter, and the quarantine that restores and the quality gate fill."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from batchpoint.errors import BatchpointError, CheckpointNotFound, ConfigError, CorruptRecord
from batchpoint.ops.sinks import sink_directory
from batchpoint.protocol.checkpoint import CheckpointOutcome
from batchpoint.protocol.findings import Finding
from batchpoint.protocol.gc import GcReport
from batchpoint.protocol.pipeline_ports import (
    CheckpointDecisions,
    PipelineHistory,
    PipelineMaintenance,
)
from batchpoint.protocol.repair import RepairStatus
from batchpoint.protocol.sink_tables import SinkTables, TableReferences
from batchpoint.protocol.stopping import NotStopped
from batchpoint.quality.quarantine import QuarantineRecord, first_finding
from batchpoint.storage.base import ObjectStore
from batchpoint.tables.binding import TableBinding


def gc(
    coordinator: CheckpointDecisions,
    store: ObjectStore,
    *,
    dry_run: bool = False,
    history_limit: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> GcReport:
    """Settle the pipeline's pending checkpoints (expire the overdue ones, finalize the
    complete ones), then delete files no retained checkpoint and no snapshot of a table
    in `store` (the storage root) references (nothing with `dry_run`), and the records
    of settled, unretained checkpoints beyond the newest `history_limit` (the pipeline's
    BATCHPOINT_HISTORY_LIMIT when not given). Every GC of a pipeline goes through
    here, so none forgets its table sinks."""
    if history_limit is not None and history_limit < 0:
        raise ConfigError(f"history limit must be >= 0, got {history_limit}")
    if history_limit is None:
        history_limit = coordinator.config.history_limit
    # Settle first: a checkpoint left pending (its DAG paused, its run killed) expires
    # past its ack or audit deadline here, instead of staying "in progress" until the
    # next trigger. A dry run settles nothing: it writes nothing.
    settled = [] if dry_run else coordinator.settle()
    collector = coordinator.garbage_collector(tables=_TablesOfThePass(coordinator, store))
    report = collector.collect(dry_run=dry_run, history_limit=history_limit, progress=progress)
    report.settled = settled
    report.findings.extend(collector.recorded_findings())
    return report


def sink_tables(coordinator: PipelineHistory, store: ObjectStore) -> SinkTables | None:
    """The pipeline's table sinks (their tables in `store`, the storage root) by uid,
    from the spec it registered, the topologies its checkpoints recorded and its stored
    manifests: a sink the code no longer declares keeps its table's files referenced
    while its manifest stands, after the last checkpoint that had it is gone too (the
    table's snapshots still read them: invariant 14). None: it has none, or registered
    no graph yet. A spec or a record that cannot be read could name tables: GC then
    gets a port that refuses, and deletes nothing."""
    try:
        sinks = sink_directory(coordinator, pending=False, names=False, published=True).sinks
    except CheckpointNotFound:
        return None
    except BatchpointError as exc:
        return _Unreadable(f"the pipeline's spec: {exc}")
    bindings = {}
    for sink in sinks:
        binding = TableBinding.from_properties(sink.properties)
        if binding is not None:
            bindings[sink.ref] = binding
    if not bindings:
        return None
    from batchpoint.tables.references import PipelineTables

    return PipelineTables(store, coordinator.pipeline, bindings)


def table_findings(coordinator: PipelineHistory, store: ObjectStore) -> list[Finding]:
    """The table sinks that lag their manifests or cannot be read (`verify`, the UI)."""
    tables = sink_tables(coordinator, store)
    if tables is None:
        return []
    if isinstance(tables, _Unreadable):
        return [Finding("sink tables", tables.why)]
    return tables.findings()


@dataclass
class _TablesOfThePass:
    """The table sinks as the GC pass finds them: read when the pass first asks, after it
    read the control record that fences it, never when the collector is built. A pass
    that judged "no table sinks" before the pipeline registered one would delete files
    of a table snapshot committed meanwhile (concurrency model seed 71118)."""

    coordinator: PipelineHistory
    store: ObjectStore
    _found: list[SinkTables | None] = field(default_factory=list)

    def _tables(self) -> SinkTables | None:
        if not self._found:
            self._found.append(sink_tables(self.coordinator, self.store))
        return self._found[0]

    def expire(self) -> None:
        if (tables := self._tables()) is not None:
            tables.expire()

    def references(self) -> TableReferences:
        tables = self._tables()
        return tables.references() if tables is not None else TableReferences()

    def head(self, sink: str) -> int | None:
        tables = self._tables()
        if tables is None:
            # No table sinks: no table judges a pin, and every pin counts as live, as
            # for a collector given no tables (protocol/sinks.py: a head that raises).
            raise LookupError(f"pipeline '{self.coordinator.pipeline}' has no table sinks")
        return tables.head(sink)


@dataclass(frozen=True)
class _Unreadable:
    why: str

    def expire(self) -> None:
        raise BatchpointError(self.why)

    def references(self) -> TableReferences:
        raise BatchpointError(self.why)

    def head(self, sink: str) -> int | None:
        raise BatchpointError(self.why)


def gc_summary(report: GcReport) -> dict[str, Any]:
    return {
        "dry_run": report.dry_run,
        "deleted_files": len(report.deleted_files),
        "deleted_bytes": report.deleted_bytes,
        "pruned_checkpoints": report.pruned_checkpoints,
        "skipped_pending": report.skipped_pending,
        "settled": [settled_json(o) for o in report.settled],
        "findings": [str(f) for f in report.findings],
    }


def settled_json(outcome: CheckpointOutcome) -> dict[str, Any]:
    return {
        "checkpoint_id": outcome.checkpoint_id,
        "status": outcome.status.value,
        "reason": None if outcome.reason is None else outcome.reason.code,
        "message": outcome.message,
    }


def settled_line(outcome: CheckpointOutcome) -> str:
    """`checkpoint 7: ABORTED (expired: not acknowledged within 600s by: ...)`."""
    if outcome.reason is None:
        return f"checkpoint {outcome.checkpoint_id}: {outcome.status.value}"
    why = f"{outcome.reason.code}: {outcome.message}"
    return f"checkpoint {outcome.checkpoint_id}: {outcome.status.value} ({why})"


@dataclass
class ResetResult:
    pipeline: str
    status: str
    previous_status: str


def reset(coordinator: PipelineMaintenance) -> ResetResult:
    """Clear a FAILED pipeline's consecutive-failure counter so that it triggers again."""
    try:
        before = coordinator.failures.state().status.value
    except CorruptRecord:
        before = "unreadable"  # the reset replaces it
    coordinator.reset_failures()
    return ResetResult(coordinator.pipeline, coordinator.failures.state().status.value, before)


@dataclass
class ResumeResult:
    pipeline: str
    savepoint: int  # the stop-with-savepoint that had stopped it
    stopped_at: float

    def to_json(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "resumed": True, "savepoint": self.savepoint}


def resume(coordinator: PipelineMaintenance) -> ResumeResult:
    """Start a pipeline a stop-with-savepoint stopped: clear `stopped` in the control
    record (one CAS), so triggers run again from its head. NotStopped when it is not
    stopped (protocol/stopping.py), or when its control record is lost: whether it is
    stopped cannot be told then, and repair rebuilds the stop."""
    try:
        cleared = coordinator.resume()
    except NotStopped:
        if (lost := coordinator.lost_control()) is not None:
            raise NotStopped(lost) from None
        raise
    return ResumeResult(coordinator.pipeline, cleared.savepoint, cleared.at)


def quarantined(coordinator: PipelineHistory) -> list[QuarantineRecord]:
    """The checkpoints a restore found damaged or the quality gate refused, oldest id
    first (one whose record cannot be read is listed all the same: it still holds)."""
    return coordinator.quarantine.records()


def quarantine_json(record: QuarantineRecord) -> dict[str, Any]:
    return {
        "checkpoint_id": record.checkpoint_id,
        "quarantined_at": record.quarantined_at or None,
        "found_by": record.found_by.value,
        "reason": record.reason,
        "report": None if record.report is None else dict(record.report),
    }


def quarantine_reason(coordinator: PipelineHistory, record: QuarantineRecord) -> str:
    """Why it is held, in one line (the gate's first finding, or what a restore found)."""
    return first_finding(record, coordinator.pipeline)


def release_quarantine(coordinator: PipelineHistory, checkpoint_id: int) -> QuarantineRecord:
    """Make a quarantined checkpoint a restore candidate again (its records, files and
    the gate are checked afresh); what held it. An error when it is not quarantined."""
    store = coordinator.quarantine
    held = store.held(checkpoint_id)
    if held is None or not store.release(checkpoint_id):
        quarantined = store.ids()
        if checkpoint_id not in coordinator.checkpoint_ids():
            raise BatchpointError(
                f"pipeline {coordinator.pipeline} has no checkpoint {checkpoint_id} "
                f"(quarantined: {_ids(quarantined)})"
            )
        raise BatchpointError(
            f"checkpoint {checkpoint_id} of pipeline {coordinator.pipeline} is not "
            f"quarantined (quarantined: {_ids(quarantined)})"
        )
    return held


def _ids(ids: list[int]) -> str:
    return ", ".join(map(str, ids)) if ids else "none"


@dataclass
class RepairResult:
    pipeline: str
    status: str  # written, dry-run, refused, unchanged, lost
    previous: str  # the control record repair found: missing, unreadable or readable
    head: int | None
    restore_generation: int
    retained: list[int]
    pending: list[int]
    abandoned: list[int]  # open checkpoints the new generation aborts
    queued: list[int]  # ids newly in GC's queue
    held: list[int]  # kept out of every set: their records cannot be judged
    restore: dict[str, Any] | None  # the restore in flight that rewinds the sinks
    findings: list[str]
    changes: list[str]  # against a readable record
    agrees: bool  # a readable record the records agree with: --force would write nothing
    reason: str
    replaced: bool
    dry_run: bool
    # restores the records cannot settle (repair refuses until --head says which):
    # {"restore_generation": G, "checkpoint": the target, or None when unreadable}
    in_doubt: list[dict[str, int | None]]

    @property
    def refused(self) -> bool:
        """Nothing was written although the command meant to write (exit code 1)."""
        return self.status in (RepairStatus.REFUSED, RepairStatus.LOST)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def repair(
    coordinator: PipelineMaintenance,
    *,
    dry_run: bool = False,
    force: bool = False,
    head: int | None = None,
) -> RepairResult:
    """Rebuild a missing or unreadable control record from the records that remain (a
    readable one only with `force`): the head the restore history proves, the retained
    set, a new restore generation rewinding the sinks to the head; written by
    compare-and-swap on what was read. Nothing is written with `dry_run`. `head`: the
    checkpoint to rebuild on where the records cannot prove one (a restore in doubt)."""
    report = coordinator.repair(dry_run=dry_run, force=force, head=head)
    # where the records agree, the record read stands: the plan's new generation (every
    # rebuild is a restore to its head) would not be written
    control = report.previous.record if report.agrees else None
    control = control or report.control
    return RepairResult(
        pipeline=coordinator.pipeline,
        status=report.status.value,
        previous=report.previous.state,
        head=control.head,
        restore_generation=control.restore_generation,
        retained=control.retained_ids(),
        pending=sorted(p.checkpoint_id for p in control.pending),
        abandoned=[] if report.agrees else list(report.plan.abandoned),
        queued=list(report.plan.queued),
        held=report.plan.held,
        restore=control.restore.to_json() if control.restore else None,
        findings=[str(f) for f in report.findings],
        changes=list(report.changes),
        agrees=report.agrees,
        reason=report.reason,
        replaced=report.replaced,
        dry_run=dry_run,
        in_doubt=[
            {"restore_generation": i.restore_generation, "checkpoint": i.checkpoint_id}
            for i in report.plan.in_doubt
        ],
    )
