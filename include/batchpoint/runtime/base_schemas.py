"""The schema a base checkpoint holds for one state: what a deploy's declared schema is
compared with (state schema evolution, docs/design/evolution.md).

One function, so that every caller (the runner's restore, `batchpoint plan`) asks the
same question the same way. Checkpoints written before the topology recorded schemas
answer from the state files themselves: each handle records the Spark schema its file
was written with (no download); a handle too old for that is answered by the Parquet
footer of the smallest of the state's full files. No Spark job either way.

What the files hold is what Spark wrote, not what the code declared: Spark ships strings
as either offset width, timestamps in the session's zone, and loses nullability through
most transformations. `comparable_stored` takes the declared type wherever the stored
one differs from it only in such a way, so those differences are not read as a change;
a base still pending, whose files are not acknowledged yet, is judged by the schema its
topology recorded the same way (`judged_recorded`), so it gets the verdict it will get
once completed.
A column such files hold as nullable and the code declares non-null is judged by its
rows: nullable (a tightening the rules refuse) when a file holds a null in it, since a
reader would hand those nulls to a function whose output must not hold any.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from batchpoint.protocol.checkpoint import CompletedCheckpoint, FileHandle
from batchpoint.runtime.incremental import base_state_files
from batchpoint.state.format import CHANGE_COLUMN, CHANGE_ROW, RESERVED_COLUMNS, StateHandle
from batchpoint.state.schemas import same_canonical_type
from batchpoint.storage import ObjectStore


@dataclass(frozen=True)
class BaseStateSchema:
    """`schema`: the state's columns as stored. `declared`: it is the schema the code
    declared when the checkpoint was taken (recorded in its topology), so its
    nullability is meant; False: read from the files, where Spark decided nullability."""

    schema: pa.Schema
    declared: bool = False


def base_state_schema(
    store: ObjectStore, base: CompletedCheckpoint | None, operator_uid: str, state_uid: str
) -> BaseStateSchema | None:
    """The schema of (operator, state) in `base`; None when the base holds no files of
    it (no base, or the operator or state is new)."""
    files = base_state_files(base, operator_uid, state_uid)
    if not files or base is None:
        return None
    topology = base.pending.topology
    recorded = topology.state_schema(operator_uid, state_uid) if topology else None
    stored = stored_state_schema(store, files, recorded)
    if recorded is None:
        return BaseStateSchema(stored)
    # The files' types are what a reader casts from; the topology says which columns
    # the code meant nullable, which Spark's writer does not keep.
    meant = {f.name: f.nullable for f in recorded}
    fields = [f.with_nullable(meant.get(f.name, f.nullable)) for f in stored]
    return BaseStateSchema(pa.schema(fields), declared=True)


def stored_state_schema(
    store: ObjectStore, files: list[FileHandle], recorded: pa.Schema | None = None
) -> pa.Schema:
    """The state columns the files were written with (the full files': a changelog's
    columns are all nullable, a CHANGE_GONE row holding only its key): as their handles
    record it, else as the checkpoint `recorded` it, else from a file's footer."""
    handles = [StateHandle.coerce(f) for f in files]
    full = [h for h in handles if not h.is_changelog] or handles
    written = next((h.spark_schema for h in full if h.spark_schema), "")
    if written:
        from pyspark.sql import types as T

        from batchpoint.spark.compat import to_arrow_schema

        # The exact conversion the writer made for the file's schema (state_writer).
        struct = T.StructType.fromJson(json.loads(written))
        return _state_columns(to_arrow_schema(struct, timezone="UTC"))
    if recorded is not None:
        return recorded
    smallest = min(full, key=lambda h: h.size)
    footer = pq.ParquetFile(pa.BufferReader(store.get(smallest.path).data)).schema_arrow
    return _state_columns(footer)


def _state_columns(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f for f in schema if f.name not in RESERVED_COLUMNS])


def comparable_stored(
    stored: BaseStateSchema, declared: pa.Schema, holding_nulls: frozenset[str] = frozenset()
) -> pa.Schema:
    """`stored.schema` with the declared type of each column whose stored type differs
    only as Spark makes it differ (offset width, time zone, a list's item name:
    `same_canonical_type`), and, when read from the
    files, the declared nullability, unless the column is one of `holding_nulls` (a
    null in the files): what the evolution rules should compare."""
    fields = []
    for f in stored.schema:
        if f.name in declared.names:
            want = declared.field(f.name)
            if same_canonical_type(f.type, want.type):
                f = f.with_type(want.type)
            if not stored.declared:
                f = f.with_nullable(want.nullable or f.name in holding_nulls)
        fields.append(f)
    return pa.schema(fields)


def judged_recorded(recorded: pa.Schema, declared: pa.Schema | None) -> pa.Schema:
    """A state's schema as a checkpoint's topology recorded it, as the rules compare it
    with `declared` (None: a state the code no longer declares): for a base still
    pending, whose files are not acknowledged yet, and for a state whose files cannot be
    read. Its files hold that declaration as Spark writes it, so it gets the files'
    equivalence (`comparable_stored`, nullability as recorded): judged pending and again
    once completed, a base gets one verdict (DESIGN.md invariant 18)."""
    if declared is None:
        return recorded
    return comparable_stored(BaseStateSchema(recorded, declared=True), declared)


def tightened_columns(stored: BaseStateSchema, declared: pa.Schema) -> list[str]:
    """The columns files hold as nullable that the code declares non-null, when nothing
    recorded what the code that wrote them meant: only their rows can tell."""
    if stored.declared:
        return []
    return [
        f.name
        for f in stored.schema
        if f.nullable and f.name in declared.names and not declared.field(f.name).nullable
    ]


def columns_holding_nulls(
    store: ObjectStore, files: list[FileHandle], columns: list[str]
) -> frozenset[str]:
    """Which of `columns` hold a null in a row of the files (a changelog's deletion rows
    aside: they hold only their key). Reads those columns of each file, no Spark job; a
    null a later layer overwrote counts too, so a deploy may be refused that would have
    read, never the reverse."""
    found: set[str] = set()
    for handle in (StateHandle.coerce(f) for f in files):
        wanted = [c for c in columns if c not in found]
        if not wanted:
            break
        parquet = pq.ParquetFile(pa.BufferReader(store.get(handle.path).data))
        present = [c for c in wanted if c in parquet.schema_arrow.names]
        if not present:
            continue
        extra = [CHANGE_COLUMN] if handle.is_changelog else []
        rows = parquet.read(columns=present + extra)
        if handle.is_changelog:
            rows = rows.filter(pc.equal(rows[CHANGE_COLUMN], CHANGE_ROW))
        found.update(c for c in present if rows[c].null_count)
    return frozenset(found)


def judged_schema(
    store: ObjectStore,
    base: CompletedCheckpoint | None,
    operator_uid: str,
    state_uid: str,
    declared: pa.Schema | None,
) -> pa.Schema | None:
    """A state's stored schema as the evolution rules compare it with `declared` (None:
    a state the code no longer declares): what its files hold, read without a Spark
    job, with the declaration's type where the files differ from it only as Spark makes
    them differ. None when the base holds no files of it. The one answer both the
    deploy plan (runtime/deploy.plan_on) and the restore's reader (state_evolution)
    take, so that a plan that says yes is an epoch that reads."""
    stored = base_state_schema(store, base, operator_uid, state_uid)
    if stored is None:
        return None
    if declared is None:
        return stored.schema
    nulls: frozenset[str] = frozenset()
    if tightened := tightened_columns(stored, declared):
        files = base_state_files(base, operator_uid, state_uid)
        nulls = columns_holding_nulls(store, files, tightened)
    return comparable_stored(stored, declared, nulls)
