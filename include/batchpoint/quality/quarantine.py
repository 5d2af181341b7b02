"""Quarantine by the quality gate: a checkpoint that failed the gate is never offered for
a restore again, until someone releases it on purpose.

The mark is the protocol's (protocol/quarantine.py: one write-once record per
checkpoint, which every restore path checks, and which a restore also writes for damage
it finds); the gate's records hold the full report that condemned the checkpoint, so
whoever releases it can see why it was held. This module writes and reads that report.
"""

from __future__ import annotations

from batchpoint.errors import RecordError
from batchpoint.protocol import quarantine
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.quarantine import GATE_V1_REASON, QuarantineCause, QuarantineRecord
from batchpoint.quality.findings import summarize
from batchpoint.quality.report import CandidateReport
from batchpoint.storage.base import ObjectStore

__all__ = [
    "QuarantineCause",
    "QuarantineRecord",
    "QuarantineStore",
    "first_finding",
    "gate_record",
    "held_report",
    "release",
]


def gate_record(report: CandidateReport, now: float) -> QuarantineRecord:
    """The quarantine record of a checkpoint the gate failed: its findings as the
    reason, its report in full."""
    reason = summarize(report.findings, limit=1) if report.findings else GATE_V1_REASON
    return QuarantineRecord(
        report.checkpoint_id, now, QuarantineCause.QUALITY_GATE, reason, report.to_body()
    )


class QuarantineStore(quarantine.QuarantineStore):
    """The protocol's quarantine, plus the gate's reports."""

    def add(self, report: CandidateReport, now: float) -> bool:
        """Quarantine the report's checkpoint; False if it was quarantined already (the
        first record, and its reason, stand)."""
        return self.mark(gate_record(report, now))

    def report(self, record: QuarantineRecord) -> CandidateReport | None:
        """The gate's report the record holds; None for damage a restore found.
        RecordError when the report cannot be read."""
        return held_report(record, self._layout.pipeline)


def held_report(record: QuarantineRecord, pipeline: str) -> CandidateReport | None:
    """The gate's report a quarantine record of `pipeline` holds; None for damage a
    restore found. RecordError when the report cannot be read."""
    if record.report is None:
        return None
    key = PipelineLayout(pipeline).quarantine(record.checkpoint_id)
    return CandidateReport.from_body(key, record.report)


def first_finding(record: QuarantineRecord, pipeline: str) -> str:
    """Why it is held, in one line: the gate's first finding, else the reason (what a
    restore found, or why the record cannot tell)."""
    try:
        report = held_report(record, pipeline)
    except (RecordError, KeyError, TypeError, ValueError):  # the reason still says why
        report = None
    if report is not None and report.findings:
        return str(report.findings[0])
    return record.reason


def release(store: ObjectStore, pipeline: str, checkpoint_id: int) -> bool:
    """Release a quarantined checkpoint of `pipeline` (for the CLI and the restore DAG)."""
    return QuarantineStore(store, PipelineLayout(pipeline)).release(checkpoint_id)
