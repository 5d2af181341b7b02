"""The state schema evolution rules as properties (issue 26).

A random stored state (columns of primitive types, decimals and timestamps among them,
some of them the key, values with nulls where nullable) and a random deploy:
- drawn from the compatible kinds, the verdict is MIGRATED and `migrate_batch` gives
  exactly the rows a reference migration builds column by column from plain Python
  values, in exactly the declared schema, batch by batch as for the whole table;
- with one change drawn from the refused kinds, the verdict refuses it (or leaves it to
  the state's migrate= function, never for a key column; a key column may only widen,
  from an integer to a wider one).

Which type changes widen is written here again, as tables, apart from the module's rule.
"""

from __future__ import annotations

import decimal
import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.types as pt
from hypothesis import event, given, settings
from hypothesis import strategies as st

from batchpoint.state.evolution import (
    ChangeKind,
    SchemaVerdict,
    VerdictKind,
    migrate_batch,
    resolve_schema_compatibility,
)
from batchpoint.state.format import StateError

WHAT = "operator 'balances', state 'totals'"
SIGNED = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
UNSIGNED = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
WIDER_OFFSETS = {("float", "double"), ("string", "large_string"), ("binary", "large_binary")}
TIMESTAMPS = [pa.timestamp(unit, tz) for unit in ("s", "ms", "us") for tz in (None, "UTC")]
SIMPLE = [
    *SIGNED,
    *UNSIGNED,
    pa.float32(),
    pa.float64(),
    pa.string(),
    pa.binary(),
    pa.bool_(),
    pa.date32(),
    *TIMESTAMPS,
]
# Seconds either side of 1970 that stay within datetime's years 1..9999 in every unit.
SECONDS = 5 * 10**10
PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000}
PROPERTY = settings(max_examples=100, deadline=None)


def index_in(types: list[pa.DataType], t: pa.DataType) -> int | None:
    return next((i for i, candidate in enumerate(types) if candidate == t), None)


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """The widening rule, from tables: every stored value of `old` is one of `new`."""
    old_s, old_u, new_s = index_in(SIGNED, old), index_in(UNSIGNED, old), index_in(SIGNED, new)
    new_u = index_in(UNSIGNED, new)
    if old_s is not None:
        return new_s is not None and new_s > old_s
    if old_u is not None:
        return (new_u is not None and new_u > old_u) or (new_s is not None and new_s > old_u)
    if pt.is_decimal(old) and pt.is_decimal(new):
        return old != new and old.scale == new.scale and new.precision >= old.precision
    return (str(old), str(new)) in WIDER_OFFSETS


def key_widens(old: pa.DataType, new: pa.DataType) -> bool:
    """A key column may widen between integers only: every key-group hash takes them as
    bigint (or a Python int), so no stored key changes group."""
    integers = [*SIGNED, *UNSIGNED]
    return widens(old, new) and old in integers and new in integers


def nearby_types(t: pa.DataType) -> list[pa.DataType]:
    """Types a deploy might change `t` to: every simple type, and decimals near it."""
    out = [*SIMPLE, pa.large_string(), pa.large_binary(), pa.decimal128(9, 2)]
    if pt.is_decimal(t):
        p, s = t.precision, t.scale
        near = {p - 3, p - 1, p + 1, p + 9, 38}
        out += [pa.decimal128(q, s) for q in sorted(near) if 1 <= q <= 38]
        out += [pa.decimal256(p, s), pa.decimal256(p + 20, s)]
        out += [pa.decimal128(p, r) for r in {0, min(s + 1, p)} if r != s]
    return [c for c in out if c != t and (not pt.is_decimal(c) or 0 <= c.scale <= c.precision)]


def narrower(t: pa.DataType) -> list[pa.DataType]:
    return [c for c in nearby_types(t) if widens(c, t) and not widens(t, c)]


def decimal_types(least: int = 1) -> st.SearchStrategy[pa.DataType]:
    return st.integers(least, 20).flatmap(
        lambda p: st.integers(0, min(p, 6)).map(lambda s: pa.decimal128(p, s))
    )


TYPES = st.one_of(st.sampled_from(SIMPLE), decimal_types())
NARROWABLE = [t for t in SIMPLE if narrower(t)]
NEEDS_KEYS = {"key-type": 1, "key-tighten": 1, "key-remove": 1, "key-rename": 1, "key-reorder": 2}


def values(t: pa.DataType) -> st.SearchStrategy[Any]:
    if pt.is_integer(t):
        if pt.is_signed_integer(t):
            return st.integers(-(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1)
        return st.integers(0, 2**t.bit_width - 1)
    if pt.is_floating(t):
        return st.floats(width=t.bit_width, allow_nan=False)
    if pt.is_decimal(t):
        digits = st.integers(-(10**t.precision - 1), 10**t.precision - 1)
        return digits.map(lambda i: decimal.Decimal(i).scaleb(-t.scale))
    if pt.is_timestamp(t):
        bound = SECONDS * PER_SECOND[t.unit]
        return st.integers(-bound, bound)  # raw ticks: pyarrow reads them in t's unit
    simple = {"string": st.text(max_size=5), "binary": st.binary(max_size=5)}
    simple |= {"bool": st.booleans(), "date32[day]": st.dates()}
    return simple[str(t)]


@dataclass
class Stored:
    schema: pa.Schema
    keys: list[str]
    columns: dict[str, list[Any]]  # plain Python values, as drawn

    @property
    def table(self) -> pa.Table:
        arrays = {f.name: pa.array(self.columns[f.name], f.type) for f in self.schema}
        return pa.table(arrays, schema=self.schema)

    def non_keys(self) -> list[pa.Field]:
        return [f for f in self.schema if f.name not in self.keys]


@st.composite
def stored_states(draw: st.DrawFn, kind: str = "") -> Stored:
    """A stored state; `kind` names a refused change it must leave room for."""
    names = [f"c{i}" for i in range(draw(st.integers(3 if kind else 1, 5)))]
    fields = [pa.field(n, draw(TYPES), nullable=draw(st.booleans())) for n in names]
    least = NEEDS_KEYS.get(kind, 0)
    keys = draw(st.lists(st.sampled_from(names), unique=True, min_size=least, max_size=2))
    if kind == "key-tighten":
        at = names.index(keys[0])
        fields[at] = fields[at].with_nullable(True)
    elif kind in ("tighten", "narrow"):
        at = names.index(next(n for n in names if n not in keys))  # 3 columns, 2 keys at most
        if kind == "tighten":
            fields[at] = fields[at].with_nullable(True)
        else:
            fields[at] = fields[at].with_type(
                draw(st.sampled_from(NARROWABLE) | decimal_types(2).filter(narrower))
            )
    rows = draw(st.integers(0, 6))
    columns = {}
    for f in fields:
        value = values(f.type) | st.none() if f.nullable else values(f.type)
        columns[f.name] = draw(st.lists(value, min_size=rows, max_size=rows))
    return Stored(pa.schema(fields), keys, columns)


@dataclass
class Deploy:
    stored: Stored
    declared: pa.Schema
    keys: list[str]
    stored_keys: list[str] | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    migrate: bool = False
    expected: set[tuple[str, ChangeKind]] = field(default_factory=set)

    def resolve(self) -> SchemaVerdict:
        return resolve_schema_compatibility(
            self.stored.schema,
            self.declared,
            self.keys,
            defaults=self.defaults,
            dropped=self.dropped,
            migrate=self.migrate,
            stored_key_columns=self.stored_keys,
            what=WHAT,
        )


# --- compatible deploys -----------------------------------------------------------------


@st.composite
def compatible_deploys(draw: st.DrawFn) -> tuple[Deploy, pa.Table]:
    """A deploy of compatible changes only, and the rows stored rows must read as, built
    from the drawn Python values column by column."""
    stored = draw(stored_states())
    deploy = Deploy(stored, pa.schema([]), list(stored.keys), migrate=draw(st.booleans()))
    deploy.stored_keys = draw(st.sampled_from([None, list(stored.keys)]))
    fields, reads = [], {}
    for f in stored.schema:
        is_key = f.name in stored.keys
        if not is_key and draw(st.booleans()) and draw(st.booleans()):
            deploy.dropped.append(f.name)
            deploy.expected.add((f.name, ChangeKind.DROPPED))
            continue
        new = f
        wider = [t for t in nearby_types(f.type) if (key_widens if is_key else widens)(f.type, t)]
        if wider and draw(st.booleans()):
            new = new.with_type(draw(st.sampled_from(wider)))
            deploy.expected.add((f.name, ChangeKind.WIDENED))
        if not f.nullable and draw(st.booleans()):
            new = new.with_nullable(True)
            deploy.expected.add((f.name, ChangeKind.NULLABILITY_RELAXED))
        fields.append(new)
        reads[f.name] = stored.columns[f.name]
    rows = len(next(iter(stored.columns.values())))
    for i in range(draw(st.integers(0, 2))):
        added = pa.field(f"added{i}", draw(TYPES), nullable=draw(st.booleans()))
        default = draw(values(added.type) | st.none() if added.nullable else values(added.type))
        if default is not None:
            deploy.defaults[added.name] = default
        kind = ChangeKind.ADDED_NULLABLE if default is None else ChangeKind.ADDED_WITH_DEFAULT
        deploy.expected.add((added.name, kind))
        fields.append(added)
        reads[added.name] = [default] * rows
    fields = draw(st.permutations(fields))
    kept_old = [n for n in stored.schema.names if n in reads]
    kept_new = [f.name for f in fields if f.name in stored.schema.names]
    deploy.expected |= {
        (n, ChangeKind.REORDERED) for i, n in enumerate(kept_new) if kept_old[i] != n
    }
    metadata = draw(st.sampled_from([None, {"owner": "payments"}]))
    deploy.declared = pa.schema(fields, metadata=metadata)
    expected = {f.name: pa.array(reads[f.name], f.type) for f in fields}
    return deploy, pa.table(expected, schema=deploy.declared)


@PROPERTY
@given(compatible_deploys())
def test_a_compatible_deploy_reads_what_a_reference_migration_gives(
    drawn: tuple[Deploy, pa.Table],
) -> None:
    deploy, expected = drawn
    verdict = deploy.resolve()
    for kind in sorted({kind.value for _, kind in deploy.expected}):
        event(kind)
    assert {(c.column, c.kind) for c in verdict.changes} == deploy.expected
    assert all(
        c.message.startswith((f"{WHAT}: column '{c.column}'", f"{WHAT}: key column '{c.column}'"))
        for c in verdict.changes
    )
    json.dumps(verdict.to_json(), allow_nan=False)
    stored = deploy.stored.table
    migrated = migrate_batch(stored, verdict)
    if not deploy.expected:
        assert verdict.kind is VerdictKind.UNCHANGED and migrated is stored
        return
    assert verdict.kind is VerdictKind.MIGRATED
    assert migrated.schema.equals(deploy.declared, check_metadata=True)
    assert migrated.to_pylist() == expected.to_pylist()
    assert migrated.equals(expected)
    batches = [migrate_batch(b, verdict) for b in stored.to_batches(max_chunksize=2)]
    assert pa.Table.from_batches(batches, schema=deploy.declared).equals(expected)


# --- refused deploys --------------------------------------------------------------------

KEY_KINDS = ("key-type", "key-tighten", "key-remove", "key-rename", "key-reorder", "key-add")
REFUSED_KINDS = (*KEY_KINDS, "narrow", "type-change", "remove", "add-non-null", "tighten")


@st.composite
def refused_deploys(draw: st.DrawFn) -> tuple[Deploy, str]:
    kind = draw(st.sampled_from(REFUSED_KINDS))
    stored = draw(stored_states(kind))
    deploy = Deploy(stored, stored.schema, list(stored.keys), migrate=draw(st.booleans()))
    if kind in KEY_KINDS or draw(st.booleans()):
        deploy.stored_keys = list(stored.keys)  # as a checkpoint records it
    schema, keys = stored.schema, deploy.keys
    if kind == "add-non-null":
        pool = [pa.field("added", draw(TYPES), nullable=False)]
    elif kind == "key-add":
        pool = stored.non_keys()
    elif kind.startswith("key-"):
        pool = [schema.field(k) for k in keys]
    elif kind == "narrow":
        pool = [f for f in stored.non_keys() if narrower(f.type)]
    else:
        pool = stored.non_keys()
    if kind.endswith("tighten"):
        pool = [f for f in pool if f.nullable]
    old = draw(st.sampled_from(pool))
    at = schema.get_field_index(old.name)
    expected = {
        "key-type": ChangeKind.KEY_CHANGED,
        "narrow": ChangeKind.NARROWED,
        "type-change": ChangeKind.TYPE_CHANGED,
        "remove": ChangeKind.REMOVED_WITHOUT_DROP,
        "add-non-null": ChangeKind.ADDED_NON_NULLABLE_WITHOUT_DEFAULT,
        "tighten": ChangeKind.NULLABILITY_TIGHTENED,
    }.get(kind, ChangeKind.KEY_CHANGED)
    others = [t for t in nearby_types(old.type) if not widens(old.type, t)]
    if kind == "key-type":
        retyped = [t for t in nearby_types(old.type) if not key_widens(old.type, t)]
        schema = schema.set(at, old.with_type(draw(st.sampled_from(retyped))))
    elif kind == "narrow":
        schema = schema.set(at, old.with_type(draw(st.sampled_from(narrower(old.type)))))
    elif kind == "type-change":
        changed = [t for t in others if not widens(t, old.type)]
        schema = schema.set(at, old.with_type(draw(st.sampled_from(changed))))
    elif kind in ("key-tighten", "tighten"):
        schema = schema.set(at, old.with_nullable(False))
    elif kind in ("key-remove", "remove"):
        schema = schema.remove(at)
        deploy.keys = [k for k in keys if k != old.name]
        if kind == "key-remove" and draw(st.booleans()):
            deploy.dropped.append(old.name)  # a drop mark does not drop a key
    elif kind == "key-rename":
        schema = schema.set(at, old.with_name(f"renamed_{old.name}"))
        deploy.keys = [f"renamed_{k}" if k == old.name else k for k in keys]
        deploy.dropped.append(old.name)
    elif kind == "key-reorder":
        deploy.keys = list(reversed(keys))
    elif kind == "key-add":
        deploy.keys = [*keys, old.name]
    else:
        schema = schema.append(old)
    if draw(st.booleans()):  # a compatible change beside it changes nothing
        schema = schema.append(pa.field("extra", pa.int64()))
    deploy.declared = schema
    deploy.expected = {(old.name, expected)}
    return deploy, kind


@PROPERTY
@given(refused_deploys())
def test_any_other_deploy_is_refused_or_left_to_migrate(drawn: tuple[Deploy, str]) -> None:
    deploy, kind = drawn
    event(kind)
    verdict = deploy.resolve()
    ((column, expected),) = deploy.expected
    found = [c for c in verdict.changes if c.column == column and c.kind is expected]
    assert found, (kind, verdict.changes)
    for change in found:
        assert change.message.startswith(WHAT) and f"'{column}'" in change.message
        retyped = change.old_type and change.new_type and change.old_type != change.new_type
        if retyped:
            assert f"from {change.old_type} to {change.new_type}" in change.message
    user = deploy.migrate and kind not in KEY_KINDS
    assert verdict.kind is (VerdictKind.USER_MIGRATION if user else VerdictKind.INCOMPATIBLE)
    assert verdict.deployable is user
    try:
        migrate_batch(deploy.stored.table, verdict)
    except StateError as error:
        assert verdict.kind.value in str(error)
    else:
        raise AssertionError("migrate_batch read rows the rules refuse")
