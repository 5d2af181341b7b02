"""What the Checkpoints pages show, read from the records: a pipeline's status at a
glance, one page of its history with the page's summary, and one checkpoint in full
(tasks, quality-gate report, quarantine, files). Read-only, and each costs storage
requests in proportion to what it shows, not to the history's length."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from batchpoint.errors import RecordError
from batchpoint.ops.inspect import (
    DAMAGE,
    CheckpointDetail,
    needs_repair,
    read_or_finding,
    show_checkpoint,
    stop_status,
)
from batchpoint.ops.maintenance import table_findings
from batchpoint.ops.restore_history import RestoreEvent, latest_restore
from batchpoint.protocol.checkpoint import (
    ADOPTED_FROM_META,
    SHARED_FROM_META,
    AckRecord,
    CheckpointStatus,
    CheckpointType,
    FileHandle,
)
from batchpoint.protocol.control import ControlRecord, ControlUnreadable
from batchpoint.protocol.failures import FailureState, PipelineStatus
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.protocol.stats import CheckpointStats, CheckpointStatsTracker, HistoryPage
from batchpoint.quality.report import CandidateReport
from batchpoint.storage.base import ObjectStore


@dataclass(frozen=True)
class PipelineOverview:
    pipeline: str
    #: "running", "failing" (consecutive failures past the tolerable bound),
    #: "needs_repair" (the control record lost or unreadable: `pipeline_stats`' NEEDS_REPAIR,
    #: every trigger refused until `batchpoint repair`), "stopping" or "stopped" (a
    #: stop-with-savepoint, read from the control record), or "unreadable" (a record this
    #: overview needs cannot be read: the finding says which).
    status: str
    status_detail: str
    head: int | None
    latest_checkpoint: int | None  # newest completed checkpoint on the first page
    latest_savepoint: int | None
    pending: list[int]
    consecutive_failures: int
    #: Checkpoints and savepoints ever triggered (the id counter); None: it cannot be read.
    triggered: int | None
    #: What needs an operator's eye: a table sink whose table lags its manifest, or
    #: cannot be read; a record that cannot be read (invariant 11: damage is a finding).
    findings: list[str] = field(default_factory=list)
    #: The restore that last moved the head (Flink's "Latest Restore"); None: none yet.
    latest_restore: RestoreEvent | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def unreadable(cls, pipeline: str, problem: str) -> PipelineOverview:
        """A pipeline whose status cannot be read at all: its row says why, beside the
        other pipelines' rows (damage is a finding, never a blocker)."""
        return cls(pipeline, "unreadable", problem, None, None, None, [], 0, None, [problem])


def history_page(
    c: PipelineHistory, before: int | None, limit: int
) -> tuple[HistoryPage, list[str]]:
    """A page of the history; empty with why when it cannot be paged (the id counter
    it counts down from is unreadable), so the rest of the pipeline's page still shows."""
    try:
        return c.stats.page(before, limit), []
    except DAMAGE as exc:
        return HistoryPage([], None), [f"the history cannot be paged: {exc}"]


def pipeline_overview(
    coordinator: PipelineHistory,
    store: ObjectStore,
    first_page: HistoryPage,
    damage: Sequence[str] = (),
) -> PipelineOverview:
    """The pipeline's status (`store`: the storage root, where its table sinks are);
    `first_page` is its newest history page (already read for the page that shows it,
    so it is not read twice); `damage`: what could not be read for it (findings).
    Each record is read on its own: one that cannot be read is a finding, and the rest
    still shows."""
    c = coordinator
    findings = list(damage)
    # The failure counter only tells "failing": without it the rest still shows.
    failures = read_or_finding(c.failures.state, findings) or FailureState()
    rows = first_page.checkpoints
    completed = [s for s in rows if s.status is CheckpointStatus.COMPLETED]
    latest_checkpoint = next(
        (s.checkpoint_id for s in completed if s.type is CheckpointType.CHECKPOINT), None
    )
    latest_savepoint = next(
        (s.checkpoint_id for s in completed if s.type is CheckpointType.SAVEPOINT), None
    )
    if latest_savepoint is None:
        latest_savepoint = _newest_retained_savepoint(c)
    status, detail = _status(c, failures, findings)
    if status == "needs_repair":
        findings.append(detail)
    head = read_or_finding(c.head.get, findings)
    triggered = read_or_finding(c.ids.peek, findings)
    findings += [
        f"checkpoint {s.checkpoint_id} is unreadable: {s.failure_message}"
        for s in rows
        if s.status is CheckpointStatus.UNREADABLE
    ]
    findings += [str(f) for f in table_findings(c, store)]
    return PipelineOverview(
        c.pipeline,
        status,
        detail,
        None if head is None else head.checkpoint_id,
        latest_checkpoint,
        latest_savepoint,
        [s.checkpoint_id for s in rows if s.status is CheckpointStatus.PENDING],
        failures.consecutive_failures,
        None if triggered is None else triggered - 1,
        list(dict.fromkeys(findings)),  # one damaged record read twice is one finding
        latest_restore(control_of(c)),
    )


def _status(c: PipelineHistory, failures: FailureState, findings: list[str]) -> tuple[str, str]:
    """The status and why, decided as `pipeline_stats` decides it (the CLI's status):
    failing, else needs repair, else stopped or stopping, else running. Whether the
    control record is lost is told by the id counter: an unreadable one is a finding."""
    if failures.status is PipelineStatus.FAILED:
        return "failing", (
            f"{failures.consecutive_failures} consecutive failures, past the tolerable "
            f"{c.config.tolerable_failed_checkpoints}: {failures.reason}"
        )
    if repair := read_or_finding(partial(needs_repair, c), findings):
        return "needs_repair", repair
    return stop_status(c) or ("running", "")


def control_of(c: PipelineHistory) -> ControlRecord | None:
    """The control record, None when there is none or it cannot be read (a finding that
    `batchpoint repair` reports; the pages still show the rest)."""
    try:
        return c.control_record()
    except ControlUnreadable:
        return None


def _newest_retained_savepoint(c: PipelineHistory) -> int | None:
    """Savepoints stay retained until disposed, so an old one is among the few retained."""
    try:
        retained = c.completed.retained_ids()
    except DAMAGE:
        return None  # the control record's damage is a finding of its own
    for cid in sorted(retained, reverse=True):
        try:
            if c.get_checkpoint(cid).type is CheckpointType.SAVEPOINT:
                return cid
        except Exception:
            continue
    return None


@dataclass(frozen=True)
class CheckpointPage:
    """One checkpoint in full, for its drill-down page."""

    detail: CheckpointDetail
    report: CandidateReport | None
    quarantined_at: float | None
    files: list[dict[str, Any]]
    quarantine: str | None = None  # why it is held: who found what, and when
    #: What could not be read for the page (the quality report): a finding each.
    findings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = self.detail.to_json()
        out["quality_report"] = (
            None
            if self.report is None
            else {**self.report.to_body(), "lines": self.report.render(indent="")}
        )
        out["quarantined_at"] = self.quarantined_at
        out["quarantine"] = self.quarantine
        out["files"] = self.files
        out["findings"] = self.findings
        return out


def checkpoint_page(coordinator: PipelineHistory, checkpoint_id: int) -> CheckpointPage:
    """CheckpointNotFound for an id with no records (but one the control record holds,
    whose records are gone, is shown as unreadable: the history's row says so too).
    A quality report that cannot be read is a finding; the rest of the page shows."""
    c = coordinator
    detail = show_checkpoint(c, checkpoint_id)
    findings: list[str] = []
    report = read_or_finding(partial(_quality_report, c, checkpoint_id), findings)
    findings = [f"the quality-gate report cannot be read: {f}" for f in findings]
    held = detail.quarantine
    files = [
        {
            "task": str(ack.task),
            "stream": h.name,
            "path": h.path,
            "size": h.size,
            "rows": h.rows,
            "key_groups": None if h.key_group_range is None else list(h.key_group_range),
            "origin": file_origin(h),
        }
        for ack in sorted(_acks(c, checkpoint_id), key=lambda a: str(a.task))
        for h in ack.handles
    ]
    if held is None:
        return CheckpointPage(detail, report, None, files, findings=findings)
    when = held.quarantined_at or None
    return CheckpointPage(detail, report, when, files, held.describe(), findings)


def _quality_report(c: PipelineHistory, checkpoint_id: int) -> CandidateReport | None:
    """The gate's report stored beside the checkpoint; None: none was stored."""
    stored = c.reports.quality_report(checkpoint_id)
    return CandidateReport.decode(stored.key, stored.data) if stored else None


def _acks(c: PipelineHistory, checkpoint_id: int) -> list[AckRecord]:
    """The checkpoint's acks: the outcome's once settled, else those stored so far."""
    try:
        outcome = c.get_outcome(checkpoint_id)
        if outcome is not None and outcome.completed is not None:
            return list(outcome.completed.acks)
        return list(c.acks(checkpoint_id).values())
    except RecordError:
        return []  # the detail says why: its status is UNREADABLE, with the problem


def file_origin(handle: FileHandle) -> str:
    """Where a checkpoint's file came from: written by this checkpoint (a changelog layer
    says so), shared from an earlier checkpoint's, or a channel a sink staged by reference."""
    if SHARED_FROM_META in handle.meta:
        return f"shared from checkpoint {handle.meta[SHARED_FROM_META]}"
    if ADOPTED_FROM_META in handle.meta:
        return f"staged from {handle.meta[ADOPTED_FROM_META]}"
    layer = int(handle.meta.get("layer", 0))
    return f"written (changelog layer {layer})" if layer else "written"


def page_summary(rows: list[CheckpointStats]) -> dict[str, Any]:
    """Counts and min/avg/max of duration and state size over the page's checkpoints."""
    summary = CheckpointStatsTracker.summary(rows)
    return dataclasses.asdict(summary)
