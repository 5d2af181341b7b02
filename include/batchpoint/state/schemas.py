"""How a state's schema is compared and fingerprinted.

A state file records its schema's fingerprint in its header and its handle. It has two
parts, `<types>.<nullability>`:

- the types part hashes each column's name and type in order, where the types are
  canonical: Spark may ship strings as large_string and timestamps in the session's
  zone, neither of which changes what is stored. Readers check a file against the
  schema they ask for by this part alone: what a reader promises Spark is types, and a
  requested schema's nullability depends on how it was built.
- the nullability part hashes which columns are declared not null. A state is written
  exactly as its code declares it (runtime/state_conform.py), so two snapshots share a
  full fingerprint only when they were written under one declaration, nullability
  included, and only then may a changelog of one build on the other
  (runtime/incremental.py).

Files written before the nullability part existed carry the types part alone; they
read as before, and the next snapshot of their state is written in full.
"""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa

from batchpoint.state.format import RESERVED_COLUMNS, StateError

_SEPARATOR = "."


class StateNotAsDeclared(StateError):
    """A state set, migrated or written with other columns, types or nulls than the
    code declares (runtime/state_conform.py, spark/state_writer.py)."""


def _canonical_field(field: pa.Field) -> pa.Field:
    return field.with_type(_canonical(field.type))


def _canonical(t: pa.DataType) -> pa.DataType:
    """`t` with every offset width and time zone as Spark may ship them made one, node
    by node: a nested field's name is never touched, so a struct field renamed from
    `large_x` to `x` stays a change (a rewrite of the type's text took both away)."""
    if t in (pa.large_string(), pa.large_binary()):
        return pa.string() if t == pa.large_string() else pa.binary()
    if pa.types.is_timestamp(t):
        return pa.timestamp(t.unit, tz="UTC") if t.tz is not None else t
    if pa.types.is_large_list(t) or pa.types.is_list(t):
        return pa.list_(_canonical_field(t.value_field))
    if pa.types.is_large_list_view(t) or pa.types.is_list_view(t):
        return pa.list_view(_canonical_field(t.value_field))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(_canonical_field(t.value_field), t.list_size)
    if pa.types.is_struct(t):
        return pa.struct([_canonical_field(t.field(i)) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        key, item = _canonical_field(t.key_field), _canonical_field(t.item_field)
        return pa.map_(key, item, keys_sorted=t.keys_sorted)
    if pa.types.is_dictionary(t):
        return pa.dictionary(t.index_type, _canonical(t.value_type), t.ordered)
    if pa.types.is_run_end_encoded(t):
        return pa.run_end_encoded(t.run_end_type, _canonical(t.value_type))
    if pa.types.is_union(t):
        fields = [_canonical_field(t.field(i)) for i in range(t.num_fields)]
        return pa.union(fields, t.mode, t.type_codes)
    return t


def same_canonical_type(a: pa.DataType, b: pa.DataType) -> bool:
    """Whether `a` and `b` differ at most as Spark's files make types differ: offset
    widths and time zones, and the name of a list's item field (pyarrow's `item`,
    Spark's `element`: no reader sees it, so pyarrow's equality ignores it where the
    canonical text keeps it). A struct field's name and any nullability still count."""
    return _canonical(a).equals(_canonical(b))


def _canonical_type(arrow_type: pa.DataType) -> str:
    return str(_canonical(arrow_type))


def canonical_schema(schema: pa.Schema) -> list[tuple[str, str]]:
    """(name, type) of the state's own columns, in order, types canonical."""
    return [(f.name, _canonical_type(f.type)) for f in schema if f.name not in RESERVED_COLUMNS]


def _digest(value: object, size: int) -> str:
    text = json.dumps(value, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def types_fingerprint(schema: pa.Schema) -> str:
    """The types part: what files written before nullability counted carry alone."""
    return _digest(canonical_schema(schema), 16)


def schema_fingerprint(schema: pa.Schema) -> str:
    """The full fingerprint a state file is written with: types, then nullability."""
    required = [f.name for f in schema if f.name not in RESERVED_COLUMNS and not f.nullable]
    return types_fingerprint(schema) + _SEPARATOR + _digest(required, 8)


def same_types(recorded: str, schema: pa.Schema) -> bool:
    """Whether a file whose recorded fingerprint is `recorded` holds `schema`'s columns
    and types (nullability aside), whichever version of the fingerprint it carries.
    False is not proof of a difference: files of releases before the node-by-node
    canonical form carry a fingerprint of the type's text, which differs where a nested
    field's name holds `large_` or `tz=`; readers then compare the file's own schema."""
    return recorded.split(_SEPARATOR, 1)[0] == types_fingerprint(schema)


def schema_differences(expected: pa.Schema, actual: pa.Schema) -> list[str]:
    """Human-readable differences between a requested and a stored schema."""
    want = dict(canonical_schema(expected))
    have = dict(canonical_schema(actual))
    out = [f"column '{n}' ({t}) is missing" for n, t in want.items() if n not in have]
    out += [f"column '{n}' ({t}) is not requested" for n, t in have.items() if n not in want]
    out += [
        f"column '{n}' is {have[n]}, requested {t}"
        for n, t in want.items()
        if n in have and have[n] != t
    ]
    if not out and list(want) != list(have):
        out.append(f"columns are in order {list(have)}, requested {list(want)}")
    return out
