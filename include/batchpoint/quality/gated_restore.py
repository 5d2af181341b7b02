"""The quality gate's own restore (`gated_restore`): the gate judges the candidates
(quality/gate.py), then the restore path every front end takes (runtime/restore.py)
moves the pipeline to the one it chose. Its result is the one every restore returns, a
RestoreRun, whose plan holds each candidate the gate judged with its report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from batchpoint.errors import ConfigError, RestoreRefused
from batchpoint.quality.gate import QualityGate
from batchpoint.quality.report import GateReport
from batchpoint.runtime.restore import (
    CandidateCheck,
    GateResult,
    GateSetup,
    RestorePlan,
    RestorePlanner,
    RestoreRun,
    RestoreSource,
    SourceKind,
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
    allow_non_restored_state: bool = False,
) -> RestoreRun:
    """Run the gate, then restore every job to the checkpoint it chose (unless a dry
    run). Raises QualityGateRefused, restoring nothing, when no candidate passes. The
    run's plan holds each candidate the gate judged, its report as the gate's verdict,
    and those quarantine held. DeployRefused, before the gate runs, when the code cannot
    take the state of the first candidate it would judge (unless
    `allow_non_restored_state`)."""
    if driver.pipeline.name != gate.pipeline.name:
        raise ConfigError(
            f"gated restore: the driver runs '{driver.pipeline.name}' but the gate judges "
            f"'{gate.pipeline.name}'"
        )
    # The gate's suites are Spark jobs and its verdicts quarantine: a deploy the code
    # cannot make is refused first (invariant 15), by the planner's walk, which judges
    # the deploy on the first candidate whose records and files hold (sizes only: the
    # gate reads the sha256 itself) and writes nothing.
    RestorePlanner(
        driver, checksums=False, record=False, allow_non_restored_state=allow_non_restored_state
    ).plan(checkpoint_id, parallelism)
    report = gate.run(checkpoint_id, dry_run=dry_run)
    plan = _judged_plan(report, checkpoint_id)
    name = GateResult(True).name
    setup = GateSetup(True, name, tuple(sorted(gate.skip_suites)), f"the {name} (gated_restore)")
    if dry_run:
        return RestoreRun(plan, setup, dry_run=True)
    assert report.chosen is not None
    # The restore path every front end takes: the target's records and files checked
    # (the gate read every sha256 already, when it checks them, so sizes only), then the
    # gate's plan applied, so that the restore records what the gate did (gated, what
    # it passed over and quarantined), as the restore DAG's restore task does.
    planner = RestorePlanner(
        driver,
        checksums=False if gate.checksums else None,
        allow_non_restored_state=allow_non_restored_state,
    )
    target = planner.plan(report.chosen, parallelism)
    if target.chosen is None:
        raise RestoreRefused(target.refusal())
    applied = planner.apply(replace(plan, parallelism=target.parallelism))
    gate.log(f"restored pipeline '{driver.pipeline.name}' to checkpoint {report.chosen}")
    return replace(applied, gate=setup)


def _judged_plan(report: GateReport, checkpoint_id: int | None) -> RestorePlan:
    """The gate's run as a restore plan: newest first, each judged candidate with the
    gate's verdict, each quarantined one newer than the choice held without a look."""
    judged = {
        c.checkpoint_id: CandidateCheck(
            f"{c.checkpoint_type} {c.checkpoint_id}",
            c.checkpoint_id,
            SourceKind.CHECKPOINT,
            gate=GateResult(c.passed, c.to_body(), quarantined=c.quarantined),
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
