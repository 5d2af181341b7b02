"""`batchpoint restore PIPELINE --cascade`: restore a pipeline and every pipeline
downstream of it that read what the restore takes back, as one operation.

The plan comes first (runtime/cascade_plan.py): every target chosen and gated before
anything is written, so a refusal anywhere moves no head. Applying it follows the
cascade record (protocol/cascade.py): the record is created, every pipeline of the plan
fenced (its scheduled runs wait, reason CASCADE), each restored upstream first and
marked done, then the fences lifted and the record retired. A call that finds a cascade
still active (a crash cut it short) finishes that one first, and says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from batchpoint.errors import BatchpointError, DeployRefused, RestoreRefused
from batchpoint.ops.pipelines import pipeline_names
from batchpoint.protocol.cascade import (
    CascadeBusy,
    CascadeRecord,
    CascadeStep,
    CascadeStore,
    describe,
    finished,
    mark_done,
    new_cascade_id,
    restored_by_cascade,
    retired_fence,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.cascade_plan import (
    CascadeMember,
    CascadePlan,
    MemberAction,
    deploy_refused,
    plan_cascade,
    planned_member,
)
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import RestorePlanner, RestoreSource
from batchpoint.runtime.restore_gate import RestoreGate
from batchpoint.runtime.upstream_reads import taken_back
from batchpoint.sources.barrier import SourceBarrier
from batchpoint.sources.upstream import (
    PipelineSinkSource,
    UpstreamBinding,
    UpstreamRestored,
    upstream_of,
)
from batchpoint.storage import StoreRef

Progress = Callable[[str], None]
#: Called at each step's crash points ("before-restore", "after-restore") with the
#: pipeline: how tests cut a cascade short where a real crash could.
StepHook = Callable[[str, str], None]


def _quiet(_line: str) -> None:
    pass


@dataclass(frozen=True)
class CascadeRun:
    """What a cascade call did: planned (a dry run, or refused), applied, or resumed an
    earlier cascade (`plan` None) instead of starting the one asked for."""

    plan: CascadePlan | None
    record: CascadeRecord | None = None
    dry_run: bool = False

    @property
    def refused(self) -> bool:
        return self.plan is not None and self.plan.refused

    @property
    def resumed(self) -> bool:
        return self.plan is None and self.record is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "plan": None if self.plan is None else self.plan.to_json(),
            "cascade": None if self.record is None else self.record.to_json(),
            "resumed": self.resumed,
        }

    def render(self) -> str:
        lines = []
        if self.resumed:
            lines.append("an earlier cascade was still under way: finished it first")
        if self.plan is not None:
            lines.append(self.plan.render())
        if self.refused:
            lines.append("refused: no head moved")
        elif self.dry_run:
            lines.append("dry run: nothing changed")
        if self.record is not None:
            lines.append(describe(self.record))
            if self.record.failure:
                lines.append(f"failed: {self.record.failure}")
        return "\n".join(lines)


@dataclass
class CascadeContext:
    """What every pipeline of a cascade shares: the code, the storage and the settings."""

    code: Mapping[str, Pipeline]
    store_ref: StoreRef
    config: CheckpointConfig
    gate_for: Callable[[Pipeline], RestoreGate | None] = lambda _p: None
    checksums: bool | None = None
    progress: Progress = _quiet
    clock: Callable[[], float] = time.time

    def driver(self, pipeline: Pipeline | str) -> PipelineDriver:
        code = self.code[pipeline] if isinstance(pipeline, str) else pipeline
        return PipelineDriver(code, self.store_ref, self.config, self.clock)

    def planner(
        self, driver: PipelineDriver, targets: Mapping[str, int], *, record: bool, gated: bool
    ) -> RestorePlanner:
        return RestorePlanner(
            driver,
            gate=self.gate_for(driver.pipeline) if gated else None,
            checksums=self.checksums,
            progress=self.progress,
            record=record,
            upstream_targets=targets,
        )


def cascade_restore(
    context: CascadeContext,
    root: str,
    source: RestoreSource | str | int | None,
    *,
    dry_run: bool = False,
    hook: StepHook | None = None,
    parallelism: Any = None,
) -> CascadeRun:
    """Plan the cascade following a restore of `root` to `source` (with `parallelism`:
    the root rescaled, as a plain restore does), and (unless a dry run or refused)
    apply it. An active cascade is finished first and reported instead."""
    cascades = CascadeStore(context.store_ref.open())
    active = cascades.active()
    if active is not None:
        if dry_run:
            return CascadeRun(None, active[0], dry_run=True)
        return CascadeRun(None, _drive(context, cascades, active[0], {}, hook))
    plan = plan_cascade_of(context, root, source, record=not dry_run, parallelism=parallelism)
    if dry_run or plan.refused:
        return CascadeRun(plan, dry_run=dry_run)
    steps = tuple(
        CascadeStep(
            m.pipeline, m.target, _generation(context, m.pipeline),
            parallelism=dict(m.plan.parallelism) if m.plan is not None else {},
        )
        for m in plan.restores
        if m.target is not None
    )  # fmt: skip
    record = CascadeRecord(
        new_cascade_id(), root, steps[0].target, steps, started_at=context.clock()
    )
    if not cascades.start(record):
        raise CascadeBusy("another cascade started meanwhile: run the command again")
    planned = {m.pipeline: m for m in plan.restores}
    return CascadeRun(plan, _drive(context, cascades, record, planned, hook))


def apply_planned(
    context: CascadeContext,
    root: str,
    targets: Sequence[tuple[str, int]],
    *,
    hook: StepHook | None = None,
    parallelism: Mapping[str, int] | None = None,
) -> CascadeRecord:
    """Apply a plan made earlier (the restore DAG's check task made it, gates and all):
    (pipeline, target) upstream first. Each target's files are checked again before its
    head moves, without the gate. An active cascade is finished first, and then this
    one is refused (CascadeBusy): its plan was made before that cascade ended."""
    cascades = CascadeStore(context.store_ref.open())
    active = cascades.active()
    if active is not None:
        done = _drive(context, cascades, active[0], {}, hook)
        raise CascadeBusy(f"finished {describe(done)} first; plan the cascade again")
    steps = tuple(
        CascadeStep(p, t, _generation(context, p), parallelism=dict(parallelism or {}))
        if p == root
        else CascadeStep(p, t, _generation(context, p))
        for p, t in targets
    )
    record = CascadeRecord(new_cascade_id(), root, steps[0].target, steps, context.clock())
    if not cascades.start(record):
        raise CascadeBusy("another cascade started meanwhile: plan the cascade again")
    return _drive(context, cascades, record, {}, hook)


def plan_cascade_of(
    context: CascadeContext,
    root: str,
    source: RestoreSource | str | int | None,
    *,
    record: bool,
    parallelism: Any = None,
) -> CascadePlan:
    if root not in context.code:
        raise BatchpointError(f"no code for pipeline '{root}' (BATCHPOINT_PIPELINE_REF)")
    driver = context.driver(root)
    context.progress(f"planning the restore of '{root}'")
    planner = context.planner(driver, {}, record=record, gated=True)
    try:
        member = planned_member(root, planner.plan(source, parallelism), planner)
    except DeployRefused as exc:  # judged on a candidate before its gate ran
        member = deploy_refused(root, planner, exc)
    if member.action is MemberAction.REFUSED:
        return CascadePlan(root, (member,))

    def planner_for(d: PipelineDriver, targets: Mapping[str, int]) -> RestorePlanner:
        context.progress(f"planning '{d.pipeline.name}' after {dict(targets)}")
        return context.planner(d, targets, record=record, gated=True)

    plan = plan_cascade(member, context.code, context.driver, planner_for)
    return replace(plan, members=plan.members + tuple(_readers_without_code(context, plan)))


def _readers_without_code(context: CascadeContext, plan: CascadePlan) -> list[CascadeMember]:
    """Stored pipelines whose code is not given, whose head read what the plan's
    restores take back: named and refused (nothing can restore them here), never
    skipped in silence."""
    store = context.store_ref.open()
    targets = {m.pipeline: m.target for m in plan.restores if m.target is not None}
    out = []
    for name in pipeline_names(store):
        if name in context.code:
            continue
        coordinator = CheckpointCoordinator(store, name, context.config)
        control = coordinator.control_record()
        outcome = coordinator.get_outcome(control.head) if control and control.head else None
        if outcome is None:
            continue
        for offsets in outcome.pending.barrier.values():
            read = next(iter(SourceBarrier.coerce(offsets)), "")
            upstream = upstream_of(read)
            if upstream is None or upstream[0] not in targets:
                continue
            source = PipelineSinkSource(store, UpstreamBinding(upstream[0], upstream[1], name))
            try:
                source.verify_barrier(offsets, as_of=targets[upstream[0]])
            except UpstreamRestored:
                why = (
                    f"it read what the restore of '{upstream[0]}' takes back, and its code is "
                    "not given (add its reference to BATCHPOINT_PIPELINE_REF)"
                )
                out.append(
                    CascadeMember(name, MemberAction.REFUSED, None, (upstream[0],), reason=why)
                )
                break
    return out


def _generation(context: CascadeContext, pipeline: str) -> int:
    control = context.driver(pipeline).coordinator.control_record()
    return 0 if control is None else control.restore_generation


def _drive(
    context: CascadeContext,
    cascades: CascadeStore,
    record: CascadeRecord,
    planned: Mapping[str, CascadeMember],
    hook: StepHook | None,
) -> CascadeRecord:
    """Fence, restore each step not done (upstream first), lift the fences, retire. A
    finished record still active (its process died retiring it) is only retired: its
    outcome stands, and its steps are not run again, nor its fences set."""
    if record.finished:
        _release(context, record)
        cascades.retire(record)
        context.progress(describe(record))
        return record
    _fence(context, cascades, record)
    failure = None
    try:
        for step in record.steps:
            if step.done:
                continue
            try:
                _restore_step(context, record.cascade_id, step, planned.get(step.pipeline), hook)
            except (RestoreRefused, DeployRefused) as exc:  # it can never finish: say why
                failure = f"pipeline '{step.pipeline}': {exc}"
                break
            record = cascades.update(record.cascade_id, lambda r, p=step.pipeline: mark_done(r, p))
    except CascadeBusy:  # another process finished it meanwhile: lift what this one set
        _release(context, record)
        raise
    if failure is None:
        failure = _left_behind(context, record)
    _release(context, record)
    record = cascades.update(record.cascade_id, lambda r: finished(r, context.clock(), failure))
    # Again, now that the record says it is over: a repair that rebuilt a lost control
    # record from the record while it was applying wrote the fence after the first lift
    # (it lifts the fence itself only once the record says so: protocol/repair.py).
    _release(context, record)
    cascades.retire(record)
    context.progress(describe(record))
    return record


def _fence(context: CascadeContext, cascades: CascadeStore, record: CascadeRecord) -> None:
    """Hold every pipeline of the record, over the fences of cascades that are over;
    then make sure the record is still the active one (a resume racing another may
    have lost: it lifts what it set, CascadeBusy)."""
    for pipeline in record.pipelines:
        coordinator = context.driver(pipeline).coordinator
        if stale := retired_fence(coordinator.control_record(), cascades):
            coordinator.release_cascade(stale)
        coordinator.hold_for_cascade(record.fence())
    try:
        cascades.update(record.cascade_id, lambda _r: None)
    except CascadeBusy:
        _release(context, record)
        raise


def _release(context: CascadeContext, record: CascadeRecord) -> None:
    for pipeline in record.pipelines:
        context.driver(pipeline).coordinator.release_cascade(record.cascade_id)


def _left_behind(context: CascadeContext, record: CascadeRecord) -> str | None:
    """Pipelines the plan kept whose head now reads what the restores took back: one
    that completed a checkpoint between the plan and the restore of what it read (only
    the restored pipelines are fenced; a completion after that restore is refused by
    its finalize). Named, never left in silence."""
    store = context.store_ref.open()
    restored = set(record.pipelines)
    behind = []
    for name, pipeline in sorted(context.code.items()):
        reads = {s.upstream.pipeline for s in pipeline.sources.values() if s.upstream}
        if name in restored or not reads & restored:
            continue
        coordinator = context.driver(pipeline).coordinator
        try:
            control = coordinator.control_record()
            head = coordinator.get_outcome(control.head) if control and control.head else None
            since = head is not None and head.decided_at >= record.started_at  # else planned
            problems = taken_back(pipeline, store, head.pending) if head and since else []
        except BatchpointError as exc:
            problems = [f"cannot be told ({exc})"]
        if problems:
            behind.append(f"pipeline '{name}': {problems[0]}")
    if not behind:
        return None
    return (
        "a pipeline the plan kept completed a checkpoint since the plan that reads what "
        "the restores took back; restore it (`batchpoint restore --pipeline <name>`) or "
        "run the cascade again: " + "; ".join(behind)
    )


def _restore_step(
    context: CascadeContext,
    cascade_id: str,
    step: CascadeStep,
    member: CascadeMember | None,
    hook: StepHook | None,
) -> None:
    driver = context.driver(step.pipeline)
    if restored_by_cascade(driver.coordinator.control_record(), step):
        # The head moved before a crash: what the restore does after it rolls forward
        # (the sinks rewound, its restore record, the target's output published).
        driver.coordinator.restorer.finish()
        driver.notify_complete(step.target)
        return
    if hook is not None:
        hook("before-restore", step.pipeline)
    if member is not None and member.planner is not None and member.plan is not None:
        planner, plan = member.planner, member.plan
    else:  # resumed: the gate passed it when the cascade was planned
        planner = context.planner(driver, {}, record=True, gated=False)
        plan = planner.plan(step.target, dict(step.parallelism) or None)
    context.progress(f"restoring '{step.pipeline}' to checkpoint {step.target}")
    planner.apply(plan, cascade=cascade_id)
    if hook is not None:
        hook("after-restore", step.pipeline)
