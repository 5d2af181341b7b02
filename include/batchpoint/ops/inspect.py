"""Read-only views of a pipeline's checkpoints: the history, one checkpoint with its
tasks, and summary statistics with the failure counter. They write nothing, and each
record they read is read on its own: one that cannot be read is a finding beside what
could be (invariant 11: damage is a finding, never a blocker)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from batchpoint.errors import CheckpointNotFound, ConfigError, RecordError
from batchpoint.protocol.control import ControlUnreadable
from batchpoint.protocol.failures import FailureState, PipelineStatus
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.protocol.quarantine import QuarantineRecord
from batchpoint.protocol.records import to_iso
from batchpoint.protocol.stats import CheckpointStats, Summary, TaskStats, held_but_missing

_T = TypeVar("_T")

#: The damage a read of one pipeline's records can meet: said, never raised past it.
DAMAGE = (RecordError, ControlUnreadable)


def read_or_finding(read: Callable[[], _T], findings: list[str]) -> _T | None:
    """What `read` returns, or None with the damage it met added to `findings`."""
    try:
        return read()
    except DAMAGE as exc:
        findings.append(str(exc))
        return None


@dataclass
class CheckpointHistory:
    pipeline: str
    head: int | None
    retained: list[int]
    checkpoints: list[CheckpointStats]
    #: The records that could not be read (the rest is shown): a finding each.
    findings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "head": self.head,
            "retained": self.retained,
            "checkpoints": [s.to_json() for s in self.checkpoints],
            "findings": self.findings,
        }


def list_checkpoints(coordinator: PipelineHistory, limit: int | None = None) -> CheckpointHistory:
    """The history (the newest `limit`), the head and the retained checkpoints; a record
    that cannot be read (the control record, an outcome) is a finding or an UNREADABLE
    row, and the rest still lists."""
    if limit is not None and limit < 0:
        raise ConfigError(f"limit must be >= 0, got {limit}")
    c = coordinator
    findings: list[str] = []
    # history(0) would be every checkpoint (ids[-0:]): the newest none is none.
    history = [] if limit == 0 else read_or_finding(partial(c.stats.history, limit), findings)
    head = read_or_finding(c.head.get, findings)
    retained = read_or_finding(c.completed.retained_ids, findings)
    return CheckpointHistory(
        c.pipeline,
        None if head is None else head.checkpoint_id,
        list(retained or []),
        history or [],
        list(dict.fromkeys(findings)),  # one damaged record read twice is one finding
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
    except CheckpointNotFound:
        missing = missing_but_held(coordinator, checkpoint_id)
        if missing is None:
            raise
        return CheckpointDetail(missing, [], None, 0, {}, held)
    return CheckpointDetail(
        stats,
        tasks,
        pending.base_checkpoint_id,
        pending.restore_generation,
        dict(pending.barrier),
        held,
        pending.properties.scheduler_run_id,
    )


def missing_but_held(c: PipelineHistory, checkpoint_id: int) -> CheckpointStats | None:
    """The UNREADABLE row of a checkpoint the control record holds (the head or a
    retained one) whose records are gone: damage to show, not an id never taken. None
    when the control record does not hold it, or cannot be read (a finding of its own)."""
    try:
        return held_but_missing(checkpoint_id, c.stats.standing())
    except DAMAGE:
        return None


@dataclass
class PipelineStats:
    pipeline: str
    summary: Summary
    status: str
    consecutive_failures: int
    reason: str
    #: The records that could not be read (the rest is shown): a finding each.
    findings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.summary.__dict__,
            "pipeline": self.pipeline,
            "pipeline_status": self.status,
            "consecutive_failures": self.consecutive_failures,
            "reason": self.reason,
            "findings": self.findings,
        }


def pipeline_stats(coordinator: PipelineHistory) -> PipelineStats:
    """The summary and the pipeline's status: FAILED (the failure counter), else
    NEEDS_REPAIR (the control record lost with checkpoints taken, or unreadable: every
    trigger is refused until `batchpoint repair`), else STOPPED or STOPPING (a
    stop-with-savepoint, from the control record), else RUNNING. A record that cannot
    be read (the failure or id counter) is a finding, decided without it as the
    Checkpoints pages decide (ops/overview.py)."""
    c = coordinator
    findings: list[str] = []
    failures = read_or_finding(c.failures.state, findings) or FailureState()
    status, reason = failures.status.value, failures.reason
    if failures.status is not PipelineStatus.FAILED:
        if repair := read_or_finding(partial(needs_repair, c), findings):
            status, reason = "NEEDS_REPAIR", repair
        elif stop := stop_status(c):
            status, reason = stop[0].upper(), stop[1]
    history = read_or_finding(c.stats.history, findings) or []
    return PipelineStats(
        c.pipeline,
        c.stats.summary(history),
        status,
        failures.consecutive_failures,
        reason,
        list(dict.fromkeys(findings)),
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
