"""The quality gate as the restore planner's gate hook (`runtime.restore.RestoreGate`),
which the restore DAG loads from a `module:attribute` reference at run time:

    BATCHPOINT_QUALITY_GATE=demo.payments_quality:restore_gate   (the repository's demo)

The planner walks the candidates (newest first) and calls the hook on each one whose
files are intact; the hook answers with the gate's verdict and full report. A
quarantined checkpoint is refused without being read. A savepoint folder (not yet
imported) gets the integrity checks only: its state is validated once imported, as a
checkpoint of the pipeline.

Once the planner has judged its candidates it calls `conclude`: the GX Checkpoint's
actions run once for the restore, on the verdict that counts (QualityGate.conclude).

One hook object serves every restore of a deployment; what a single restore asks for (a
dry run that records nothing, suites to skip) is a copy made by `configured`, so that
one run's choices never leak into the next.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from batchpoint.quality.gate import QualityGate
from batchpoint.quality.report import CandidateReport

if TYPE_CHECKING:
    from batchpoint.runtime.restore import GateResult, RestoreCandidate

NAME = "quality gate"


class QualityRestoreGate:
    """Calls a QualityGate (built on first use: it may start Spark and import Great
    Expectations) on each restore candidate. With `record`, failing checkpoints are
    quarantined and every report is stored beside its checkpoint; without, it writes
    nothing (for dry runs). `skip_suites` are skipped by the gate (and checked against
    what the pipeline declares when the gate is built)."""

    def __init__(
        self,
        make_gate: Callable[[], QualityGate],
        *,
        record: bool = True,
        skip_suites: Collection[str] = (),
    ) -> None:
        self._make_gate = make_gate
        self._gate: QualityGate | None = None
        self.record = record
        self.skip_suites = tuple(sorted(set(skip_suites)))
        self._judged: list[CandidateReport] = []  # this restore's, for `conclude`

    def configured(
        self, *, record: bool | None = None, skip_suites: Collection[str] | None = None
    ) -> QualityRestoreGate:
        """A copy for one restore: `record=False` for a dry run, suites to skip. The copy
        builds its own gate, so nothing of this run's choice sticks to this object."""
        return QualityRestoreGate(
            self._make_gate,
            record=self.record if record is None else record,
            skip_suites=self.skip_suites if skip_suites is None else skip_suites,
        )

    def __repr__(self) -> str:  # what the restore task's log names
        skip = f", skip_suites={list(self.skip_suites)}" if self.skip_suites else ""
        return f"QualityRestoreGate(record={self.record}{skip})"

    @property
    def gate(self) -> QualityGate:
        if self._gate is None:
            gate = self._make_gate()
            self._gate = gate.skipping(self.skip_suites) if self.skip_suites else gate
        return self._gate

    @property
    def verifies_checksums(self) -> bool:
        """Whether the gate reads every file's sha256 (the restore then leaves them to it)."""
        return self.gate.checksums

    def prepare(self) -> None:
        """Build the gate and its suites before the first candidate: an unknown suite
        name or a broken suite fails the restore as a ConfigError, instead of failing
        (and quarantining) every candidate."""
        self.gate.prepare()
        if not self.record:
            self.gate.log("quality gate: dry run, nothing is quarantined or stored")

    def __call__(self, candidate: RestoreCandidate) -> GateResult:
        from batchpoint.runtime.restore import GateResult

        gate = self.gate
        if candidate.savepoint is not None:
            report = self._folder_report(candidate)
        else:
            # The planner skips quarantined candidates before asking the gate; a caller
            # of its own gets the same answer here, without a look at the state.
            held = gate.quarantine.held(candidate.checkpoint_id)
            if held is not None:
                return GateResult(False, f"{held.describe()}; release it to reconsider", NAME)
            if not self._judged:
                gate.new_run()
            report = gate.evaluate(candidate.checkpoint_id)
            self._judged.append(report)
            if self.record:
                gate.record(report)
        for line in report.render():
            gate.log(line)
        return GateResult(report.passed, report.to_body(), NAME, report.quarantined)

    def conclude(self) -> None:
        """The restore judged its last candidate: the GX Checkpoint's actions, once
        (not on a dry run, which records nothing)."""
        judged, self._judged = self._judged, []
        if self.record and judged:
            self.gate.conclude(judged)

    def _folder_report(self, candidate: RestoreCandidate) -> CandidateReport:
        assert candidate.completed is not None  # a folder's metadata is read to offer it
        return self.gate.evaluate_savepoint(candidate.completed, candidate.store)


def restore_gate(pipeline_ref: str, *, record: bool = True, **options: Any) -> QualityRestoreGate:
    """A hook for the pipeline at `pipeline_ref` (`module:attribute`), on the store and
    Spark master of the environment's settings (BATCHPOINT_ROOT, ...). `options` go to
    QualityGate (max_candidates, skip_suites, checksums, log, and gx_project and
    gx_checkpoint: the GX project whose Checkpoint acts once per restore)."""

    def make() -> QualityGate:
        from batchpoint.runtime.loader import load_pipeline
        from batchpoint.settings import Settings

        settings = Settings.from_env()
        options.setdefault("log", print)
        return QualityGate(load_pipeline(pipeline_ref), settings.store_ref, **options)

    return QualityRestoreGate(make, record=record)
