"""The generator of code changes: each a small mutation of the version before, as a
user would make it between two epochs, with the fix a refusal of it would advise
(`Change.fixed`: uid= declared, drop_* declared, a migrate= added, a new uid). Kinds
can be turned off (`KINDS`, `--exclude`), so that a run can leave a known-open defect
out and still find the others."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from support.deploy_model.version import (
    KEYS,
    SOURCE,
    Column,
    OpV,
    SinkV,
    StateV,
    Version,
)


@dataclass(frozen=True)
class Change:
    kind: str
    version: Version
    fixed: Version | None = None  # what following the refusal's advice gives

    @property
    def label(self) -> str:
        return self.version.label


Maker = Callable[[random.Random, Version, frozenset[str]], Change | None]
KINDS: dict[str, Maker] = {}


def kind(name: str) -> Callable[[Maker], Maker]:
    def register(fn: Maker) -> Maker:
        KINDS[name] = fn
        return fn

    return register


#: Kinds drawn more often than the others: where stored state is rewritten.
WEIGHTS = {"add-column": 3, "drop-column": 2, "nullable": 3, "widen-narrow": 3, "rekey": 2}


def draw(rng: random.Random, version: Version, enabled: list[str]) -> Change:
    """A change of a kind in `enabled` that applies to `version` (by WEIGHTS)."""
    kinds = [k for k in enabled if k in KINDS]
    while kinds:
        name = rng.choices(kinds, [WEIGHTS.get(k, 1) for k in kinds])[0]
        kinds.remove(name)
        change = KINDS[name](rng, version, frozenset(enabled))
        if change is not None:
            return change
    raise ValueError(f"no change of {enabled} applies to {version.describe()}")


def _labelled(version: Version, label: str) -> Version:
    return replace(version, label=label)


def _stateful(rng: random.Random, v: Version) -> OpV | None:
    ops = [o for o in v.ops if o.stateful]
    return rng.choice(ops) if ops else None


def _state(rng: random.Random, v: Version) -> tuple[OpV, StateV] | None:
    op = _stateful(rng, v)
    return None if op is None else (op, rng.choice(op.states))


def _with_state(v: Version, op: OpV, state: StateV) -> Version:
    states = tuple(state if s.uid == state.uid else s for s in op.states)
    return v.with_op(replace(op, states=states))


def _fill(column: Column) -> object:
    return "z" if column.type == "string" else 7


# -- renames ----------------------------------------------------------------------------


@kind("rename-op-uid")
def rename_op_uid(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    op = rng.choice(v.ops)
    name, v = v.fresh("op")
    return Change(
        "rename-op-uid",
        _labelled(v.with_op(replace(op, name=name)), f"rename {op.name} -> {name} keeping uid"),
    )


@kind("rename-op")
def rename_op(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    op = rng.choice(v.ops)
    name, v = v.fresh("op")
    renamed = _reuid_op(v, op, replace(op, name=name, uid=name))
    fixed = v.with_op(replace(op, name=name)) if "rename-op-uid" in on else None
    return Change("rename-op", _labelled(renamed, f"rename {op.name} -> {name} without uid"), fixed)


def _reuid_op(v: Version, old: OpV, new: OpV) -> Version:
    """`old` replaced by `new` (another uid): what read it reads `new`."""
    ops = tuple(
        new if o.uid == old.uid else (replace(o, input=new.uid) if o.input == old.uid else o)
        for o in v.ops
    )
    sinks = tuple(replace(s, input=new.uid) if s.input == old.uid else s for s in v.sinks)
    return replace(v, ops=ops, sinks=sinks)


@kind("rename-state-uid")
def rename_state_uid(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    found = _state(rng, v)
    if found is None:
        return None
    op, state = found
    name, v = v.fresh("st")
    label = f"rename state {op.name}.{state.name} -> {name} keeping uid"
    return Change(
        "rename-state-uid", _labelled(_with_state(v, op, replace(state, name=name)), label)
    )


@kind("rename-state")
def rename_state(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    found = _state(rng, v)
    if found is None:
        return None
    op, state = found
    name, v = v.fresh("st")
    states = tuple(replace(s, name=name, uid=name) if s.uid == state.uid else s for s in op.states)
    renamed = v.with_op(replace(op, states=states))
    fixed = _with_state(v, op, replace(state, name=name)) if "rename-state-uid" in on else None
    label = f"rename state {op.name}.{state.name} -> {name} without uid"
    return Change("rename-state", _labelled(renamed, label), fixed)


@kind("rename-sink-uid")
def rename_sink_uid(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    if not v.sinks:
        return None
    sink = rng.choice(v.sinks)
    name, v = v.fresh("sink")
    label = f"rename sink {sink.name} -> {name} keeping uid"
    return Change("rename-sink-uid", _labelled(v.with_sink(replace(sink, name=name)), label))


@kind("rename-sink")
def rename_sink(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    if not v.sinks:
        return None
    sink = rng.choice(v.sinks)
    name, v = v.fresh("sink")
    sinks = tuple(replace(s, name=name, uid=name) if s.uid == sink.uid else s for s in v.sinks)
    fixed = v.with_sink(replace(sink, name=name)) if "rename-sink-uid" in on else None
    label = f"rename sink {sink.name} -> {name} without uid"
    return Change("rename-sink", _labelled(replace(v, sinks=sinks), label), fixed)


# -- operators, states and sinks added and dropped -------------------------------------


@kind("add-op")
def add_op(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    if len(v.ops) >= 4:
        return None
    name, v = v.fresh("op")
    stateless = [o.uid for o in v.ops if not o.stateful]
    source = rng.choice([SOURCE, *stateless])
    states = (StateV("totals", "totals"),) if rng.random() < 0.8 else ()
    key = rng.choice(KEYS) if states else ("user",)
    op = OpV(name, name, source, states, key, rng.randint(1, 2))
    out = replace(v, ops=(*v.ops, op))
    if rng.random() < 0.5:
        sink_name, out = out.fresh("sink")
        out = replace(out, sinks=(*out.sinks, SinkV(sink_name, sink_name, name)))
    return Change("add-op", _labelled(out, f"add operator {name} <- {source}"))


@kind("drop-op")
def drop_op(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    last = [o.uid for o in v.ops if o.stateful][:1] if sum(o.stateful for o in v.ops) < 2 else []
    leaves = [o for o in v.ops if not any(d.input == o.uid for d in v.ops) and o.uid not in last]
    if not leaves:
        return None
    op = rng.choice(leaves)
    gone = [s.uid for s in v.sinks if s.input == op.uid]
    dropped = replace(
        v,
        ops=tuple(o for o in v.ops if o.uid != op.uid),
        sinks=tuple(s for s in v.sinks if s.input != op.uid),
    )
    fixed = replace(
        dropped,
        dropped_operators=dropped.dropped_operators | {op.uid},
        dropped_sinks=dropped.dropped_sinks | set(gone),
    )
    if rng.random() < 0.3:
        return Change("drop-op", _labelled(fixed, f"drop operator {op.name}, declared"))
    return Change("drop-op", _labelled(dropped, f"drop operator {op.name}"), fixed)


@kind("add-state")
def add_state(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    op = _stateful(rng, v)
    if op is None or len(op.states) >= 3:
        return None
    name, v = v.fresh("st")
    state = StateV(name, name, n_type=rng.choice(["int32", "int64"]), value=rng.random() < 0.5)
    out = v.with_op(replace(op, states=(*op.states, state)))
    return Change("add-state", _labelled(out, f"add state {op.name}.{name}"))


@kind("drop-state")
def drop_state(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    ops = [o for o in v.ops if len(o.states) >= 2]
    if not ops:
        return None
    op = rng.choice(ops)
    state = rng.choice(op.states)
    out = v.with_op(replace(op, states=tuple(s for s in op.states if s.uid != state.uid)))
    fixed = replace(out, dropped_states=out.dropped_states | {(op.uid, state.uid)})
    if rng.random() < 0.3:
        return Change(
            "drop-state", _labelled(fixed, f"drop state {op.name}.{state.name}, declared")
        )
    return Change("drop-state", _labelled(out, f"drop state {op.name}.{state.name}"), fixed)


@kind("add-sink")
def add_sink(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    if len(v.sinks) >= 3:
        return None
    op = rng.choice(v.ops)
    name, v = v.fresh("sink")
    mode = rng.choice(["append", "snapshot"])
    table = f"dm.t_{name}" if rng.random() < 0.3 else None
    out = replace(v, sinks=(*v.sinks, SinkV(name, name, op.uid, mode, table)))
    return Change("add-sink", _labelled(out, f"add {mode} sink {name} <- {op.name}"))


@kind("drop-sink")
def drop_sink(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    if not v.sinks:
        return None
    sink = rng.choice(v.sinks)
    out = replace(v, sinks=tuple(s for s in v.sinks if s.uid != sink.uid))
    fixed = replace(out, dropped_sinks=out.dropped_sinks | {sink.uid})
    if rng.random() < 0.3:
        return Change("drop-sink", _labelled(fixed, f"drop sink {sink.name}, declared"))
    return Change("drop-sink", _labelled(out, f"drop sink {sink.name}"), fixed)
