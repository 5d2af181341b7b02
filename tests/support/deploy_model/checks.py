"""The deploy model checker's invariants, as comparisons of what the engine did and
stored against the reference: states and sinks equal, a refusal predicted by the plan
made just before it (the same problems, no Spark job), a deployable plan's epoch run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from batchpoint.errors import BatchpointError
from batchpoint.protocol.deploy_plan import DeployPlan
from support.deploy_model.reference import Reference
from support.deploy_model.version import Version
from support.deploy_model.world import World

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Violation:
    rule: str  # state, sink, plan-vs-docs, plan-vs-trigger, spark-before-refusal, stuck, ...
    detail: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.detail}"


def _key(row: Row) -> tuple:
    return tuple(sorted((k, repr(_plain(v))) for k, v in row.items()))


def _plain(value: Any) -> Any:
    return int(value) if isinstance(value, bool | int) and not isinstance(value, bool) else value


def differences(got: Iterable[Row], expected: Iterable[Row], limit: int = 4) -> str:
    """'' when the two multisets of rows are equal, else a short account of how not."""
    a, b = Counter(_key(r) for r in got), Counter(_key(r) for r in expected)
    if a == b:
        return ""
    extra, missing = list((a - b).elements()), list((b - a).elements())
    show = lambda rows: [dict(r) for r in rows[:limit]]  # noqa: E731
    return (
        f"{sum(a.values())} rows, expected {sum(b.values())}; "
        f"unexpected {len(extra)} {show(extra)}; missing {len(missing)} {show(missing)}"
    )


def plan_problems(plan: DeployPlan) -> list[str]:
    """The kinds of a plan's refused entries, for the tally: `state incompatible`, ..."""
    return [f"{e.kind} {e.verdict.value}" for e in plan.entries if e.refused]


def state_verdicts(plan: DeployPlan) -> dict[str, str]:
    """The plan's schema verdict of each kept state ("op uid/state uid" -> kept,
    migrated, user-migration or incompatible; a rename is a label, not a verdict)."""
    schema = {"kept", "migrated", "user-migration", "incompatible"}
    return {
        e.label: e.verdict.value
        for e in plan.entries
        if e.kind == "state" and e.verdict.value in schema and e.operator_uid
    }


def check_states(world: World, ref: Reference, code: Version) -> list[Violation]:
    base = ref.base
    out: list[Violation] = []
    if base is None:
        return out
    for op in code.ops:
        stored = base.ops.get(op.uid)
        for state in op.states:
            expected = stored.states.get(state.uid) if stored is not None else None
            if expected is None:
                continue
            where = f"state {op.uid}/{state.uid} at checkpoint {ref.head}"
            try:
                got = world.state(op.uid, state.uid)
            except Exception as exc:  # whatever the reader raised is the finding
                out.append(Violation("state", f"{where} unreadable: {type(exc).__name__}: {exc}"))
                continue
            diff = differences(got, expected.rows.values())
            if diff:
                out.append(Violation("state", f"{where}: {diff}"))
    return out


def check_sinks(world: World, ref: Reference, code: Version) -> list[Violation]:
    """Every sink of the code that the head has, read by the name it had there (after
    an epoch: the code's; after a restore the code's names are registered only by the
    next trigger, and a sink the code dropped is no sink of the pipeline's)."""
    out: list[Violation] = []
    for uid, sink in ref.sinks().items():
        if code.sink(uid) is None:
            continue
        rows = sink.visible()
        # `sink show` by the name a user knows; the manifest by its key, the uid
        readers = [("sink", world.sink, sink.name)] + (
            [("manifest", world.sink_manifest, uid)] if sink.table else []
        )
        for what, read, given in readers:
            try:
                got = read(given)
            except BatchpointError as exc:
                if rows or "published nothing" not in str(exc):
                    out.append(Violation("sink", f"{what} {sink.name} [{uid}]: {exc}"))
                continue
            diff = differences(got, rows)
            if diff:
                out.append(Violation("sink", f"{what} {sink.name} [{uid}] at {ref.head}: {diff}"))
    return out


def check_refusal(plan: DeployPlan | None, error: BaseException, jobs: int) -> list[Violation]:
    """A refused trigger or restore: the plan just before said so, naming the same
    problems, and no Spark job ran."""
    out = []
    if jobs:
        out.append(Violation("spark-before-refusal", f"{jobs} Spark job(s) ran: {error}"))
    if plan is None:
        return out
    if plan.deployable:
        out.append(Violation("plan-vs-trigger", f"plan deployable, refused: {error}"))
        return out
    missing = [p for p in plan.problems if p not in str(error)]
    if missing:
        out.append(Violation("plan-vs-trigger", f"refusal {error!s} lacks the plan's {missing}"))
    return out
