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
import re

import pyarrow as pa

from batchpoint.state.format import RESERVED_COLUMNS, StateError

_SEPARATOR = "."


class StateNotAsDeclared(StateError):
    """A state set, migrated or written with other columns, types or nulls than the
    code declares (runtime/state_conform.py, spark/state_writer.py)."""


def _canonical_type(arrow_type: pa.DataType) -> str:
    text = str(arrow_type).replace("large_", "")
    return re.sub(r"tz=[^,\]>]+", "tz=UTC", text)


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
    and types (nullability aside), whichever version of the fingerprint it carries."""
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
