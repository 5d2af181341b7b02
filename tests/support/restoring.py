"""A protocol-level restore for the protocol's tests: the candidate walk
(`CheckpointRestorer.choose`) then the one way in (`CheckpointRestorer.restore`), as
runtime/restore.py's planner takes them."""

from __future__ import annotations

from dataclasses import dataclass

from batchpoint.protocol.claim_mode import ClaimMode
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.findings import Finding
from batchpoint.protocol.head import HeadPointer
from batchpoint.quality.report import CandidateReport
from batchpoint.runtime.restore import RestoreRun


@dataclass(frozen=True)
class Restored:
    """Where the head went, and each newer candidate the walk skipped with why."""

    head: HeadPointer
    findings: tuple[Finding, ...] = ()

    @property
    def checkpoint_id(self) -> int | None:
        return self.head.checkpoint_id

    @property
    def restore_generation(self) -> int:
        return self.head.restore_generation


def restore(
    c: CheckpointCoordinator,
    checkpoint_id: int | None = None,
    *,
    checksums: bool | None = None,
    mode: ClaimMode = ClaimMode.NO_CLAIM,
    allow_non_restored_state: bool = False,
) -> Restored:
    """Restore to `checkpoint_id`, or the newest restorable retained checkpoint."""
    chosen = c.restorer.choose(checkpoint_id, checksums)
    head = c.restorer.restore(
        chosen.target, mode=mode, allow_non_restored_state=allow_non_restored_state
    )
    return Restored(head, chosen.skipped)


def gate_reports(run: RestoreRun) -> list[CandidateReport]:
    """The quality gate's report on each candidate a restore's gate judged, in order."""
    return [
        CandidateReport.from_body(check.description, check.gate.report)
        for check in run.plan.checks
        if check.gate is not None and isinstance(check.gate.report, dict)
    ]
