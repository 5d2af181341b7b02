"""The quality gate's own restore (`gated_restore`): the gate judges the candidates
(quality/gate.py), then the restore path every front end takes (runtime/restore.py)
moves the pipeline to the one it chose. Its result is the one every restore returns, a
RestoreRun, whose plan holds each candidate the gate judged with its report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from batchpoint.errors import ConfigError
from batchpoint.quality.gate import QualityGate
from batchpoint.quality.report import GateReport
from batchpoint.runtime.restore import (
    CandidateCheck,
    GateResult,
    GateSetup,
    RestorePlan,
    RestoreRun,
    RestoreSource,
    SourceKind,
    restore_checkpoint,
)

if TYPE_CHECKING:
    from batchpoint.runtime.driver import PipelineDriver

#: Why the gate skipped a quarantined candidate without a look.
QUARANTINED = "quarantined earlier (release to reconsider)"


def gated_restore(
    driver: PipelineDriver,
    gate: QualityGate,
    checkpoint_id: int | None = None,
    *,
    parallelism: Mapping[str, int] | None = None,
    dry_run: bool = False,
) -> RestoreRun:
    """Run the gate, then restore every job to the checkpoint it chose (unless a dry
    run). Raises QualityGateRefused, restoring nothing, when no candidate passes. The
    run's plan holds each candidate the gate judged, its report as the gate's verdict,
    and those quarantine held."""
    if driver.pipeline.name != gate.pipeline.name:
        raise ConfigError(
            f"gated restore: the driver runs '{driver.pipeline.name}' but the gate judges "
            f"'{gate.pipeline.name}'"
        )
    report = gate.run(checkpoint_id, dry_run=dry_run)
    plan = _judged_plan(report, checkpoint_id)
    name = GateResult(True).name
    setup = GateSetup(True, name, tuple(sorted(gate.skip_suites)), f"the {name} (gated_restore)")
    if dry_run:
        return RestoreRun(plan, setup, dry_run=True)
    assert report.chosen is not None
    # The restore path every front end takes; the gate read every sha256 already (when
    # it checks them), so the restore's own examination compares sizes only.
    applied = restore_checkpoint(
        driver, report.chosen, parallelism, checksums=False if gate.checksums else None
    )
    gate.log(f"restored pipeline '{driver.pipeline.name}' to checkpoint {report.chosen}")
    return replace(applied, plan=replace(plan, parallelism=applied.plan.parallelism), gate=setup)


def _judged_plan(report: GateReport, checkpoint_id: int | None) -> RestorePlan:
    """The gate's run as a restore plan: newest first, each judged candidate with the
    gate's verdict, each quarantined one newer than the choice held without a look."""
    judged = {
        c.checkpoint_id: CandidateCheck(
            f"{c.checkpoint_type} {c.checkpoint_id}",
            c.checkpoint_id,
            SourceKind.CHECKPOINT,
            gate=GateResult(c.passed, c.to_body()),
        )
        for c in report.candidates
    }
    held = {
        cid: CandidateCheck(f"checkpoint {cid}", cid, SourceKind.CHECKPOINT, quarantine=QUARANTINED)
        for cid in report.quarantined_skipped
        if report.chosen is None or cid > report.chosen
    }
    checks = [{**held, **judged}[cid] for cid in sorted({**held, **judged}, reverse=True)]
    return RestorePlan(
        report.pipeline,
        RestoreSource.parse(checkpoint_id),
        checks=tuple(checks),
        not_examined=tuple(report.not_reached),
    )
