"""The plan of a cascade restore: which pipelines downstream of a restore must follow it,
and to which checkpoint (protocol/cascade.py is the operation that applies it).

The pipelines are the code the caller knows (BATCHPOINT_PIPELINE_REF); a pipeline
downstream of another is one with a source that reads its sink. In topological order
from the restored pipeline, each downstream pipeline:

- **keeps** its head when the head read nothing that the planned restores take back
  (every read of a restored upstream is on that upstream's target's timeline), or
  when no upstream of it is restored;
- else **restores** to its newest retained checkpoint whose reads are all on the
  planned timelines and that passes its own checks and quality gate (the restore
  planner's candidate walk, judging upstream reads as of the planned targets);
- else is **refused**, named with every candidate's reason: the whole cascade is
  refused and no head moves.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from batchpoint.errors import ConfigError, DeployRefused
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import RestorePlanner
from batchpoint.runtime.restore_plan import RestorePlan
from batchpoint.runtime.upstream_reads import taken_back

#: Makes the planner of one downstream pipeline: its driver, with the planned targets of
#: its restored upstreams (the caller adds the pipeline's own gate, recording, progress).
PlannerFactory = Callable[[PipelineDriver, Mapping[str, int]], RestorePlanner]


class MemberAction(enum.StrEnum):
    RESTORE = "restore"
    KEEP = "keep"
    REFUSED = "refused"


@dataclass(frozen=True)
class CascadeMember:
    pipeline: str
    action: MemberAction
    target: int | None  # restore: the target; keep: the head it keeps
    reads: tuple[str, ...] = ()  # the upstream pipelines of the cascade it reads
    plan: RestorePlan | None = None  # restore and refused: its candidate walk
    planner: RestorePlanner | None = field(default=None, compare=False, repr=False)
    reason: str = ""

    def to_json(self) -> dict[str, object]:
        body: dict[str, object] = {
            "pipeline": self.pipeline,
            "action": self.action.value,
            "target": self.target,
            "reads": list(self.reads),
        }
        if self.reason:
            body["reason"] = self.reason
        if self.plan is not None:
            body["candidates"] = [c.to_json() for c in self.plan.checks]
            if self.plan.parallelism:
                body["parallelism"] = dict(self.plan.parallelism)
        return body


@dataclass(frozen=True)
class CascadePlan:
    root: str
    members: tuple[CascadeMember, ...]  # the root first, then topological order

    @property
    def refused(self) -> bool:
        return any(m.action is MemberAction.REFUSED for m in self.members)

    @property
    def restores(self) -> list[CascadeMember]:
        return [m for m in self.members if m.action is MemberAction.RESTORE]

    def refusal(self) -> str:
        return "; ".join(
            f"pipeline '{m.pipeline}': {m.reason}"
            for m in self.members
            if m.action is MemberAction.REFUSED
        )

    def to_json(self) -> dict[str, object]:
        return {
            "root": self.root,
            "refused": self.refusal() or None,
            "members": [m.to_json() for m in self.members],
        }

    def render(self) -> str:
        lines = [f"cascade restore following '{self.root}':"]
        for m in self.members:
            via = f" (reads {', '.join(m.reads)})" if m.reads else ""
            if m.action is MemberAction.RESTORE:
                scale = m.plan.parallelism if m.plan is not None else {}
                rescaled = f", parallelism {dict(scale)}" if scale else ""
                lines.append(f"  {m.pipeline}{via}: restore to checkpoint {m.target}{rescaled}")
            elif m.action is MemberAction.KEEP:
                at = "nothing" if m.target is None else f"checkpoint {m.target}"
                lines.append(f"  {m.pipeline}{via}: keeps {at} ({m.reason})")
            else:
                lines.append(f"  {m.pipeline}{via}: REFUSED: {m.reason}")
        return "\n".join(lines)


def readers_of(code: Mapping[str, Pipeline]) -> dict[str, list[str]]:
    """Pipeline -> the pipelines whose sources read one of its sinks."""
    out: dict[str, list[str]] = {name: [] for name in code}
    for name, pipeline in code.items():
        for upstream in sorted(upstreams_of(pipeline)):
            out.setdefault(upstream, []).append(name)
    return out


def upstreams_of(pipeline: Pipeline) -> set[str]:
    return {s.upstream.pipeline for s in pipeline.sources.values() if s.upstream is not None}


def downstream_order(root: str, code: Mapping[str, Pipeline]) -> list[str]:
    """The pipelines downstream of `root` (transitively), each after all its upstreams
    among them; ConfigError on a cycle."""
    readers = readers_of(code)
    reached, frontier = set(), [root]
    while frontier:
        for reader in readers.get(frontier.pop(), []):
            if reader not in reached:
                reached.add(reader)
                frontier.append(reader)
    if root in reached:
        raise ConfigError(f"pipeline '{root}' reads its own output through a cycle of sources")
    order: list[str] = []
    waiting = sorted(reached)
    while waiting:
        ready = [p for p in waiting if not (upstreams_of(code[p]) & (set(waiting) - {p}))]
        if not ready:
            raise ConfigError(f"pipelines {waiting} read each other's sinks in a cycle")
        order += ready
        waiting = [p for p in waiting if p not in ready]
    return order


def plan_cascade(
    root: CascadeMember,
    code: Mapping[str, Pipeline],
    drivers: Callable[[Pipeline], PipelineDriver],
    planner_for: PlannerFactory,
) -> CascadePlan:
    """The members after the root's own (already planned) restore, in order."""
    members = [root]
    targets = {root.pipeline: root.target} if root.action is MemberAction.RESTORE else {}
    for name in downstream_order(root.pipeline, code):
        pipeline = code[name]
        restored = {p: t for p, t in targets.items() if p in upstreams_of(pipeline) and t}
        member = _member(pipeline, drivers(pipeline), restored, planner_for)
        members.append(member)
        if member.action is MemberAction.RESTORE and member.target is not None:
            targets[name] = member.target
    return CascadePlan(root.pipeline, tuple(members))


def _member(
    pipeline: Pipeline,
    driver: PipelineDriver,
    restored: Mapping[str, int],
    planner_for: PlannerFactory,
) -> CascadeMember:
    reads = tuple(sorted(restored))
    control = driver.coordinator.control_record()
    head = control.head if control is not None else None
    if not restored:
        return CascadeMember(
            pipeline.name, MemberAction.KEEP, head, reads, reason="no upstream moves"
        )
    if head is None:
        return CascadeMember(
            pipeline.name, MemberAction.KEEP, None, reads, reason="no checkpoint yet"
        )
    outcome = driver.coordinator.get_outcome(head)
    if outcome is not None and not taken_back(pipeline, driver.store, outcome.pending, restored):
        return CascadeMember(
            pipeline.name, MemberAction.KEEP, head, reads, reason="its head read nothing taken back"
        )
    planner = planner_for(driver, restored)
    try:
        plan = planner.plan(None)
    except DeployRefused as exc:  # judged on a candidate before its gate ran
        return deploy_refused(pipeline.name, planner, exc, reads)
    if plan.chosen is None:
        why = f"no retained checkpoint read only what the restores keep: {plan.refusal()}"
        return CascadeMember(pipeline.name, MemberAction.REFUSED, None, reads, plan, planner, why)
    return planned_member(pipeline.name, plan, planner, reads)


def planned_member(
    pipeline: str, plan: RestorePlan, planner: RestorePlanner, reads: tuple[str, ...] = ()
) -> CascadeMember:
    """A restore to the plan's choice, or refused: none, or the code cannot take its
    state (found now, so that the cascade refuses before any head moves)."""
    if plan.chosen is None:
        return CascadeMember(
            pipeline, MemberAction.REFUSED, None, reads, plan, planner, plan.refusal()
        )
    try:
        planner.check_deploy(plan)
    except DeployRefused as exc:
        return CascadeMember(pipeline, MemberAction.REFUSED, None, reads, plan, planner, str(exc))
    return CascadeMember(
        pipeline, MemberAction.RESTORE, plan.chosen.checkpoint_id, reads, plan, planner
    )


def deploy_refused(
    pipeline: str, planner: RestorePlanner, exc: DeployRefused, reads: tuple[str, ...] = ()
) -> CascadeMember:
    """Refused: the code cannot take the state of a candidate its planner walked to (the
    walk stops there, before the gate runs on it: no plan to show)."""
    return CascadeMember(pipeline, MemberAction.REFUSED, None, reads, None, planner, str(exc))
