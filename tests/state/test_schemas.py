"""A state schema's fingerprint and the comparison the evolution rules start from
(state/schemas.py): offset widths and time zones are made one node by node, and a nested
field's name is never rewritten with them.

Generated nested types are held against the textual form earlier releases fingerprinted
(their files carry it): the same wherever no nested name holds `large_` or `tz=`. Where
one does, a reader compares the file's own schema (test_evolution_files).
"""

from __future__ import annotations

import re

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from batchpoint.runtime.base_schemas import BaseStateSchema, comparable_stored
from batchpoint.state.evolution import VerdictKind, resolve_schema_compatibility
from batchpoint.state.schemas import (
    _digest,
    same_types,
    schema_fingerprint,
    types_fingerprint,
)

LEAVES = [
    pa.int64(),
    pa.float64(),
    pa.bool_(),
    pa.string(),
    pa.large_string(),
    pa.binary(),
    pa.large_binary(),
    pa.decimal128(12, 2),
    pa.date32(),
    *(pa.timestamp(u, tz) for u in ("ms", "us") for tz in (None, "UTC", "Europe/Paris")),
]


def _textual(schema: pa.Schema) -> list[tuple[str, str]]:
    """The canonical form of the releases before this one: a rewrite of the type's text."""
    out = []
    for f in schema:
        text = str(f.type).replace("large_", "")
        out.append((f.name, re.sub(r"tz=[^,\]>]+", "tz=UTC", text)))
    return out


def _types(names: st.SearchStrategy[str]) -> st.SearchStrategy[pa.DataType]:
    def nest(inner: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
        field = st.builds(pa.field, names, inner, st.booleans())
        return st.one_of(
            st.builds(pa.list_, field),
            st.builds(pa.large_list, field),
            st.builds(pa.list_, field, st.integers(1, 4)),
            st.lists(field, min_size=1, max_size=3, unique_by=lambda f: f.name).map(pa.struct),
            st.builds(pa.map_, st.sampled_from([pa.string(), pa.int64()]), inner),
            st.builds(pa.dictionary, st.just(pa.int32()), st.sampled_from(LEAVES[3:5])),
        )

    return st.recursive(st.sampled_from(LEAVES), nest, max_leaves=6)


PLAIN_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda n: "large_" not in n
)


def _schema(t: pa.DataType) -> pa.Schema:
    return pa.schema([pa.field("k", pa.int64(), False), pa.field("v", t)])


@settings(max_examples=300, deadline=None)
@given(_types(PLAIN_NAMES))
def test_with_plain_nested_names_the_fingerprint_is_the_one_earlier_releases_wrote(
    t: pa.DataType,
) -> None:
    schema = _schema(t)
    assert types_fingerprint(schema) == _digest(_textual(schema), 16)


def _renamed(t: pa.DataType, old: str, new: str) -> pa.DataType:
    return pa.struct([pa.field(new if f.name == old else f.name, f.type) for f in t])


#: Pairs the textual form took for one name.
RENAMES = [("large_orders", "orders"), ("is_large_order", "is_order"), ("large_x", "x")]


@given(st.sampled_from(RENAMES), st.sampled_from(LEAVES), st.booleans())
def test_a_nested_field_renamed_to_or_from_large_is_a_change(
    names: tuple[str, str], leaf: pa.DataType, from_large: bool
) -> None:
    before, after = names if from_large else names[::-1]
    stored = _schema(pa.struct([pa.field(before, leaf), pa.field("n", pa.int64())]))
    declared = _schema(_renamed(stored.field("v").type, before, after))
    assert schema_fingerprint(stored) != schema_fingerprint(declared)
    assert not same_types(schema_fingerprint(stored), declared)
    for recorded in (True, False):
        judged = comparable_stored(BaseStateSchema(stored, recorded), declared)
        verdict = resolve_schema_compatibility(judged, declared, ["k"])
        assert verdict.kind is not VerdictKind.UNCHANGED, verdict


@given(_types(PLAIN_NAMES))
def test_offset_widths_and_zones_alone_are_no_change(t: pa.DataType) -> None:
    def narrow(t: pa.DataType) -> pa.DataType:  # what Spark may ship for the same state
        if t == pa.large_string():
            return pa.string()
        if pa.types.is_timestamp(t) and t.tz is not None:
            return pa.timestamp(t.unit, "America/New_York")
        if pa.types.is_struct(t):
            return pa.struct([f.with_type(narrow(f.type)) for f in t])
        if pa.types.is_large_list(t):
            return pa.list_(t.value_field.with_type(narrow(t.value_type)))
        return t

    stored, declared = _schema(narrow(t)), _schema(t)
    assert types_fingerprint(stored) == types_fingerprint(declared)
    judged = comparable_stored(BaseStateSchema(stored, True), declared)
    assert resolve_schema_compatibility(judged, declared, ["k"]).kind is VerdictKind.UNCHANGED
