"""`batchpoint plan` says what the trigger does (DESIGN.md invariant 18), and a refusal
names every way out (invariant 15).

- With a checkpoint still pending (max_concurrent > 1) the next trigger builds on it,
  not on the head: the plan is made on that same base by the trigger's own functions,
  and says the base is pending.
- A sink gone beside a new one is named a rename only on evidence (the same table); a
  rename hint keeps the allowance beside it, as a hint is a guess.

Built by the real coordinator on a local store, no Spark: the operator's tasks ack
small state files whose handles record the declared schema (as
tests/runtime/test_deploy_base_verdicts.py does).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pytest

from batchpoint.errors import TriggerRefused
from batchpoint.protocol.checkpoint import CompletedCheckpoint, FileHandle, PendingCheckpoint
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.deploy_plan import plan_deploy
from batchpoint.protocol.metrics import TaskMetrics
from batchpoint.protocol.pipeline import OperatorKind
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.deploy import code_topology
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.streams import state_stream
from batchpoint.spark.compat import from_arrow_schema
from batchpoint.state.keygroups import key_group_range_for_subtask
from batchpoint.storage import StoreRef

EVENTS = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("n", pa.int64())])
STATE = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("c", pa.int64())])
CONCURRENT = CheckpointConfig(max_concurrent=2)


@pytest.fixture
def ref(tmp_path: Path) -> StoreRef:
    return StoreRef.of((tmp_path / "store").as_uri())


def pipeline(states: dict[str, pa.Schema], *, sink: str = "out", **sink_kw: str) -> Pipeline:
    p = Pipeline("conc")
    p.source("events", schema=EVENTS, root="in/events")
    p.operator("op", inputs=["events"], key=["k"], states=states)(lambda ctx: None)
    p.sink(sink, inputs=["op"], key=["k"], **sink_kw)
    return p


def complete(driver: PipelineDriver, pending: PendingCheckpoint) -> CompletedCheckpoint:
    """Every task acks a state file per declared state; the checkpoint completes."""
    coordinator, store, code = driver.coordinator, driver.store, driver.pipeline
    spec = coordinator.load_spec()
    for task in pending.expected_tasks:
        node = spec.operator(task.operator)
        handles = []
        if node.kind is OperatorKind.OPERATOR:
            opdef = next(o for o in code.operators.values() if o.name == task.operator)
            groups = key_group_range_for_subtask(
                node.max_parallelism, node.parallelism, task.subtask
            )
            for name, declared in opdef.states.items():
                data = f"{task} {pending.checkpoint_id} {name}\n".encode()
                cid = pending.checkpoint_id
                key = f"{code.name}/files/{task.operator}-{name}-{task.subtask}-{cid}"
                store.put(key, data)
                meta = {"spark_schema": from_arrow_schema(declared).json()}
                stream = state_stream(opdef.state_uid(name))
                digest = hashlib.sha256(data).hexdigest()
                span = (groups.start, groups.end)
                handles.append(FileHandle(key, len(data), digest, 1, span, stream, meta))
        coordinator.acknowledge(pending.checkpoint_id, task, "a1", handles, TaskMetrics())
    outcome = coordinator.try_finalize(pending.checkpoint_id)
    assert outcome is not None and outcome.completed is not None, outcome
    driver.notify_complete(pending.checkpoint_id)
    return outcome.completed


def epoch(ref: StoreRef, code: Pipeline) -> CompletedCheckpoint:
    driver = PipelineDriver(code, ref, CONCURRENT)
    return complete(driver, driver.trigger())


def trigger_verdict(code: Pipeline, ref: StoreRef) -> str | None:
    """None: the trigger admitted the code; else its refusal."""
    try:
        PipelineDriver(code, ref, CONCURRENT).trigger()
    except TriggerRefused as refused:
        return str(refused)
    return None


def test_a_state_the_pending_base_added_is_dropped_on_it_not_on_the_head(ref: StoreRef) -> None:
    """The head holds state a, the pending checkpoint a and b: code with a alone drops
    b from what the trigger builds on. Planned on the head it said deployable."""
    epoch(ref, pipeline({"a": STATE}))
    PipelineDriver(pipeline({"a": STATE, "b": STATE}), ref, CONCURRENT).trigger()
    code = pipeline({"a": STATE})
    plan = PipelineDriver(code, ref, CONCURRENT).plan()
    assert (plan.base, plan.pending, plan.deployable) == (2, True, False)
    assert plan.render().startswith("deploy plan against pending checkpoint 2: REFUSED")
    assert plan.to_json()["base_pending"] is True
    refusal = trigger_verdict(code, ref)
    assert refusal is not None and plan.problems[0] in refusal


def test_a_drop_the_pending_base_made_is_not_asked_again(ref: StoreRef) -> None:
    """The pending checkpoint dropped b (declared then); code without the declaration
    builds on it and drops nothing. Planned on the head (a, b) it was refused."""
    epoch(ref, pipeline({"a": STATE, "b": STATE}))
    dropping = pipeline({"a": STATE})
    dropping.drop_state("op", "b")
    PipelineDriver(dropping, ref, CONCURRENT).trigger()
    code = pipeline({"a": STATE})
    plan = PipelineDriver(code, ref, CONCURRENT).plan()
    assert (plan.base, plan.pending, plan.deployable) == (2, True, True), plan.problems
    assert trigger_verdict(code, ref) is None


def test_once_nothing_is_pending_the_head_is_planned_on_as_completed(ref: StoreRef) -> None:
    epoch(ref, pipeline({"a": STATE}))
    driver = PipelineDriver(pipeline({"a": STATE, "b": STATE}), ref, CONCURRENT)
    complete(driver, driver.trigger())
    plan = PipelineDriver(pipeline({"a": STATE}), ref, CONCURRENT).plan()
    assert (plan.base, plan.pending, plan.deployable) == (2, False, False)
    assert plan.render().startswith("deploy plan against checkpoint 2: REFUSED")
    assert plan.to_json()["base_pending"] is False


def test_an_unrelated_append_sink_is_no_rename_and_the_drop_is_offered(ref: StoreRef) -> None:
    """Append sinks without a table record their mode alone: no evidence of a rename.
    Said one, the hint had the new sink take over the old one's published output."""
    epoch(ref, pipeline({"a": STATE}, sink="alerts"))
    code = pipeline({"a": STATE}, sink="audit_log")
    plan = PipelineDriver(code, ref, CONCURRENT).plan()
    (problem,) = plan.problems
    assert "sink 'alerts' (uid 'alerts') would be dropped" in problem
    assert "looks like" not in problem and "uid='alerts' on" not in problem
    assert "--allow-non-restored-state, or pipeline.drop_sink('alerts')" in problem
    refusal = trigger_verdict(code, ref)
    assert refusal is not None and problem in refusal


def test_a_sink_on_the_same_table_is_named_a_rename_beside_the_drop() -> None:
    old = code_topology(pipeline({"a": STATE}, sink="alerts", table="dm.alerts"))
    new = code_topology(pipeline({"a": STATE}, sink="alerts2", table="dm.alerts"))
    gone = next(e for e in plan_deploy(old, new).entries if e.uid == "alerts")
    assert gone.refused
    assert "'alerts2' looks like 'alerts' renamed: declare uid='alerts' on 'alerts2'" in gone.detail
    assert "or allow the drop (--allow-non-restored-state, or pipeline.drop_sink('alerts'))" in (
        gone.detail
    )
    other = code_topology(pipeline({"a": STATE}, sink="alerts2", table="dm.other"))
    elsewhere = next(e for e in plan_deploy(old, other).entries if e.uid == "alerts")
    assert "looks like" not in elsewhere.detail and "drop_sink('alerts')" in elsewhere.detail


@pytest.mark.parametrize("kind", ["operator", "state", "source"])
def test_every_rename_hint_keeps_the_allowance(kind: str) -> None:
    """A twin of the same state schemas or the same files is a guess too."""
    old = pipeline({"a": STATE})
    if kind == "operator":
        new = Pipeline("conc")
        new.source("events", schema=EVENTS, root="in/events")
        new.operator("op2", inputs=["events"], key=["k"], states={"a": STATE})(lambda ctx: None)
        new.sink("out", inputs=["op2"], key=["k"])
        hint = "pipeline.drop_operator('op')"
    elif kind == "state":
        new, hint = pipeline({"a2": STATE}), "pipeline.drop_state('op', 'a')"
    else:
        new = Pipeline("conc")
        new.source("events2", schema=EVENTS, root="in/events")
        new.operator("op", inputs=["events2"], key=["k"], states={"a": STATE})(lambda ctx: None)
        new.sink("out", inputs=["op"], key=["k"])
        hint = "pipeline.drop_source('events')"
    (problem,) = plan_deploy(code_topology(old), code_topology(new)).problems
    assert "renamed" in problem or "reads the same files" in problem
    assert f"or allow the drop (--allow-non-restored-state, or {hint}" in problem
