"""What one restore did: the one result of every restore path (`batchpoint restore`, the
restore DAG's tasks, `ops.restore`, `restore_checkpoint`, the quality gate's
`gated_restore`). It says what was chosen and what was skipped and why (its plan: each
candidate's check, with the gate's verdict when a gate judged it), how the gate was set
up, and what was applied: where the head went (None: refused, a dry run, or a check
only), the savepoint folder imported, the sinks published, the claim mode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchpoint.protocol.claim_mode import ClaimMode
from batchpoint.protocol.head import HeadPointer
from batchpoint.runtime.restore_plan import RestorePlan


@dataclass(frozen=True)
class GateSetup:
    """How the quality gate was set up for a restore (the form's fields)."""

    enabled: bool = True
    name: str | None = None  # the gate's name; None: no gate ran
    skip_suites: tuple[str, ...] = ()
    description: str = "no quality gate"


@dataclass(frozen=True)
class RestoreRun:
    plan: RestorePlan
    gate: GateSetup = GateSetup()
    dry_run: bool = False
    head: HeadPointer | None = None  # where the head went; None: nothing applied
    imported_from: str | None = None  # the savepoint folder it imported, if it did
    published: tuple[str, ...] = ()
    mode: ClaimMode = ClaimMode.NO_CLAIM  # CLAIM: retention may drop the restored checkpoint

    @property
    def pipeline(self) -> str:
        return self.plan.pipeline

    @property
    def restored(self) -> bool:
        return self.head is not None

    @property
    def refused(self) -> bool:
        return self.plan.chosen is None

    @property
    def checkpoint_id(self) -> int:
        """The checkpoint the head now points at (only once applied)."""
        assert self.head is not None and self.head.checkpoint_id is not None, "not applied"
        return self.head.checkpoint_id

    @property
    def restore_generation(self) -> int:
        assert self.head is not None, "not applied"
        return self.head.restore_generation

    @property
    def parallelism(self) -> dict[str, int]:
        return dict(self.plan.parallelism)

    @property
    def claimed(self) -> bool:
        return self.mode is ClaimMode.CLAIM

    def result_json(self) -> dict[str, Any] | None:
        """What was applied (None: nothing): the restore task's XCom."""
        if self.head is None:
            return None
        return {
            "pipeline": self.pipeline,
            "checkpoint_id": self.checkpoint_id,
            "restore_generation": self.restore_generation,
            "imported_from": self.imported_from,
            "parallelism": self.parallelism,
            "published": list(self.published),
            "claimed": self.claimed,
            "mode": self.mode.value,
        }

    def to_json(self) -> dict[str, Any]:
        """The plan's JSON (RestorePlan.from_json reads it back), then the run's: how
        the gate was set up, whether a dry run, why refused, and what was applied."""
        out = self.plan.to_json()
        out["quality_gate"] = {
            "enabled": self.gate.enabled,
            "gate": self.gate.name,
            "skip_suites": list(self.gate.skip_suites),
            "dry_run": self.dry_run,
        }
        out["dry_run"] = self.dry_run
        out["refused"] = self.plan.refusal_headline() if self.refused else None
        out["result"] = self.result_json()
        return out
