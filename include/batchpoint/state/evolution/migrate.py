"""Migrate stored rows to the declared schema, for a MIGRATED verdict: no user code.

One record batch at a time (a Parquet row group, an `iter_batches` batch), so a reader
migrates as it streams and never holds a whole state file; a table is migrated batch by
batch the same way. Only safe casts are made (the verdict admits only widenings, which
cannot fail); an added column is a null or constant array, a dropped one is left out.
Columns reserved by the state format (`_key_group`, the changelog's `_change` and
`_net`) pass through after the state's columns, as the files carry them.
"""

from __future__ import annotations

from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from batchpoint.state.evolution.verdict import ChangeKind, SchemaVerdict, VerdictKind
from batchpoint.state.format import RESERVED_COLUMNS, StateError

Rows = TypeVar("Rows", pa.RecordBatch, pa.Table)


def migrate_batch(rows: Rows, verdict: SchemaVerdict) -> Rows:
    """`rows` (stored with `verdict.stored`) as the declared schema has them.

    UNCHANGED returns `rows` itself, without a look; MIGRATED returns rows whose
    schema is `verdict.declared` exactly (plus reserved columns `rows` had). Raises
    StateError for any other verdict (a migrate= function or a refusal is needed) and
    for rows whose columns are not the stored schema's.
    """
    if verdict.kind is VerdictKind.UNCHANGED:
        return rows
    if verdict.kind is not VerdictKind.MIGRATED:
        raise StateError(
            f"{verdict.what}: stored rows cannot be migrated by the rules (verdict "
            f"{verdict.kind.value}): " + "; ".join(verdict.messages)
        )
    target = _target_schema(rows.schema, verdict)
    fills = {
        c.column: c.default for c in verdict.changes if c.kind is ChangeKind.ADDED_WITH_DEFAULT
    }
    if isinstance(rows, pa.Table):
        batches = [_migrate(b, verdict, target, fills) for b in rows.to_batches()]
        return pa.Table.from_batches(batches, schema=target)
    return _migrate(rows, verdict, target, fills)


def _target_schema(schema: pa.Schema, verdict: SchemaVerdict) -> pa.Schema:
    reserved = [f for f in schema if f.name in RESERVED_COLUMNS]
    if not reserved:
        return verdict.declared
    return pa.schema([*verdict.declared, *reserved], metadata=verdict.declared.metadata)


def _migrate(
    batch: pa.RecordBatch, verdict: SchemaVerdict, target: pa.Schema, fills: dict[str, Any]
) -> pa.RecordBatch:
    _check_stored(batch.schema, verdict)
    stored = set(verdict.stored.names)
    arrays = []
    for field in target:
        if field.name in stored or field.name in RESERVED_COLUMNS:
            column = batch.column(field.name)
            if column.type != field.type:
                column = pc.cast(column, field.type, safe=True)
            arrays.append(column)
        elif field.name in fills:
            arrays.append(pa.repeat(pa.scalar(fills[field.name], field.type), batch.num_rows))
        else:
            arrays.append(pa.nulls(batch.num_rows, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _check_stored(schema: pa.Schema, verdict: SchemaVerdict) -> None:
    """The rows must be what the verdict was resolved for: the same columns with the
    same types (a cast from anything else would not be the rule's cast)."""
    expected = {f.name: f.type for f in verdict.stored if f.name not in RESERVED_COLUMNS}
    found = {f.name: f.type for f in schema if f.name not in RESERVED_COLUMNS}
    if found == expected:
        return
    problems = [f"'{n}' missing" for n in expected if n not in found]
    problems += [f"'{n}' unexpected" for n in found if n not in expected]
    problems += [
        f"'{n}' is {found[n]}, stored as {t}"
        for n, t in expected.items()
        if n in found and found[n] != t
    ]
    raise StateError(
        f"{verdict.what}: rows do not have the stored schema the verdict was resolved for: "
        + "; ".join(problems)
    )
