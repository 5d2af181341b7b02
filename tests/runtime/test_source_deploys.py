"""A source's offsets are the state of its input: a deploy that forgets them, or keeps
them for other input, is refused by the plan, built from the real pipeline code
(runtime.deploy.code_topology), as the trigger and the restore build it. No Spark."""

from __future__ import annotations

import pyarrow as pa

from batchpoint.protocol.pipeline import OperatorKind
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.deploy import code_topology, plan_against

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
