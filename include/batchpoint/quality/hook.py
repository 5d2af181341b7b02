"""The quality gate as the restore planner's gate hook (`runtime.restore.RestoreGate`),
which the restore DAG loads from a `module:attribute` reference at run time:

    BATCHPOINT_QUALITY_GATE=batchpoint.demo.payments_quality:restore_gate

The planner walks the candidates (newest first) and calls the hook on each one whose
files are intact; the hook answers with the gate's verdict and full report. A
quarantined checkpoint is refused without being read. A savepoint folder (not yet
imported) gets the integrity checks only: its state is validated once imported, as a
checkpoint of the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.records import to_iso
from batchpoint.quality.gate import QualityGate
from batchpoint.quality.integrity import check_completed, driver_file_checker
from batchpoint.quality.report import CandidateReport, GateMode

if TYPE_CHECKING:
    from batchpoint.runtime.restore import GateResult, RestoreCandidate

NAME = "quality gate"


class QualityRestoreGate:
    """Calls a QualityGate (built on first use: it may start Spark and import Great
    Expectations) on each restore candidate. With `record`, failing checkpoints are
    quarantined and every report is stored beside its checkpoint; without, it writes
    nothing (for dry runs)."""

    def __init__(self, make_gate: Callable[[], QualityGate], *, record: bool = True) -> None:
        self._make_gate = make_gate
        self._gate: QualityGate | None = None
        self.record = record

    @property
    def gate(self) -> QualityGate:
        if self._gate is None:
            self._gate = self._make_gate()
        return self._gate

    def __call__(self, candidate: RestoreCandidate) -> GateResult:
        from batchpoint.runtime.restore import GateResult

        gate = self.gate
        if candidate.savepoint is not None:
            report = self._folder_report(candidate)
        else:
            held = gate.quarantine.get(candidate.checkpoint_id)
            if held is not None:
                return GateResult(
                    False,
                    f"quarantined since {to_iso(held.quarantined_at)} "
                    f"({len(held.report.findings)} finding(s)); release it to reconsider",
                    NAME,
                )
            report = gate.evaluate(candidate.checkpoint_id)
            if self.record:
                gate.record(report)
        for line in report.render():
            gate.log(line)
        return GateResult(report.passed, report.to_body(), NAME)

    def _folder_report(self, candidate: RestoreCandidate) -> CandidateReport:
        gate = self.gate
        completed = candidate.completed
        findings = check_completed(
            candidate.store,
            PipelineLayout(gate.pipeline.name),
            completed,
            spec=gate.pipeline.spec(),
            file_checker=driver_file_checker(candidate.store, gate.checksums),
        )
        return CandidateReport(
            pipeline=gate.pipeline.name,
            checkpoint_id=candidate.checkpoint_id,
            checkpoint_type=completed.pending.type.value,
            mode=GateMode.RESTORE,
            evaluated_at=gate.clock(),
            findings=findings,
            skipped=["suites: a savepoint folder is validated once imported"],
        )


def restore_gate(pipeline_ref: str, *, record: bool = True, **options: Any) -> QualityRestoreGate:
    """A hook for the pipeline at `pipeline_ref` (`module:attribute`), on the store and
    Spark master of the environment's settings (BATCHPOINT_ROOT, ...). `options` go to
    QualityGate (max_candidates, skip_suites, checksums, log)."""

    def make() -> QualityGate:
        from batchpoint.runtime.loader import load_pipeline
        from batchpoint.settings import Settings

        settings = Settings.from_env()
        options.setdefault("log", print)
        return QualityGate(load_pipeline(pipeline_ref), settings.store_ref, **options)

    return QualityRestoreGate(make, record=record)
