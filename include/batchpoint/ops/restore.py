"""Restore: the candidates newest first (or the one named), each checked for its files
then by the quality gate, the first that passes restored (head moved, sinks rewound,
new parallelism registered). `batchpoint restore` runs it in one call; the restore DAG
splits it into `restore(..., check_only=True)` (its check task, which plans) and
`apply_restore` (its restore task, which applies the check's RestorePlan)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from batchpoint.ops.gates import GateChoice
from batchpoint.protocol.claim_mode import ClaimMode
from batchpoint.protocol.deploy_plan import DeployPlan
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import (
    GateOptions,
    GateSetup,
    RestorePlan,
    RestorePlanner,
    RestoreRun,
    RestoreSource,
)

__all__ = ["RestoreRun", "apply_restore", "check_restore_deploy", "restore"]

Progress = Callable[[str], None]


def _quiet(_line: str) -> None:
    pass


def restore(
    driver: PipelineDriver,
    source: RestoreSource | str | int | None,
    gate: GateChoice,
    options: GateOptions,
    *,
    parallelism: Any = None,
    checksums: bool | None = None,
    dry_run: bool = False,
    check_only: bool = False,
    mode: ClaimMode = ClaimMode.NO_CLAIM,
    store_options: Mapping[str, str] | None = None,
    savepoint_roots: Sequence[str] | None = None,
    progress: Progress = _quiet,
    allow_non_restored_state: bool = False,
) -> RestoreRun:
    """Find and check the candidates, then restore to the chosen one. A dry run writes
    nothing; `check_only` stops before the restore too, having written only the
    quarantine of the candidates found damaged and what the gate records (the reports,
    the quarantine of those it fails). `mode`: ClaimMode (RestorePlanner.apply).
    DeployRefused when the code cannot take a candidate's state (unless
    `allow_non_restored_state`), found before the gate runs on it."""
    planner = RestorePlanner(
        driver,
        gate=gate.gate,
        checksums=checksums,
        store_options=store_options,
        progress=progress,
        max_candidates=options.max_candidates,
        savepoint_roots=savepoint_roots,
        record=not dry_run,
        allow_non_restored_state=allow_non_restored_state,  # judged before the gate runs
    )
    setup = GateSetup(
        options.enabled,
        gate.name if gate.gate is not None else None,
        options.skip_suites,
        gate.description,
    )
    plan = planner.plan(source, parallelism)
    run = RestoreRun(plan, setup, dry_run)
    if not (run.refused or dry_run or check_only):
        # the gate is not asked again
        applied = planner.apply(plan, mode=mode)
        run = replace(applied, gate=setup)
    return run


def apply_restore(
    driver: PipelineDriver,
    plan: RestorePlan,
    *,
    mode: ClaimMode = ClaimMode.NO_CLAIM,
    store_options: Mapping[str, str] | None = None,
    savepoint_roots: Sequence[str] | None = None,
    progress: Progress = _quiet,
    allow_non_restored_state: bool = False,
) -> RestoreRun:
    """Restore to what an earlier check chose (its RestorePlan, e.g. read back from the
    check task's XCom). Its target is checked again without the gate (it passed
    already): the files must still be there, and `latest` does not slide to a newer
    checkpoint meanwhile. The restore is recorded as passed by the gate that passed it
    in that check."""
    planner = RestorePlanner(
        driver,
        store_options=store_options,
        progress=progress,
        savepoint_roots=savepoint_roots,
        allow_non_restored_state=allow_non_restored_state,
    )
    return planner.apply(plan, mode=mode)


def check_restore_deploy(
    driver: PipelineDriver,
    plan: RestorePlan,
    allow_non_restored_state: bool = False,
    *,
    store_options: Mapping[str, str] | None = None,
    savepoint_roots: Sequence[str] | None = None,
) -> DeployPlan | None:
    """The deploy plan of the code on what `plan` chose (None: nothing to check), or
    DeployRefused: what the restore would refuse, found by the check already."""
    planner = RestorePlanner(
        driver,
        store_options=store_options,
        savepoint_roots=savepoint_roots,
        allow_non_restored_state=allow_non_restored_state,
    )
    return planner.check_deploy(plan)
