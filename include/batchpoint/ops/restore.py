"""Restore: the candidates newest first (or the one named), each checked for its files
then by the quality gate, the first that passes restored (head moved, sinks rewound,
new parallelism registered). `batchpoint restore` runs it in one call; the restore DAG
splits it into `restore(..., check_only=True)` (its check task) and `apply_restore` (its
restore task)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from batchpoint.ops.gates import GateChoice
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import (
    AppliedRestore,
    GateOptions,
    RestorePlan,
    RestorePlanner,
    RestoreSource,
)
from batchpoint.runtime.restore_gate import GateResult

Progress = Callable[[str], None]


def _quiet(_line: str) -> None:
    pass


@dataclass
class RestoreRun:
    plan: RestorePlan
    gate: GateChoice
    options: GateOptions
    dry_run: bool
    result: AppliedRestore | None = None  # None: refused, or a dry run

    @property
    def restored(self) -> bool:
        return self.result is not None

    @property
    def refused(self) -> bool:
        return self.plan.chosen is None

    def to_json(self) -> dict[str, Any]:
        out = self.plan.to_json()
        out["quality_gate"] = {
            "enabled": self.options.enabled,
            "gate": self.gate.name if self.gate.gate is not None else None,
            "skip_suites": list(self.options.skip_suites),
            "dry_run": self.dry_run,
        }
        out["dry_run"] = self.dry_run
        out["refused"] = self.plan.refusal_headline() if self.refused else None
        out["result"] = self.result.to_json() if self.result else None
        check = self.plan.chosen_check
        out["restore"] = (
            None
            if check is None
            else {
                "kind": check.candidate.kind,
                "checkpoint_id": check.candidate.checkpoint_id,
                "location": check.candidate.savepoint.uri if check.candidate.savepoint else None,
                # Recorded with the restore by the task that applies it, which checks
                # the choice again without the gate.
                "gate": None if check.gate is None else check.gate.name,
            }
        )
        return out


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
    claim: bool = False,
    store_options: Mapping[str, str] | None = None,
    savepoint_roots: Sequence[str] | None = None,
    progress: Progress = _quiet,
    allow_non_restored_state: bool = False,
) -> RestoreRun:
    """Find and check the candidates, then restore to the chosen one. A dry run writes
    nothing; `check_only` stops before the restore too, having written only the
    quarantine of the candidates found damaged and what the gate records (the reports,
    the quarantine of those it fails). `claim`: CLAIM mode (RestorePlanner.apply)."""
    planner = RestorePlanner(
        driver,
        gate=gate.gate,
        checksums=checksums,
        store_options=store_options,
        progress=progress,
        max_candidates=options.max_candidates,
        savepoint_roots=savepoint_roots,
        record=not dry_run,
    )
    run = RestoreRun(planner.plan(source, parallelism), gate, options, dry_run)
    if not (run.refused or dry_run or check_only):
        # the gate is not asked again
        run.result = planner.apply(
            run.plan, claim=claim, allow_non_restored_state=allow_non_restored_state
        )
    return run


def apply_restore(
    driver: PipelineDriver,
    chosen: Mapping[str, Any],
    parallelism: Any = None,
    *,
    claim: bool = False,
    store_options: Mapping[str, str] | None = None,
    savepoint_roots: Sequence[str] | None = None,
    progress: Progress = _quiet,
    allow_non_restored_state: bool = False,
) -> AppliedRestore:
    """Restore to what an earlier check chose (`RestoreRun.to_json()["restore"]`). It is
    checked again without the gate (it passed already): the files must still be there,
    and 'latest' must not slide to a newer checkpoint meanwhile. The restore is recorded
    as passed by the gate that passed it in that check."""
    source = chosen.get("location") or chosen.get("checkpoint_id")
    planner = RestorePlanner(
        driver, store_options=store_options, progress=progress, savepoint_roots=savepoint_roots
    )
    plan = planner.plan(RestoreSource.parse(source), parallelism or None)
    if (gate := chosen.get("gate")) is not None and plan.chosen_check is not None:
        # The check's verdict, recorded with the restore; the gate does not run twice.
        plan.chosen_check.gate = GateResult(True, "passed in the check", name=gate)
    return planner.apply(plan, claim=claim, allow_non_restored_state=allow_non_restored_state)
