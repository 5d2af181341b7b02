"""The deploy plan as pure rules (protocol/deploy_plan.py): every verdict, the rename
hint naming `uid=`, the allowances, and a property test over random deploys."""

from __future__ import annotations

import json
from dataclasses import replace

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchpoint.protocol.deploy_plan import (
    DeployAllowances,
    StateEvolution,
    Verdict,
    plan_deploy,
)
from batchpoint.protocol.pipeline import OperatorKind
from batchpoint.protocol.source_input import READ
from batchpoint.protocol.topology import NodeTopology, StateTopology, Topology

TOTALS = pa.schema([pa.field("user", pa.string(), nullable=False), pa.field("n", pa.int32())])
SEEN = pa.schema([pa.field("user", pa.string(), nullable=False)])


def op(uid: str, name: str | None = None, *states: StateTopology, **kw) -> NodeTopology:
    defaults = {"parallelism": 2, "max_parallelism": 16, "key_columns": ("user",)}
    return NodeTopology(
        uid, name or uid, OperatorKind.OPERATOR, states=states, **{**defaults, **kw}
    )


def state(uid: str, schema: pa.Schema = TOTALS, name: str | None = None) -> StateTopology:
    return StateTopology.declared(uid, name or uid, schema)


def sink(uid: str, name: str | None = None, **properties: str) -> NodeTopology:
    return NodeTopology(
        uid,
        name or uid,
        OperatorKind.SINK,
        1,
        16,
        ("user",),
        properties={"mode": "append", **properties},
    )


SOURCE = NodeTopology("events", "events", OperatorKind.SOURCE, properties={"root": "in"})


def topo(*nodes: NodeTopology) -> Topology:
    return Topology((SOURCE, *nodes))


def verdicts(plan) -> set[tuple[str, str, Verdict, bool]]:
    return {(e.kind, e.uid, e.verdict, e.refused) for e in plan.entries}


def test_the_same_code_keeps_everything() -> None:
    t = topo(op("agg", None, state("totals")), sink("out"))
    plan = plan_deploy(t, t, base=4)
    assert plan.deployable and plan.unchanged
    assert {e.verdict for e in plan.entries} == {Verdict.KEPT}
    assert plan.render(compact=True) == "deploy plan against checkpoint 4: deployable; all 4 kept"


def test_nothing_stored_makes_everything_new() -> None:
    plan = plan_deploy(None, topo(op("agg", None, state("totals")), sink("out")))
    assert {e.verdict for e in plan.entries} == {Verdict.NEW} and plan.deployable
    assert "read from its beginning" in plan.render()


def test_a_rename_with_the_uid_kept_is_kept() -> None:
    old = topo(op("agg", "aggregate", state("totals")))
    new = topo(op("agg", "aggregate2", state("totals", name="sums")))
    plan = plan_deploy(old, new)
    assert ("operator", "agg", Verdict.RENAMED, False) in verdicts(plan)
    assert ("state", "totals", Verdict.RENAMED, False) in verdicts(plan)
    assert ("state", "totals", Verdict.KEPT, False) in verdicts(plan)
    assert plan.deployable


def test_a_rename_without_uid_is_refused_naming_the_fix() -> None:
    old = topo(op("aggregate", None, state("totals")))
    new = topo(op("aggregate2", None, state("totals")))
    plan = plan_deploy(old, new)
    assert not plan.deployable
    (problem,) = plan.problems
    assert "operator 'aggregate' (uid 'aggregate') would be dropped" in problem
    assert "'aggregate2' looks like 'aggregate' renamed: declare uid='aggregate'" in problem
    # explicitly allowed: a drop and a new operator, the hint kept for the reader
    allowed = plan_deploy(old, new, DeployAllowances(allow_non_restored_state=True))
    assert allowed.deployable
    assert ("operator", "aggregate2", Verdict.NEW, False) in verdicts(allowed)


def test_a_state_renamed_without_uid_names_state_uid() -> None:
    old = topo(op("agg", None, state("totals"), state("seen", SEEN)))
    new = topo(op("agg", None, state("sums"), state("seen", SEEN)))
    (problem,) = plan_deploy(old, new).problems
    assert "state 'totals' (uid 'totals') of operator 'agg' would be dropped" in problem
    assert "looks like 'sums' renamed: declare State(..., uid='totals')" in problem


def test_a_removed_state_needs_an_allowance() -> None:
    old = topo(op("agg", None, state("totals"), state("seen", SEEN)))
    new = topo(op("agg", None, state("totals")))
    refused = plan_deploy(old, new)
    assert ("state", "seen", Verdict.DROPPED, True) in verdicts(refused)
    assert "pipeline.drop_state('agg', 'seen')" in refused.problems[0]
    for allow in (
        DeployAllowances(dropped_states=frozenset({("agg", "seen")})),
        DeployAllowances(allow_non_restored_state=True),
    ):
        assert ("state", "seen", Verdict.DROPPED, False) in verdicts(plan_deploy(old, new, allow))
    other = DeployAllowances(dropped_states=frozenset({("agg", "totals")}))
    assert not plan_deploy(old, new, other).deployable


def test_a_removed_operator_or_sink_needs_an_allowance() -> None:
    old = topo(
        op("agg", None, state("totals")), op("extra", None, state("seen", SEEN)), sink("out")
    )
    new = topo(op("agg", None, state("totals")))
    plan = plan_deploy(old, new)
    assert {e.uid for e in plan.entries if e.refused} == {"extra", "out"}
    assert any("pipeline.drop_operator('extra')" in p for p in plan.problems)
    assert any("pipeline.drop_sink('out')" in p for p in plan.problems)
    allow = DeployAllowances(
        dropped_operators=frozenset({"extra"}), dropped_sinks=frozenset({"out"})
    )
    assert plan_deploy(old, new, allow).deployable


def test_a_removed_stateless_operator_loses_nothing() -> None:
    old = topo(op("agg", None, state("totals")), op("map", key_columns=()))
    plan = plan_deploy(old, topo(op("agg", None, state("totals"))))
    assert plan.deployable, plan.render()
    assert ("operator", "map", Verdict.DROPPED, False) in verdicts(plan)


def test_a_removed_source_needs_an_allowance_since_its_offsets_are_state() -> None:
    """A source's offsets are stored state, as a Flink source's are (invariant 15):
    forgotten in silence, the source added back later would read every file again."""
    old = topo(op("agg", None, state("totals")))
    new = Topology((op("agg", None, state("totals")),))
    plan = plan_deploy(old, new)
    assert ("source", "events", Verdict.DROPPED, True) in verdicts(plan)
    (problem,) = plan.problems
    assert "source 'events' (uid 'events') is no longer read" in problem
    assert "pipeline.drop_source('events')" in problem and "--allow-non-restored-state" in problem
    for allow in (
        DeployAllowances(dropped_sources=frozenset({"events"})),
        DeployAllowances(allow_non_restored_state=True),
    ):
        allowed = plan_deploy(old, new, allow)
        assert allowed.deployable, allowed.render()
        assert ("source", "events", Verdict.DROPPED, False) in verdicts(allowed)
    other = DeployAllowances(dropped_sources=frozenset({"clicks"}))
    assert not plan_deploy(old, new, other).deployable


def test_a_renamed_sink_or_source_without_uid_is_named() -> None:
    old = topo(sink("out", table="db.t"))
    new = topo(sink("out2", table="db.t"))
    dropped, table = plan_deploy(old, new).problems
    assert "declare uid='out' on 'out2'" in dropped
    assert "db.t" in table and "uid='out'" in table


def test_a_source_renamed_without_uid_is_refused_since_it_would_read_every_file_again() -> None:
    """Under a new uid a source has no offset in the base's barrier: it would read from
    its beginning the files the old one read (DESIGN.md invariant 3)."""
    agg = op("agg", None, state("totals"))
    old = Topology((SOURCE, agg))

    def renamed(root: str) -> Topology:
        source = NodeTopology("events2", "events2", OperatorKind.SOURCE, properties={"root": root})
        return Topology((source, agg))

    (problem,) = plan_deploy(old, renamed("in")).problems
    assert "source 'events' (uid 'events') is no longer read" in problem
    assert "'events2' reads the same files: declare uid='events' on 'events2'" in problem
    allowed = DeployAllowances(allow_non_restored_state=True)
    assert plan_deploy(old, renamed("in"), allowed).deployable  # a backfill, meant
    dropped = DeployAllowances(dropped_sources=frozenset({"events"}))
    assert plan_deploy(old, renamed("elsewhere"), dropped).deployable  # nothing read twice
    assert not plan_deploy(old, renamed("elsewhere")).deployable  # but events' offsets are lost


def test_a_source_kept_by_uid_on_other_input_is_refused_since_its_offsets_do_not_apply() -> None:
    """The base's offsets of a uid are its old input's: on another upstream pipeline,
    table, root or location they skip or re-read rows (a reviewer's demonstration: files
    switched to a Delta table were read again)."""
    agg = op("agg", None, state("totals"))

    def reading(**properties: str) -> Topology:
        return Topology(
            (NodeTopology("feed", "feed", OperatorKind.SOURCE, properties=properties), agg)
        )

    files = {"root": "in", "format": "json"}
    cases = {
        "upstream 'ledger' -> 'books'": (
            {"upstream": "ledger", "sink": "out"},
            {"upstream": "books", "sink": "out"},
        ),
        "root 'in' -> None": (
            files,
            {"table": "landing.events", "table_catalog": "default", "table_format": "delta"},
        ),
        "root 'in' -> 'in2'": (files, {**files, "root": "in2"}),
        "another location": (
            {"location": "aaaa", "format": "json"},
            {"location": "bbbb", "format": "json"},
        ),
    }
    for change, (before, after) in cases.items():
        (problem,) = plan_deploy(reading(**before), reading(**after)).problems
        assert "reads other input than its offsets were taken on" in problem, change
        assert change in problem and "pipeline.drop_source('feed')" in problem
        # The way out the message gives: a new uid, the old one dropped.
        moved = Topology(
            (NodeTopology("feed2", "feed", OperatorKind.SOURCE, properties=after), agg)
        )
        dropped = DeployAllowances(dropped_sources=frozenset({"feed"}))
        assert plan_deploy(reading(**before), moved, dropped).deployable, change
        # The same files moved: the offsets kept, the source's own checks judge them;
        # never another pipeline's checkpoint ids.
        kept = DeployAllowances(allow_non_restored_state=True)
        movable = plan_deploy(reading(**before), reading(**after), kept).deployable
        assert movable == ("upstream" not in before), change
    # Not other input: another format of the same files, the same properties, and a
    # record of an older release that has none.
    assert plan_deploy(reading(**files), reading(**{**files, "format": "jsonl"})).deployable
    assert plan_deploy(reading(**files), reading(**files)).unchanged
    assert plan_deploy(reading(), reading(location="bbbb", format="json")).deployable
    # An upstream sink by name or uid: its offsets are keyed by uid, so the plan judges
    # the partitions (READ: the one the base read, the one the code's sink resolves to;
    # tests/runtime/test_source_deploys.py resolves them); a Delta table's catalog is no
    # part of it.
    sink = {"upstream": "ledger", "sink": "out"}
    assert plan_deploy(reading(**sink), reading(**{**sink, "sink": "out_uid"})).deployable
    read = {**sink, READ: "ledger/out"}
    assert plan_deploy(reading(**read), reading(**{**read, "sink": "main"})).deployable
    (problem,) = plan_deploy(reading(**read), reading(**{**read, READ: "ledger/audit"})).problems
    assert "reads ledger/audit, and its offsets are ledger/out's" in problem
    assert "pipeline.drop_source('feed')" in problem
    kept = DeployAllowances(allow_non_restored_state=True)
    assert not plan_deploy(
        reading(**read), reading(**{**read, READ: "ledger/audit"}), kept
    ).deployable
    assert plan_deploy(reading(**sink), reading(**{**read, READ: "ledger/audit"})).deployable
    delta = {"table": "landing.events", "table_catalog": "a", "table_format": "delta"}
    assert plan_deploy(reading(**delta), reading(**{**delta, "table_catalog": "b"})).deployable


def test_parallelism_rescales_and_max_parallelism_or_key_is_incompatible() -> None:
    old = topo(op("agg", None, state("totals")))
    rescaled = plan_deploy(old, topo(op("agg", None, state("totals"), parallelism=3)))
    (entry,) = [e for e in rescaled.entries if e.verdict is Verdict.RESCALED]
    assert entry.detail == "parallelism 2 -> 3, by key group" and rescaled.deployable
    moved = plan_deploy(old, topo(op("agg", None, state("totals"), max_parallelism=32)))
    assert "max_parallelism is the key-group count" in moved.problems[0]
    rekeyed = plan_deploy(old, topo(op("agg", None, state("totals"), key_columns=("n",))))
    assert "a new key is a new state" in rekeyed.problems[0]
    stateless = topo(op("map", key_columns=("a",)))
    assert plan_deploy(stateless, topo(op("map", key_columns=("b",), max_parallelism=8))).deployable


def test_schema_verdicts_come_from_the_evolution_rules() -> None:
    old = topo(op("agg", None, state("totals")))
    wider = pa.schema([TOTALS.field("user"), pa.field("n", pa.int64()), pa.field("x", pa.int8())])
    plan = plan_deploy(old, topo(op("agg", None, state("totals", wider))))
    (entry,) = [e for e in plan.entries if e.kind == "state"]
    assert entry.verdict is Verdict.MIGRATED and "widened" in entry.detail
    narrowed = pa.schema([TOTALS.field("user"), pa.field("n", pa.int8())])
    refused = plan_deploy(old, topo(op("agg", None, state("totals", narrowed))))
    assert (
        "operator 'agg', state 'totals'" in refused.problems[0] and "int32" in refused.problems[0]
    )
    user = plan_deploy(
        old,
        topo(op("agg", None, state("totals", narrowed))),
        evolution={("agg", "totals"): StateEvolution(migrate=True)},
    )
    assert user.deployable
    assert [e.verdict for e in user.entries if e.kind == "state"] == [Verdict.USER_MIGRATION]


def test_a_checkpoint_without_schemas_keeps_its_states() -> None:
    old = topo(op("agg", None, StateTopology("totals", "totals")))
    plan = plan_deploy(old, topo(op("agg", None, state("totals"))), recorded=False)
    assert plan.deployable
    assert "schema not recorded" in plan.render() and "before version 2" in plan.render()


def test_the_plan_as_json_and_text() -> None:
    old = topo(op("agg", None, state("totals"), state("seen", SEEN)))
    plan = plan_deploy(old, topo(op("agg", None, state("totals"))), base=7)
    body = json.loads(json.dumps(plan.to_json()))
    assert body["deployable"] is False and body["base_checkpoint"] == 7
    assert body["problems"] == plan.problems
    dropped = [e for e in body["entries"] if e["verdict"] == "dropped"]
    assert dropped == [
        {
            "kind": "state",
            "uid": "seen",
            "name": "seen",
            "verdict": "dropped",
            "detail": plan.problems[0],
            "refused": True,
            "operator_uid": "agg",
        }
    ]
    text = plan.render()
    assert text.startswith("deploy plan against checkpoint 7: REFUSED (1 problem(s))")
    assert "agg/seen" in text and "dropped (refused)" in text


# -- the property: nothing stored is ever left unrestored without a refusal or allowance


SCHEMAS = [
    TOTALS,
    SEEN,
    pa.schema([pa.field("user", pa.string(), nullable=False), pa.field("v", pa.float64())]),
]


@st.composite
def topologies(draw: st.DrawFn) -> Topology:
    nodes = []
    for uid in draw(st.sets(st.sampled_from(["a", "b", "c", "d"]), max_size=3)):
        states = tuple(
            state(s, draw(st.sampled_from(SCHEMAS)))
            for s in sorted(draw(st.sets(st.sampled_from(["s1", "s2", "s3"]), max_size=2)))
        )
        name = draw(st.sampled_from([uid, uid + "_renamed"]))
        nodes.append(op(uid, name, *states, parallelism=draw(st.integers(1, 3))))
    for uid in draw(st.sets(st.sampled_from(["k1", "k2"]), max_size=2)):
        nodes.append(sink(uid))
    for uid in draw(st.sets(st.sampled_from(["e1", "e2"]), max_size=2)):
        root = {"root": draw(st.sampled_from(["r1", "r2"]))}
        nodes.append(NodeTopology(uid, uid, OperatorKind.SOURCE, properties=root))
    return Topology(tuple(nodes))


@settings(max_examples=300, deadline=None)
@given(
    old=topologies(),
    new=topologies(),
    allow_all=st.booleans(),
    drops=st.sets(st.sampled_from([("a", "s1"), ("b", "s2"), ("c", "s3")])),
    dropped_sources=st.sets(st.sampled_from(["e1", "e2"])),
)
def test_every_stored_state_is_kept_migrated_or_explicitly_dropped(
    old: Topology,
    new: Topology,
    allow_all: bool,
    drops: set[tuple[str, str]],
    dropped_sources: set[str],
) -> None:
    allow = DeployAllowances(
        allow_all, frozenset(drops), dropped_sources=frozenset(dropped_sources)
    )
    plan = plan_deploy(old, new, allow)
    # A source's offsets are stored state too: forgotten only when allowed.
    for uid in old.of_kind(OperatorKind.SOURCE):
        if uid not in new.of_kind(OperatorKind.SOURCE):
            (entry,) = [e for e in plan.entries if (e.kind, e.uid) == ("source", uid)]
            assert entry.verdict is Verdict.DROPPED
            assert entry.refused == (not (allow_all or uid in dropped_sources))
    code = {(n.uid, s.uid) for n in new.nodes for s in n.states}
    for node in old.nodes:
        for s in node.states:
            entries = [
                e
                for e in plan.entries
                if e.kind == "state" and (e.operator_uid, e.uid) == (node.uid, s.uid)
            ]
            assert entries, f"state {node.uid}/{s.uid} is missing from the plan"
            if (node.uid, s.uid) in code and node.uid in new.of_kind(OperatorKind.OPERATOR):
                assert all(e.verdict is not Verdict.DROPPED for e in entries)
                continue
            assert any(e.verdict is Verdict.DROPPED for e in entries)
            if not (allow_all or (node.uid, s.uid) in drops):
                assert not plan.deployable, plan.render()
    # each code node and state is in the plan; the plan refuses exactly on refused entries
    for node in new.nodes:
        assert any(e.uid == node.uid and e.kind == node.kind.value for e in plan.entries)
    assert plan.deployable == (not plan.problems)
    # a plan of the code on itself is always deployable and keeps everything
    same = plan_deploy(new, new)
    assert same.deployable and same.unchanged


def test_a_changed_node_is_reported_once_per_change() -> None:
    old = topo(op("agg", "x", state("totals")))
    new = topo(replace(op("agg", "y", state("totals")), parallelism=4))
    kinds = [e.verdict for e in plan_deploy(old, new).entries if e.kind == "operator"]
    assert kinds == [Verdict.RENAMED, Verdict.RESCALED]


@pytest.mark.parametrize("kind", ["operator", "sink"])
def test_a_new_node_of_either_kind_starts_empty(kind: str) -> None:
    node = op("late", None, state("s1")) if kind == "operator" else sink("late")
    plan = plan_deploy(topo(), topo(node))
    assert (kind, "late", Verdict.NEW, False) in verdicts(plan)


def test_a_version_1_checkpoint_s_topology_is_what_its_records_prove() -> None:
    from batchpoint.protocol.checkpoint import CompletedCheckpoint
    from support.record_examples import acks, pending

    old = pending()  # as a version-1 record reads: no topology
    state_acks = tuple(
        replace(a, handles=tuple(replace(h, name="state-balances") for h in a.handles[:1]))
        if a.task.operator == "balances"
        else a
        for a in acks()
    )
    derived = CompletedCheckpoint(old, state_acks, 0.0).topology
    assert old.topology is None
    balances = derived.node(OperatorKind.OPERATOR, "balances")
    assert balances is not None and balances.parallelism == 2 and balances.max_parallelism == 128
    assert [(s.uid, s.schema) for s in balances.states] == [("balances", None)]
    assert derived.node(OperatorKind.SINK, "alerts") is not None  # it staged sink output
    assert set(derived.of_kind(OperatorKind.SOURCE)) == {"payments"}
    assert derived.state_schema("balances", "balances") is None


def test_a_recorded_schema_is_found_by_uids() -> None:
    t = topo(op("agg", "renamed", state("totals", name="sums")))
    assert t.state_schema("agg", "totals") == TOTALS
    assert t.state_schema("renamed", "sums") is None


def test_a_sink_mode_change_is_incompatible() -> None:
    old = topo(op("agg", None, state("totals")), sink("out"))
    snapshot = topo(op("agg", None, state("totals")), sink("out", mode="snapshot"))
    plan = plan_deploy(old, snapshot)
    assert ("sink", "out", Verdict.INCOMPATIBLE, True) in verdicts(plan)
    (problem,) = plan.problems
    assert "mode append -> snapshot" in problem and "pipeline.drop_sink('out')" in problem
    # the advice followed: a new uid under the old name, the old uid dropped
    renewed = topo(op("agg", None, state("totals")), sink("out2", "out", mode="snapshot"))
    assert plan_deploy(old, renewed, DeployAllowances(dropped_sinks=frozenset({"out"}))).deployable
    # a base that recorded no mode (an older release): nothing to judge it by
    unknown = topo(op("agg", None, state("totals")), replace(sink("out"), properties={}))
    assert plan_deploy(unknown, snapshot).deployable
    # a table binding added or removed keeps the sink's history: not a mode
    assert plan_deploy(
        old, topo(op("agg", None, state("totals")), sink("out", table="db.t"))
    ).deployable


def test_a_sink_binding_a_table_another_sink_uid_writes_is_incompatible() -> None:
    """Seed 10033 of the deploy model checker: a table sink renamed without its uid,
    restored allowing non-restored state, failed in the restore's table sync."""
    t3 = {"table": "dm.t3", "table_catalog": "batchpoint"}
    agg = op("agg", None, state("totals"))
    old = topo(agg, sink("out", **t3))
    renamed = topo(agg, sink("sink4", **t3))
    allow_all = DeployAllowances(allow_non_restored_state=True)
    dropped = DeployAllowances(dropped_sinks=frozenset({"out"}))
    for allowances in (None, allow_all, dropped):
        plan = plan_deploy(old, renamed, allowances)
        assert ("sink", "sink4", Verdict.INCOMPATIBLE, True) in verdicts(plan)
        (problem,) = [p for p in plan.problems if "table" in p]
        assert "dm.t3" in problem and "uid='out'" in problem
    # the advice followed: the old uid on the new name goes on in its table
    assert plan_deploy(old, topo(agg, sink("out", "sink4", **t3))).deployable
    # another catalog's table of that name is another table
    elsewhere = {**t3, "table_catalog": "other"}
    assert plan_deploy(old, topo(agg, sink("sink4", **elsewhere)), dropped).deployable
    # two sinks swapping their tables: each binds the other's
    both = topo(agg, sink("a", table="dm.ta"), sink("b", table="dm.tb"))
    swapped = topo(agg, sink("a", table="dm.tb"), sink("b", table="dm.ta"))
    assert {e.uid for e in plan_deploy(both, swapped).entries if e.refused} == {"a", "b"}


def test_a_table_sink_mode_change_advises_another_table() -> None:
    agg = op("agg", None, state("totals"))
    old = topo(agg, sink("out", table="dm.t"))
    (problem,) = plan_deploy(old, topo(agg, sink("out", mode="snapshot", table="dm.t"))).problems
    assert "another table" in problem
    followed = topo(agg, sink("out2", "out", mode="snapshot", table="dm.t2"))
    assert plan_deploy(old, followed, DeployAllowances(dropped_sinks=frozenset({"out"}))).deployable
