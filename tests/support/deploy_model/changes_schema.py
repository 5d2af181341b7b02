"""Code changes of states' schemas, keys, parallelism and sinks (the generator's second
half; see changes.py)."""

from __future__ import annotations

import random
from dataclasses import replace

from support.deploy_model.changes import (
    Change,
    _fill,
    _labelled,
    _reuid_op,
    _state,
    _stateful,
    _with_state,
    kind,
)
from support.deploy_model.version import KEYS, Column, Migration, OpV, StateV, Version


def _migrating(state: StateV, column: Column | None, *, raises: bool = False) -> StateV:
    """The state with a migrate= function that fills `column`'s nulls (if given)."""
    fills = ((column.name, _fill(column)),) if column is not None else ()
    return replace(state, migrate=Migration(fills, raises))


def _set_extra(state: StateV, column: Column) -> StateV:
    return replace(
        state, extras=tuple(column if c.name == column.name else c for c in state.extras)
    )


def _needing(
    rng: random.Random,
    on: frozenset[str],
    v: Version,
    found: tuple[OpV, StateV],
    changed: StateV,
    column: Column | None,
    label: str,
    kind: str,
) -> Change:
    """A change that no rule migrates: with a migrate= (sometimes one that raises), or
    without one (refused; the fix adds it)."""
    op = found[0]
    fixed = _with_state(v, op, _migrating(changed, column))
    bare = _with_state(v, op, replace(changed, migrate=None))
    if "migrate" not in on:  # no migrate= anywhere: refused, and rolled back
        return Change(kind, _labelled(bare, label))
    roll = rng.random()
    if roll < 0.4:
        return Change(kind, _labelled(fixed, label + ", with migrate="))
    if roll < 0.55:
        raising = _with_state(v, op, _migrating(changed, column, raises=True))
        return Change(kind, _labelled(raising, label + ", with a migrate= that raises"), fixed)
    return Change(kind, _labelled(bare, label), fixed)


@kind("add-column")
def add_column(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    found = _state(rng, v)
    if found is None or len(found[1].extras) >= 3:
        return None
    op, state = found
    name, v = v.fresh("x")
    column = Column(name, rng.choice(["int32", "int64", "string"]), rng.random() < 0.5)
    grown = replace(state, extras=(*state.extras, column))
    label = (
        f"add {'nullable' if column.nullable else 'non-null'} column {op.name}.{state.name}.{name}"
    )
    if column.nullable:
        return Change("add-column", _labelled(_with_state(v, op, grown), label))
    if rng.random() < 0.5:
        defaulted = replace(grown, defaults=(*state.defaults, (name, _fill(column))))
        return Change(
            "add-column", _labelled(_with_state(v, op, defaulted), label + " with a default")
        )
    return _needing(rng, on, v, found, grown, column, label, "add-column")


@kind("drop-column")
def drop_column(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    found = _state(rng, v)
    if found is None or not found[1].extras:
        return None
    op, state = found
    column = rng.choice(state.extras)
    shrunk = replace(state, extras=tuple(c for c in state.extras if c.name != column.name))
    marked = replace(shrunk, dropped=(*state.dropped, column.name))
    label = f"drop column {op.name}.{state.name}.{column.name}"
    if rng.random() < 0.5:
        return Change(
            "drop-column", _labelled(_with_state(v, op, marked), label + ", marked dropped")
        )
    fixed = _with_state(v, op, marked)
    return Change("drop-column", _labelled(_with_state(v, op, shrunk), label), fixed)


@kind("nullable")
def nullable(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    found = _state(rng, v)
    if found is None or not found[1].extras:
        return None
    op, state = found
    column = rng.choice(state.extras)
    flipped = replace(column, nullable=not column.nullable)
    changed = _set_extra(state, flipped)
    where = f"{op.name}.{state.name}.{column.name}"
    if flipped.nullable:
        return Change("nullable", _labelled(_with_state(v, op, changed), f"{where} made nullable"))
    return _needing(rng, on, v, found, changed, flipped, f"{where} made non-null", "nullable")


@kind("widen-narrow")
def widen_narrow(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    found = _state(rng, v)
    if found is None:
        return None
    op, state = found
    where = f"{op.name}.{state.name}.n"
    if state.n_type == "int32":
        widened = replace(state, n_type="int64")
        return Change("widen-narrow", _labelled(_with_state(v, op, widened), f"{where} widened"))
    narrowed = replace(state, n_type="int32")
    return _needing(rng, on, v, found, narrowed, None, f"{where} narrowed to int32", "widen-narrow")


def _new_identity(v: Version, op: OpV, changed: OpV) -> Version:
    """The refusal's advice for a key or max_parallelism change: a new uid (its state
    starts empty), the old one dropped on purpose."""
    name, v = v.fresh("op")
    moved = _reuid_op(v, op, replace(changed, uid=name))
    return replace(moved, dropped_operators=moved.dropped_operators | {op.uid})


@kind("rekey")
def rekey(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    op = _stateful(rng, v)
    if op is None:
        return None
    key = rng.choice([k for k in KEYS if k != op.key])
    changed = replace(op, key=key)
    label = f"re-key {op.name} {'/'.join(op.key)} -> {'/'.join(key)}"
    return Change("rekey", _labelled(v.with_op(changed), label), _new_identity(v, op, changed))


@kind("parallelism")
def parallelism(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    op = rng.choice(v.ops)
    to = rng.choice([p for p in (1, 2, 3) if p != op.parallelism])
    label = f"parallelism of {op.name} {op.parallelism} -> {to}"
    return Change("parallelism", _labelled(v.with_op(replace(op, parallelism=to)), label))


@kind("max-parallelism")
def max_parallelism(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    op = rng.choice(v.ops)
    to = 32 if op.max_parallelism == 16 else 16
    changed = replace(op, max_parallelism=to)
    label = f"max_parallelism of {op.name} {op.max_parallelism} -> {to}"
    fixed = _new_identity(v, op, changed) if op.stateful else None
    return Change("max-parallelism", _labelled(v.with_op(changed), label), fixed)


@kind("value-state")
def value_state(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    found = _state(rng, v)
    if found is None:
        return None
    op, state = found
    label = f"{op.name}.{state.name} value state {'off' if state.value else 'on'}"
    return Change(
        "value-state", _labelled(_with_state(v, op, replace(state, value=not state.value)), label)
    )


@kind("sink-mode")
def sink_mode(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    if not v.sinks:
        return None
    sink = rng.choice(v.sinks)
    mode = "snapshot" if sink.mode == "append" else "append"
    label = f"sink {sink.name} mode {sink.mode} -> {mode}"
    uid, fresh = v.fresh("sink")
    table = sink.table
    if table is not None:
        name, fresh = fresh.fresh("t")
        table = f"dm.{name}"
    # the refusal's advice: a new uid (its output starts empty) and another table, the
    # old uid dropped
    renewed = replace(sink, uid=uid, mode=mode, table=table)
    fixed = replace(
        fresh,
        sinks=tuple(renewed if s.uid == sink.uid else s for s in v.sinks),
        dropped_sinks=fresh.dropped_sinks | {sink.uid},
    )
    changed = _labelled(v.with_sink(replace(sink, mode=mode)), label)
    return Change("sink-mode", changed, _labelled(fixed, label + " under a new uid"))


@kind("sink-table")
def sink_table(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    if not v.sinks:
        return None
    sink = rng.choice(v.sinks)
    name, v = v.fresh("t")
    table = None if sink.table and rng.random() < 0.5 else f"dm.{name}"
    label = f"sink {sink.name} table {sink.table} -> {table}"
    return Change("sink-table", _labelled(v.with_sink(replace(sink, table=table)), label))


@kind("sloppy-set-state")
def sloppy(rng: random.Random, v: Version, on: frozenset[str]) -> Change | None:
    ops = [o for o in v.ops if any(s.n_type == "int32" for s in o.states) and not o.sloppy]
    if not ops:
        return None
    op = rng.choice(ops)
    label = f"{op.name} sets n as int64 (declared int32)"
    return Change("sloppy-set-state", _labelled(v.with_op(replace(op, sloppy=True)), label), v)
