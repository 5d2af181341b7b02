"""The deploy plan (issue 26, invariant 15): what a deploy of the code on a checkpoint
keeps, migrates, rescales or drops, decided before any Spark job runs.

`plan_deploy(stored, code, allowances)` compares the topology a checkpoint recorded with
the code's, node by node and state by state, matched by uid within each kind (sources,
operators, sinks). Pure: no storage, no Spark. The trigger refuses a checkpoint whose
plan is not deployable (against the base its admission chose), the restore a target
whose plan is not, and `batchpoint plan` prints it beforehand.

Nothing is dropped in silence: state of the checkpoint that the code would leave
unrestored (an operator, a state or a sink gone, or renamed without its uid) is refused
unless allowed (`allow_non_restored_state`, Flink's allowNonRestoredState, or the
pipeline's `drop_state` / `drop_operator` / `drop_sink` declarations). A name gone
beside a new one with the same evidence (state schemas, files or table) is named as
what it most likely is, a rename, with the fix (declare `uid=` with the old uid) beside
the allowance: a guess, so the drop stays on offer.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from batchpoint.protocol.pipeline import OperatorKind
from batchpoint.protocol.source_input import source_input_problems
from batchpoint.protocol.topology import NodeTopology, StateTopology, Topology
from batchpoint.state.evolution import VerdictKind, resolve_schema_compatibility


class Verdict(enum.StrEnum):
    KEPT = "kept"
    MIGRATED = "migrated"  # a schema change the rules migrate on read
    USER_MIGRATION = "user-migration"  # the state's migrate= function runs once
    NEW = "new"  # starts empty (an operator, a state, a sink) or from the beginning (a source)
    RESCALED = "rescaled"  # parallelism from -> to, by key group
    RENAMED = "renamed"  # same uid, another name: kept
    REWRITTEN = "rewritten"  # its state written in full under the code's key
    DROPPED = "dropped"  # in the checkpoint, not in the code: allowed or refused
    INCOMPATIBLE = "incompatible"


@dataclass(frozen=True)
class DeployAllowances:
    """What the user allowed to be left unrestored."""

    allow_non_restored_state: bool = False
    dropped_states: frozenset[tuple[str, str]] = frozenset()  # (operator uid, state uid)
    dropped_operators: frozenset[str] = frozenset()
    dropped_sinks: frozenset[str] = frozenset()
    dropped_sources: frozenset[str] = frozenset()

    def allows_state(self, operator_uid: str, state_uid: str) -> bool:
        return (
            self.allow_non_restored_state
            or operator_uid in self.dropped_operators
            or (operator_uid, state_uid) in self.dropped_states
        )


@dataclass(frozen=True)
class StateEvolution:
    """A state's declared evolution in the code (runtime.api.State)."""

    defaults: Mapping[str, Any] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()
    migrate: bool = False


@dataclass(frozen=True)
class PlanEntry:
    """One line of the plan: a node (or one state of an operator) and its verdict."""

    kind: str  # "source", "operator", "sink" or "state"
    uid: str
    name: str
    verdict: Verdict
    detail: str = ""
    operator_uid: str | None = None  # a state's operator
    refused: bool = False
    schema: Mapping[str, Any] | None = None  # the schema verdict's JSON, for a state

    @property
    def label(self) -> str:
        return f"{self.operator_uid}/{self.uid}" if self.operator_uid else self.uid

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": self.kind,
            "uid": self.uid,
            "name": self.name,
            "verdict": self.verdict.value,
            "detail": self.detail,
            "refused": self.refused,
        }
        if self.operator_uid is not None:
            body["operator_uid"] = self.operator_uid
        if self.schema is not None:
            body["schema"] = dict(self.schema)
        return body


@dataclass(frozen=True)
class DeployPlan:
    entries: tuple[PlanEntry, ...]
    base: int | None = None  # the checkpoint compared with, None: nothing stored
    recorded: bool = True  # False: a checkpoint before version 2 (no schemas recorded)
    pending: bool = False  # the base is still pending (concurrent checkpoints)

    @property
    def deployable(self) -> bool:
        return not any(e.refused for e in self.entries)

    @property
    def problems(self) -> list[str]:
        return [e.detail for e in self.entries if e.refused]

    @property
    def unchanged(self) -> bool:
        return all(e.verdict is Verdict.KEPT for e in self.entries)

    def to_json(self) -> dict[str, Any]:
        return {
            "base_checkpoint": self.base,
            "base_pending": self.pending,
            "deployable": self.deployable,
            "schemas_recorded": self.recorded,
            "problems": self.problems,
            "entries": [e.to_json() for e in self.entries],
        }

    def render(self, *, compact: bool = False) -> str:
        """The plan as text: one line per entry (`compact`: one line in all when every
        entry is kept)."""
        against = "nothing stored" if self.base is None else f"checkpoint {self.base}"
        if self.pending:  # what the next trigger builds on, not yet completed
            against = f"pending {against}"
        head = f"deploy plan against {against}: " + (
            "deployable" if self.deployable else f"REFUSED ({len(self.problems)} problem(s))"
        )
        if compact and self.unchanged:
            return f"{head}; all {len(self.entries)} kept"
        rows = [("KIND", "UID", "NAME", "VERDICT", "DETAIL")]
        for e in self.entries:
            verdict = e.verdict.value + (" (refused)" if e.refused else "")
            rows.append((e.kind, e.label, e.name, verdict, e.detail))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [head]
        for r in rows:
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)))
            lines[-1] = (lines[-1] + "  " + r[4]).rstrip()
        if not self.recorded:
            lines.append("  (the checkpoint recorded no schemas: written before version 2)")
        return "\n".join(lines)


def plan_deploy(
    stored: Topology | None,
    code: Topology,
    allowances: DeployAllowances | None = None,
    *,
    evolution: Mapping[tuple[str, str], StateEvolution] | None = None,
    base: int | None = None,
    recorded: bool = True,
    claimed: Mapping[tuple[str, str], str] | None = None,
) -> DeployPlan:
    """The plan of deploying `code` on a checkpoint whose topology is `stored` (None:
    nothing stored, everything is new). `evolution`: (operator uid, state uid) -> the
    state's declared evolution. `claimed`: (catalog, table) -> the sink uid its table
    names as its writer, for tables the code binds that `stored` records no sink of (a
    sink a restore took back made it, or an older release that recorded no tables)."""
    allow = allowances or DeployAllowances()
    planner = _Planner(allow, evolution or {})
    for kind in (OperatorKind.SOURCE, OperatorKind.OPERATOR, OperatorKind.SINK):
        old = stored.of_kind(kind) if stored is not None else {}
        planner.kind(kind, old, code.of_kind(kind))
    for node, problem in _table_problems(stored, code, claimed or {}):
        planner.add("sink", node.uid, node.name, Verdict.INCOMPATIBLE, problem, refused=True)
    return DeployPlan(tuple(planner.entries), base, recorded)


class _Planner:
    def __init__(
        self, allow: DeployAllowances, evolution: Mapping[tuple[str, str], StateEvolution]
    ) -> None:
        self.allow = allow
        self.evolution = evolution
        self.entries: list[PlanEntry] = []

    def add(self, *args: Any, **kwargs: Any) -> None:
        self.entries.append(PlanEntry(*args, **kwargs))

    def kind(
        self, kind: OperatorKind, old: dict[str, NodeTopology], new: dict[str, NodeTopology]
    ) -> None:
        added = [n for uid, n in new.items() if uid not in old]
        for uid, node in new.items():
            if uid in old:
                self.node(old[uid], node)
        for node in added:
            what = "read from its beginning" if kind is OperatorKind.SOURCE else "starts empty"
            self.add(kind.value, node.uid, node.name, Verdict.NEW, what)
            for state in node.states:
                self.add("state", state.uid, state.name, Verdict.NEW, "starts empty", node.uid)
        for uid, node in old.items():
            if uid not in new:
                twin = next((n for n in added if _looks_renamed(node, n)), None)
                self.gone(node, twin)

    def node(self, old: NodeTopology, new: NodeTopology) -> None:
        kind, before = new.kind.value, len(self.entries)
        if old.name != new.name:
            self.add(kind, new.uid, new.name, Verdict.RENAMED, f"'{old.name}' -> '{new.name}'")
        for problem in _placement_problems(old, new) + _sink_problems(old, new):
            self.add(kind, new.uid, new.name, Verdict.INCOMPATIBLE, problem, refused=True)
        for problem, movable in source_input_problems(old, new):
            moved = movable and self.allow.allow_non_restored_state
            self.add(kind, new.uid, new.name, Verdict.INCOMPATIBLE, problem, refused=not moved)
        if new.kind is not OperatorKind.SOURCE and old.parallelism != new.parallelism:
            detail = f"parallelism {old.parallelism} -> {new.parallelism}, by key group"
            self.add(kind, new.uid, new.name, Verdict.RESCALED, detail)
        if old.states and old.key_columns is None and new.key_columns is not None:
            # Placed by a key it never recorded: a changelog under the code's key would
            # lay rows over files placed by another (runtime/incremental.rewrite_reason).
            detail = (
                "key not recorded (an older release): its state is rewritten in full "
                f"under key {list(new.key_columns)}"
            )
            self.add(kind, new.uid, new.name, Verdict.REWRITTEN, detail)
        if len(self.entries) == before:
            self.add(kind, new.uid, new.name, Verdict.KEPT)
        self.states(old, new)

    def states(self, old: NodeTopology, new: NodeTopology) -> None:
        old_states = {s.uid: s for s in old.states}
        added = [s for s in new.states if s.uid not in old_states]
        for state in new.states:
            if state.uid in old_states:
                self.state(new, old_states[state.uid], state)
        for state in added:
            self.add("state", state.uid, state.name, Verdict.NEW, "starts empty", new.uid)
        for uid, state in old_states.items():
            if any(s.uid == uid for s in new.states):
                continue
            twin = next((s for s in added if _same_schema(state, s)), None)
            allowed = self.allow.allows_state(new.uid, uid)
            what = f"state '{state.name}' (uid '{uid}') of {new.kind.value} '{new.name}'"
            detail = f"{what} would be dropped"
            if twin is not None:
                detail += (
                    f"; it looks like '{twin.name}' renamed: declare "
                    f"State(..., uid='{uid}') on it to keep the state"
                )
            if not allowed:
                detail += allow_drop(twin is not None, f"pipeline.drop_state('{new.uid}', '{uid}')")
            self.add("state", uid, state.name, Verdict.DROPPED, detail, new.uid, not allowed)

    def state(self, node: NodeTopology, old: StateTopology, new: StateTopology) -> None:
        add = self.add
        if old.name != new.name:
            rename = f"'{old.name}' -> '{new.name}'"
            add("state", new.uid, new.name, Verdict.RENAMED, rename, node.uid)
        stored, declared = old.arrow_schema(), new.arrow_schema()
        if stored is None or declared is None:
            detail = "" if declared is None else "schema not recorded: read as declared"
            add("state", new.uid, new.name, Verdict.KEPT, detail, node.uid)
            return
        decl = self.evolution.get((node.uid, new.uid), StateEvolution())
        verdict = resolve_schema_compatibility(
            stored,
            declared,
            tuple(node.key_columns or ()),
            defaults=decl.defaults,
            dropped=decl.dropped,
            migrate=decl.migrate,
            what=f"{node.kind.value} '{node.name}', state '{new.name}'",
        )
        schema = verdict.to_json()
        if verdict.kind is VerdictKind.UNCHANGED:
            add("state", new.uid, new.name, Verdict.KEPT, "", node.uid, schema=schema)
        elif verdict.kind is VerdictKind.MIGRATED:
            rules = ", ".join(sorted({c.kind.value for c in verdict.changes}))
            add("state", new.uid, new.name, Verdict.MIGRATED, rules, node.uid, schema=schema)
        elif verdict.kind is VerdictKind.USER_MIGRATION:
            why = "migrate= runs once: " + "; ".join(verdict.messages)
            add("state", new.uid, new.name, Verdict.USER_MIGRATION, why, node.uid, schema=schema)
        else:
            why = "; ".join(verdict.messages)
            add("state", new.uid, new.name, Verdict.INCOMPATIBLE, why, node.uid, True, schema)

    def gone(self, node: NodeTopology, twin: NodeTopology | None) -> None:
        kind = node.kind.value
        what = f"{kind} '{node.name}' (uid '{node.uid}')"
        if node.kind is OperatorKind.SOURCE:
            # Its offsets are stored state, as a Flink source's are: forgotten, the source
            # added back later (or a new one on its files) reads every file again.
            allowed = self.allow.allow_non_restored_state or node.uid in self.allow.dropped_sources
            detail = f"{what} is no longer read; its offsets would be forgotten"
            hint = (
                f"pipeline.drop_source('{node.uid}'): added back later, it reads every file again"
            )
        elif node.kind is OperatorKind.SINK:
            allowed = self.allow.allow_non_restored_state or node.uid in self.allow.dropped_sinks
            detail = f"{what} would be dropped with its published output's manifest"
            hint = f"pipeline.drop_sink('{node.uid}')"
        else:
            allowed = all(self.allow.allows_state(node.uid, s.uid) for s in node.states)
            states = ", ".join(f"'{s.name}'" for s in node.states)
            detail = f"{what} would be dropped" + (f" with its state {states}" if states else "")
            hint = f"pipeline.drop_operator('{node.uid}')"
        if twin is not None and node.kind is OperatorKind.SOURCE:
            detail += (
                f"; '{twin.name}' reads the same files: declare uid='{node.uid}' on "
                f"'{twin.name}' to go on from its offsets (under a new uid it reads every "
                "file again)"
            )
        elif twin is not None:
            detail += (
                f"; '{twin.name}' looks like '{node.name}' renamed: declare uid='{node.uid}' "
                f"on '{twin.name}' to keep it"
            )
        if not allowed:
            detail += allow_drop(twin is not None, hint)
        self.add(kind, node.uid, node.name, Verdict.DROPPED, detail, refused=not allowed)
        for state in node.states:
            verdict_detail = f"dropped with {kind} '{node.name}'"
            self.add("state", state.uid, state.name, Verdict.DROPPED, verdict_detail, node.uid)


def allow_drop(guessed_twin: bool, drop_call: str) -> str:
    """How a refused drop is allowed, said even beside a guessed rename: a twin is a
    guess, and the drop may be what is meant."""
    allow = ", or allow the drop" if guessed_twin else ": allow it"
    return f"{allow} (--allow-non-restored-state, or {drop_call})"


def _placement_problems(old: NodeTopology, new: NodeTopology) -> list[str]:
    """What moves stored state out of its key group: another max_parallelism (the
    key-group count) or another key. Only state is placed: a node without any (a
    source, a stateless operator, a sink: its output is published per epoch) may
    change both."""
    if not old.states:
        return []
    what, problems = f"{new.kind.value} '{new.name}'", []
    moved = old.max_parallelism != new.max_parallelism
    if moved and None not in (old.max_parallelism, new.max_parallelism):
        problems.append(
            f"{what}: max_parallelism {old.max_parallelism} -> {new.max_parallelism}: "
            "max_parallelism is the key-group count, by which its state is placed; "
            "keep it, or give the operator a new uid (its state starts empty)"
        )
    if None not in (old.key_columns, new.key_columns) and old.key_columns != new.key_columns:
        problems.append(
            f"{what}: key {list(old.key_columns or ())} -> {list(new.key_columns or ())}: "
            "state is placed by the key group of its key; a new key is a new state "
            "(a new uid)"
        )
    return problems


def _sink_problems(old: NodeTopology, new: NodeTopology) -> list[str]:
    """A sink's mode is how its readers read its whole published history (append: every
    epoch; snapshot: the last), and gc keeps only what that mode reads: another mode
    would show what gc happened to keep, not the sink's history. Unknown on a base an
    older release wrote (no properties recorded): not judged."""
    if new.kind is not OperatorKind.SINK:
        return []
    before, after = old.properties.get("mode"), new.properties.get("mode")
    if before is None or after is None or before == after:
        return []
    return [
        f"sink '{new.name}': mode {before} -> {after}: its readers read its published "
        "history in one mode; give the sink a new uid (its output starts empty"
        + ("; and another table" if "table" in new.properties else "")
        + f") and declare pipeline.drop_sink('{new.uid}')"
    ]


def _table_problems(
    stored: Topology | None, code: Topology, claimed: Mapping[tuple[str, str], str]
) -> list[tuple[NodeTopology, str]]:
    """A table belongs to the sink uid that writes it (invariant 17): its history is
    that sink's. A sink of another uid binding it would fail every sync, or, allowed to
    take it, lay a new history over the old one; dropping the old sink does not free
    the table either (its snapshots are the dropped sink's epochs), nor does a restore
    to before the sink made it (the table stays the old uid's)."""
    recorded = stored.table_bindings() if stored is not None else {}
    owners = {table_key(p): uid for uid, p in recorded.items()}
    sinks = code.of_kind(OperatorKind.SINK)
    problems = []
    for uid, properties in code.table_bindings().items():
        key = table_key(properties)
        owner = owners.get(key)
        if owner is None and claimed.get(key) not in (None, sinks[uid].name):
            owner = claimed[key]  # a table naming the sink's name: an older release's
        if owner is None or owner == uid:
            continue
        old = stored.node(OperatorKind.SINK, owner) if stored is not None else None
        was = f"sink '{old.name}' (uid '{owner}')" if old is not None else f"sink uid '{owner}'"
        problems.append((sinks[uid], (
            f"sink '{sinks[uid].name}' binds table {properties['table']}, which {was} "
            f"writes: declare uid='{owner}' on it to go on in that table, or bind another "
            "table"
        )))  # fmt: skip
    return problems


def table_key(properties: Mapping[str, Any]) -> tuple[str, str]:
    """(catalog, table) of a sink's recorded table binding; a Delta table is its path,
    in no catalog (named so no Iceberg catalog's name can be the same)."""
    if properties.get("table_format") == "delta":
        return "<delta path>", str(properties["table"])
    return str(properties.get("table_catalog", "")), str(properties["table"])


def _same_schema(a: StateTopology, b: StateTopology) -> bool:
    return a.schema is not None and a.schema == b.schema


def _looks_renamed(gone: NodeTopology, new: NodeTopology) -> bool:
    """A node gone and a new one of the same kind that most likely are one, renamed:
    the same state schemas (operators), the same files or table (sources), the same
    table (sinks). Evidence only: a sink without a table records its mode alone, which
    every other sink of that mode shares, and a stateless operator nothing."""
    if gone.kind is OperatorKind.OPERATOR:
        if not gone.states or len(gone.states) != len(new.states):
            return False
        if any(s.schema is None for s in gone.states):  # not recorded: the state names
            return sorted(s.uid for s in gone.states) == sorted(s.uid for s in new.states)
        return sorted(str(s.schema) for s in gone.states) == sorted(
            str(s.schema) for s in new.states
        )
    if gone.kind is OperatorKind.SINK:
        both = "table" in gone.properties and "table" in new.properties
        return both and table_key(gone.properties) == table_key(new.properties)
    return bool(gone.properties) and dict(gone.properties) == dict(new.properties)
