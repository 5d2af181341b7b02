"""The restore DAG's cascade (its form's `cascade` field): the check task plans the
restore of its pipeline and of every pipeline downstream of it that read what the
restore takes back (ops/cascade.py), each through its own gate, and hands the targets
over XCom; the restore task applies them as one cascade. The pipelines are the
deployment's (BATCHPOINT_PIPELINE_REF), loaded by their refs as the DAG factory loads
them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from batchpoint.airflow.hooks import cached_pipeline
from batchpoint.errors import ConfigError
from batchpoint.ops.cascade import CascadeContext
from batchpoint.protocol.claim_mode import ClaimMode
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.cascade_plan import CascadePlan
from batchpoint.runtime.restore import RestoreSource, SourceKind, parse_flag
from batchpoint.runtime.restore_gate import RestoreGate
from batchpoint.settings import Settings

#: The XCom key of the check task's cascade plan (a plain restore's plan has none).
CASCADE = "cascade"


def cascade_context(
    refs: Sequence[str],
    root: Pipeline,
    settings: Settings,
    progress: Callable[[str], None],
    gate_for: Callable[[Pipeline], RestoreGate | None] = lambda _p: None,
) -> CascadeContext:
    """Every pipeline the refs name, by name, and the root's own code."""
    code: dict[str, Pipeline] = {}
    for ref in refs:
        pipeline = cached_pipeline(ref)
        code[pipeline.name] = pipeline
    code[root.name] = root
    return CascadeContext(
        code, settings.store_ref, settings.checkpoint, gate_for, progress=progress
    )


def check_cascade_form(source: Any, params: Mapping[str, Any]) -> None:
    """The form's fields a cascade cannot take (as `batchpoint restore --cascade`
    refuses the same flags), a ConfigError naming the first. A new parallelism is the
    restored pipeline's own, as in a plain restore."""
    if RestoreSource.parse(source).kind is SourceKind.SAVEPOINT:
        raise ConfigError("a cascade restores retained checkpoints, not a savepoint folder")
    for name, given in (
        (
            "Allow non-restored state",
            parse_flag("allow_non_restored_state", params.get("allow_non_restored_state", False)),
        ),
        ("Claim mode: claim", ClaimMode.of(params.get("claim_mode")) is ClaimMode.CLAIM),
    ):
        if given:
            raise ConfigError(f"'{name}' cannot be combined with a cascade")


@dataclass(frozen=True)
class CascadeHandover:
    """What the check task hands the restore task: the targets, upstream first, and the
    plan they came from (as data and as the text it logged)."""

    root: str
    targets: tuple[tuple[str, int], ...]
    plan: Mapping[str, Any]
    rendered: str
    parallelism: Mapping[str, int] = field(default_factory=dict)  # the root's, if rescaled

    @classmethod
    def of(cls, plan: CascadePlan) -> CascadeHandover:
        targets = tuple((m.pipeline, m.target) for m in plan.restores if m.target is not None)
        root = plan.members[0].plan
        scale = dict(root.parallelism) if root is not None else {}
        return cls(plan.root, targets, plan.to_json(), plan.render(), scale)

    def to_json(self) -> dict[str, Any]:
        return {
            CASCADE: {
                "root": self.root,
                "targets": [list(t) for t in self.targets],
                "plan": dict(self.plan),
                "rendered": self.rendered,
                "parallelism": dict(self.parallelism),
            }
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> CascadeHandover:
        found = body[CASCADE]
        targets = tuple((str(p), int(t)) for p, t in found["targets"])
        scale = {str(k): int(v) for k, v in (found.get("parallelism") or {}).items()}
        return cls(str(found["root"]), targets, found.get("plan") or {}, found["rendered"], scale)

    def summary(self) -> str:
        return ", ".join(f"'{p}' to checkpoint {t}" for p, t in self.targets) or "nothing"
