"""Read-only views of a pipeline's checkpoints: the history, one checkpoint with its
tasks, and summary statistics with the failure counter. They write nothing."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from batchpoint.errors import ConfigError, RecordError
from batchpoint.protocol.control import ControlUnreadable
from batchpoint.protocol.failures import PipelineStatus
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.protocol.quarantine import QuarantineRecord
from batchpoint.protocol.records import to_iso
from batchpoint.protocol.stats import CheckpointStats, Summary, TaskStats


@dataclass
class CheckpointHistory:
    pipeline: str
    head: int | None
    retained: list[int]
    checkpoints: list[CheckpointStats]

    def to_json(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "head": self.head,
            "retained": self.retained,
            "checkpoints": [s.to_json() for s in self.checkpoints],
        }


def list_checkpoints(coordinator: PipelineHistory, limit: int | None = None) -> CheckpointHistory:
    if limit is not None and limit < 0:
        raise ConfigError(f"limit must be >= 0, got {limit}")
    # history(0) would be every checkpoint (ids[-0:]): the newest none is none.
    history = [] if limit == 0 else coordinator.stats.history(limit)
    return CheckpointHistory(
        coordinator.pipeline,
        coordinator.head.get().checkpoint_id,
        list(coordinator.completed.retained_ids()),
        history,
    )


@dataclass
class CheckpointDetail:
    stats: CheckpointStats
    tasks: list[TaskStats]
    base_checkpoint_id: int | None
    restore_generation: int
    barrier: dict[str, Any]
    #: The quarantine mark (who found it unfit, why, when); None: not quarantined.
    quarantine: QuarantineRecord | None = None
    #: The scheduler run that triggered it (an Airflow run id), if one did.
    scheduler_run_id: str | None = None

    @property
    def status_lines(self) -> list[str]:
        """Its status in words, and the quarantine that holds it, when one does."""
        shown = self.stats.shown_status
        lines = [f"status: {shown.label} ({shown.meaning})"]
        if self.quarantine is not None:
            lines.append(self.quarantine.describe())
        return lines

    @property
    def storage_requests(self) -> dict[str, int] | None:
        """The requests of every task's writes by kind (each ack counts its subtask's
        own, so they add up); None when no ack counted them."""
        counted = [t.storage_requests for t in self.tasks if t.storage_requests is not None]
        if not counted:
            return None
        total: Counter[str] = Counter()
        for requests in counted:
            total.update(requests)
        return dict(sorted(total.items()))

    def to_json(self) -> dict[str, Any]:
        out = self.stats.to_json()
        out["status_meaning"] = self.stats.shown_status.meaning
        out["storage_requests"] = self.storage_requests
        out["restore_generation"] = self.restore_generation
        out["barrier"] = dict(self.barrier)
        out["scheduler_run_id"] = self.scheduler_run_id
        out["tasks"] = [dict(t.__dict__) for t in self.tasks]
        held = self.quarantine
        out["quarantined_at"] = (held.quarantined_at or None) if held else None
        out["quarantine"] = held.describe() if held else None
        return out


def show_checkpoint(coordinator: PipelineHistory, checkpoint_id: int) -> CheckpointDetail:
    """One checkpoint; CheckpointNotFound for an id the pipeline never had. A checkpoint
    whose records cannot be read is shown as UNREADABLE with the problem, not refused;
    a quarantined one says who quarantined it, when and why."""
    held = coordinator.quarantine.held(checkpoint_id)
    try:
        pending = coordinator.get_checkpoint(checkpoint_id)
        stats, tasks = coordinator.stats.checkpoint(checkpoint_id)
    except RecordError as exc:
        unreadable = CheckpointStats.unreadable(checkpoint_id, exc)
        return CheckpointDetail(unreadable, [], None, 0, {}, held)
    return CheckpointDetail(
        stats,
        tasks,
        pending.base_checkpoint_id,
        pending.restore_generation,
        dict(pending.barrier),
        held,
        pending.properties.scheduler_run_id,
    )


@dataclass
class PipelineStats:
    pipeline: str
    summary: Summary
    status: str
    consecutive_failures: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            **self.summary.__dict__,
            "pipeline": self.pipeline,
            "pipeline_status": self.status,
            "consecutive_failures": self.consecutive_failures,
            "reason": self.reason,
        }


def pipeline_stats(coordinator: PipelineHistory) -> PipelineStats:
    """The summary and the pipeline's status: FAILED (the failure counter), else
    NEEDS_REPAIR (the control record lost with checkpoints taken, or unreadable: every
    trigger is refused until `batchpoint repair`), else STOPPED or STOPPING (a
    stop-with-savepoint, from the control record), else RUNNING."""
    tracker = coordinator.stats
    failures = coordinator.failures.state()
    status, reason = failures.status.value, failures.reason
    if failures.status is not PipelineStatus.FAILED:
        if repair := needs_repair(coordinator):
            status, reason = "NEEDS_REPAIR", repair
        elif stop := stop_status(coordinator):
            status, reason = stop[0].upper(), stop[1]
    return PipelineStats(
        coordinator.pipeline,
        tracker.summary(tracker.history()),
        status,
        failures.consecutive_failures,
        reason,
    )


def needs_repair(c: PipelineHistory) -> str | None:
    try:
        c.control_record()
    except ControlUnreadable as exc:
        return str(exc)
    return c.lost_control()


def stop_status(c: PipelineHistory) -> tuple[str, str] | None:
    """("stopped" | "stopping", why), read from the control record, where the stop is
    decided (protocol/stopping.py): what the UI shows is what refuses triggers. None
    when the pipeline runs (or its control record cannot be read: another finding)."""
    try:
        control = c.control_record()
    except ControlUnreadable:
        return None
    if control is None:
        return None
    if control.stopped is not None:
        s = control.stopped
        return "stopped", (
            f"stopped with savepoint {s.savepoint} at {to_iso(s.at)}; "
            "`batchpoint resume` or a restore starts it again"
        )
    if control.stopping is not None:
        return "stopping", f"savepoint {control.stopping.savepoint} is stopping it"
    return None
