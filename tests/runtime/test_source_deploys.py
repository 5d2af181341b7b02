"""A source's offsets are the state of its input: a deploy that forgets them, or keeps
them for other input, is refused by the plan, built from the real pipeline code
(runtime.deploy.code_topology), as the trigger and the restore build it. No Spark."""

from __future__ import annotations

import pyarrow as pa
import pytest

from batchpoint.errors import TriggerRefused
from batchpoint.protocol.checkpoint import TaskMetrics
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline import OperatorKind, OperatorSpec, PipelineSpec
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.deploy import BaseCheck, code_topology, plan_against, plan_on
from batchpoint.storage.base import ObjectStore

EVENTS = pa.schema([pa.field("account_id", pa.string(), nullable=False), pa.field("n", pa.int64())])
TOTALS = pa.schema(
    [pa.field("account_id", pa.string(), nullable=False), pa.field("total", pa.int64())]
)
LANDING = "file:///data/landing/payments"


def pipeline(
    source: str, drop: str | None = None, uid: str | None = None, **where: str
) -> Pipeline:
    p = Pipeline("pay")
    p.source(source, schema=EVENTS, uid=uid, **where)
    p.operator("totals", inputs=[source], key=["account_id"], states={"totals": TOTALS})(
        lambda ctx: None
    )
    if drop is not None:
        p.drop_source(drop)
    return p


def plan(old: Pipeline, new: Pipeline):
    return plan_against(new, code_topology(old), 1)


def test_a_source_on_its_own_location_renamed_without_uid_is_named_as_a_rename():
    """Its location was recorded as nothing (credentials), so the rename went unseen and
    every file was read again; now a digest of the URI is recorded."""
    old = pipeline("events", root=LANDING)
    (problem,) = plan(old, pipeline("payments_in", root=LANDING)).problems
    assert "'payments_in' reads the same files: declare uid='events'" in problem
    assert plan(old, pipeline("payments_in", uid="events", root=LANDING)).deployable
    node = code_topology(old).node(OperatorKind.SOURCE, "events")
    assert node is not None and node.properties["location"]
    assert "landing" not in str(node.properties)  # never the URI: it may hold credentials


def test_a_source_moved_to_other_input_under_its_uid_is_refused_with_the_way_out():
    old = pipeline("events", root=LANDING)
    moves = {
        "another location": pipeline("events", root="file:///data/landing/refunds"),
        "table None -> 'landing.events'": pipeline(
            "events", table="landing.events", table_format="delta"
        ),
    }
    for change, new in moves.items():
        (problem,) = plan(old, new).problems
        assert change in problem and "pipeline.drop_source('events')" in problem, problem
    # The way out: a new uid reads the new input from its beginning, the old one dropped.
    fresh = pipeline("events", uid="events_v2", drop="events", table="landing.events")
    assert plan(old, fresh).deployable
    assert not plan(old, pipeline("events", uid="events_v2", table="landing.events")).deployable
    # Another format of the same files is the same input.
    assert plan(old, pipeline("events", root=LANDING, format="json")).deployable


# -- an upstream sink, resolved by the upstream's spec ------------------------------------


def _reports(sink: str, uid: str | None = None, drop: str | None = None) -> Pipeline:
    p = Pipeline("reports")
    p.source("ledger_in", upstream="ledger", sink=sink, schema=EVENTS, uid=uid)
    p.operator("totals", inputs=["ledger_in"], key=["account_id"], states={"totals": TOTALS})(
        lambda ctx: None
    )
    if drop is not None:
        p.drop_source(drop)
    return p


def _completed_reading(store: ObjectStore, pipeline: Pipeline, partition: str):
    """A completed checkpoint of `pipeline` whose barrier read `partition`, made by the
    real coordinator (no Spark: every task acks no files)."""
    spec = pipeline.spec()
    coordinator = CheckpointCoordinator(store, spec)
    coordinator.register(spec)
    barrier = {"ledger_in": {partition: 0}}
    pending = coordinator.trigger(barrier, topology=code_topology(pipeline, spec))
    for task in pending.expected_tasks:
        coordinator.acknowledge(pending.checkpoint_id, task, "a1", [], TaskMetrics())
    outcome = coordinator.try_finalize(pending.checkpoint_id)
    assert outcome is not None and outcome.completed is not None, outcome
    return outcome.completed


UPSTREAM = PipelineSpec(
    "ledger",
    (
        OperatorSpec("src", OperatorKind.SOURCE),
        OperatorSpec("main", OperatorKind.SINK, ("src",), uid="out"),
        OperatorSpec("audit", OperatorKind.SINK, ("src",)),
    ),
)


def test_a_source_switched_to_another_upstream_sink_is_refused_by_the_plan(
    local_store: ObjectStore,
) -> None:
    """The base read sink uid 'out' (named 'main' upstream): the plan resolves the
    code's sink by the upstream's registered spec, so `batchpoint plan` and the trigger
    refuse a switch to 'audit' before any epoch (it was refused only as the epoch read,
    invariant 18), and a sink named by its name or its uid is the same sink."""
    CheckpointCoordinator(local_store, UPSTREAM).register(UPSTREAM)
    base = _completed_reading(local_store, _reports("out"), "ledger/out")

    for same in ("out", "main"):
        plan = plan_on(_reports(same), local_store, base)
        assert plan.deployable and plan.unchanged, plan.render()
    refused = plan_on(_reports("audit"), local_store, base)
    (problem,) = refused.problems
    assert "reads ledger/audit, and its offsets are ledger/out's" in problem, problem
    allowed = plan_on(_reports("audit"), local_store, base, allow_non_restored_state=True)
    assert not allowed.deployable  # another sink's offsets are never kept
    # The way out the message names: a new uid reads 'audit' from its beginning.
    fresh = _reports("audit", uid="ledger_in_audit", drop="ledger_in")
    assert plan_on(fresh, local_store, base).deployable
    # A sink the upstream does not have is the epoch's error (it names the sinks), not
    # a deploy's: the plan does not judge what it cannot resolve.
    assert plan_on(_reports("nothing"), local_store, base).deployable


def test_the_switch_is_refused_on_a_base_still_pending(local_store: ObjectStore) -> None:
    """Concurrent checkpoints: the trigger judges the code against what a pending base's
    trigger recorded, its barrier too (a reviewer found the switch admitted there, and
    the epoch stopping at its read)."""
    CheckpointCoordinator(local_store, UPSTREAM).register(UPSTREAM)
    old, new = _reports("out"), _reports("audit")
    spec = old.spec()
    coordinator = CheckpointCoordinator(local_store, spec, CheckpointConfig(max_concurrent=2))
    coordinator.register(spec)
    first = coordinator.trigger({"ledger_in": {"ledger/out": 0}}, topology=code_topology(old, spec))
    check = BaseCheck(local_store, new, new.spec())
    with pytest.raises(TriggerRefused, match="reads ledger/audit, and its offsets are ledger/out"):
        coordinator.trigger(
            {"ledger_in": {"ledger/audit": 0}},
            topology=code_topology(new, new.spec()),
            check_base=check,
        )
    assert check.plan is not None and check.plan.base == first.checkpoint_id
