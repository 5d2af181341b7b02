"""Restoring keyed state in Spark: executors download, verify and stream state files.

The driver builds a one-row-per-file DataFrame of handles and tasks read the files
(state_read_tasks.py), keeping only the key groups asked for, so a restore at a new
parallelism reads only the old files that overlap a new subtask's range, mostly skipping
whole row groups. What to read and how is one `ReadSpec`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from batchpoint.spark.compat import from_arrow_schema, repartition_by_id, to_arrow_schema
from batchpoint.spark.shipping import StoreLike, ship_store
from batchpoint.spark.state_read_tasks import (
    DEFAULT_READ_BATCH_BYTES,
    DEFAULT_READ_BATCH_ROWS,
    SMALL_FILE_BYTES,
    TaskRead,
    file_schema,
    footer_task,
    read_task,
)
from batchpoint.spark.task_rows import task_rows
from batchpoint.state.evolution import SchemaVerdict, VerdictKind
from batchpoint.state.format import (
    KEY_GROUP_COLUMN,
    SUBTASK_COLUMN,
    StateError,
    StateHandle,
    StateSchemaMismatch,
    split_layers,
)
from batchpoint.state.keygroups import KeyGroupRange, check_parallelism
from batchpoint.state.schemas import same_types, schema_differences

__all__ = [
    "DEFAULT_READ_BATCH_BYTES",
    "DEFAULT_READ_BATCH_ROWS",
    "SMALL_FILE_BYTES",
    "ReadPlan",
    "ReadSpec",
    "check_state_schema",
    "plan_keyed_read",
    "read_keyed_state",
    "read_keyed_state_for_parallelism",
    "stored_schema",
]

Handles = Iterable[StateHandle | Mapping[str, Any]]


@dataclass(frozen=True)
class ReadSpec:
    """How to read one state's files.

    `key_groups`: the rows of these key groups only (None: all of them); a new subtask
    of a rescale passes its own range (``key_group_range_for_subtask``), and only the
    old files that overlap it are read. `schema` (a StructType or DDL string) must match
    the files'; None takes the one their handles record (or, for older handles, reads it
    from the first file). `verify` checks each file's size and sha256 against its handle.
    `rescale_to`: all of the state, with column `subtask_column` naming the subtask that
    owns each row at that parallelism (partition i holding subtask i's rows with
    `partition_by_subtask`). `verdict`: a state whose code declares another schema than
    its files hold (state schema evolution): `schema` is then the files' (the verdict's
    stored schema) and the rows are read as the verdict's declared schema, each batch
    migrated by `migrate_batch` in the executors; an UNCHANGED verdict changes nothing,
    any verdict the rules cannot migrate is refused before any Spark job."""

    key_groups: KeyGroupRange | None = None
    schema: T.StructType | str | None = None
    keep_key_group: bool = False
    verify: bool = True
    max_parallelism: int | None = None
    rescale_to: int | None = None
    subtask_column: str = SUBTASK_COLUMN
    partition_by_subtask: bool = True
    verdict: SchemaVerdict | None = None


def stored_schema(spark: SparkSession | None, store: StoreLike, handle: StateHandle) -> pa.Schema:
    """A state file's Arrow schema, read by a one-task job (the file may be on S3, where
    only executors are meant to read state); without a session (a data source's planner,
    itself a Spark-side Python worker), read here."""
    if spark is None:
        return file_schema(ship_store(store).open(), handle)
    tasks = spark.createDataFrame([(json.dumps(handle.to_json()),)], "handle string")
    row = tasks.mapInArrow(
        functools.partial(footer_task, ship_store(store)), "schema binary"
    ).first()
    assert row is not None
    return pa.ipc.read_schema(pa.py_buffer(row.schema))


def _as_struct(spark: SparkSession | None, schema: T.StructType | str) -> T.StructType:
    if isinstance(schema, T.StructType):
        return schema
    if spark is None:
        raise StateError(f"a schema given as DDL ({schema!r}) needs a Spark session to parse")
    parsed = spark.createDataFrame([], schema).schema
    return parsed


def check_state_schema(
    spark: SparkSession | None,
    store: StoreLike,
    handles: Sequence[StateHandle],
    schema: T.StructType | str,
) -> None:
    """Raise StateSchemaMismatch, naming the file and the columns that differ, when the
    files were not written with `schema` (compared by name and type, in order)."""
    requested = to_arrow_schema(_as_struct(spark, schema), timezone="UTC")
    for handle in handles:
        if handle.schema_fingerprint and not same_types(handle.schema_fingerprint, requested):
            # the file's own schema decides (schemas.same_types)
            differences = schema_differences(requested, stored_schema(spark, store, handle))
            if differences:
                raise StateSchemaMismatch(handle.path, differences)


def _coerce_handles(handles: Handles, max_parallelism: int | None) -> tuple[list[StateHandle], int]:
    coerced = [StateHandle.coerce(h) for h in handles]
    if not coerced:
        raise StateError("no state handles to read: a restore needs the checkpoint's handles")
    names = {h.name for h in coerced}
    if len(names) > 1:
        raise StateError(f"handles of several states {sorted(names)}: read one state at a time")
    known = {h.max_parallelism for h in coerced if h.max_parallelism}
    if max_parallelism is not None:
        known.add(max_parallelism)
    if len(known) != 1:
        raise StateError(
            f"state '{coerced[0].name}': max_parallelism is "
            f"{'unknown' if not known else sorted(known)}; key groups cannot be remapped "
            "across max_parallelism values (as in Flink), and handles must agree on one"
        )
    return coerced, known.pop()


def _state_struct(
    spark: SparkSession | None, store: StoreLike, chosen: list[StateHandle], spec: ReadSpec
) -> T.StructType:
    """The state's columns: as asked (checked against the files), else as recorded."""
    if spec.schema is None and chosen[0].spark_schema:
        # The writer recorded it; each task still checks its file's header fingerprint.
        return T.StructType.fromJson(json.loads(chosen[0].spark_schema))
    if spec.schema is None:
        stored = stored_schema(spark, store, chosen[0])
        return from_arrow_schema(pa.schema(f for f in stored if f.name != KEY_GROUP_COLUMN))
    struct = _as_struct(spark, spec.schema)
    check_state_schema(spark, store, chosen, struct)
    return struct


def _changelog_keys(layers: Mapping[int, Sequence[StateHandle]], state: str) -> tuple[str, ...]:
    """The key columns every changelog was written with (none without changelogs)."""
    key_columns = {c.key_columns for files in layers.values() for c in files}
    if len(key_columns) > 1 or () in key_columns:
        raise StateError(f"state '{state}': its changelogs do not agree on the key columns")
    return key_columns.pop() if key_columns else ()


def _task_read(
    time_zone: str,
    store: StoreLike,
    struct: T.StructType,
    key_columns: tuple[str, ...],
    max_parallelism: int,
    spec: ReadSpec,
) -> tuple[TaskRead, T.StructType]:
    """What each task gets, and the Spark schema of what the tasks yield."""
    requested = to_arrow_schema(struct, timezone="UTC")
    verdict = _migrating(spec.verdict)
    out_struct = T.StructType(list(struct.fields))
    if verdict is not None:
        out_struct = from_arrow_schema(pa.schema(f.with_nullable(True) for f in verdict.declared))
    if spec.keep_key_group:
        out_struct = out_struct.add(KEY_GROUP_COLUMN, T.IntegerType(), nullable=False)
    subtask_col = spec.subtask_column if spec.rescale_to is not None else None
    if subtask_col is not None:
        out_struct = out_struct.add(subtask_col, T.IntegerType(), nullable=False)
    task = TaskRead(
        store=ship_store(store),
        out_schema=to_arrow_schema(out_struct, timezone=time_zone),
        state_columns=tuple(struct.fieldNames()),
        max_parallelism=max_parallelism,
        new_parallelism=spec.rescale_to,
        subtask_column=subtask_col,
        verify=spec.verify,
        requested=requested,
        key_columns=key_columns,
        verdict=verdict,
    )
    return task, out_struct


def _migrating(verdict: SchemaVerdict | None) -> SchemaVerdict | None:
    """The verdict the tasks apply: None when there is nothing to migrate; refused
    here, on the driver, when the rules cannot migrate it (a clear error, not a task
    failure inside a Spark job)."""
    if verdict is None or verdict.kind is VerdictKind.UNCHANGED:
        return None
    if verdict.kind is not VerdictKind.MIGRATED:
        verdict.check()  # names every refused column with both types
        raise StateError(
            f"{verdict.what}: its stored rows need the state's migrate= function "
            "(verdict user-migration), not a read in the declared schema: "
            + "; ".join(verdict.messages)
        )
    return verdict


def _task_rows(
    chosen: list[StateHandle],
    layers: Mapping[int, Sequence[StateHandle]],
    wanted: KeyGroupRange,
) -> list[tuple[int, str, int, int, str]]:
    """One row per full file: its handle, the key groups to keep, and the changelogs
    over them."""
    rows = []
    for i, h in enumerate(chosen):
        lo = max(wanted.start, h.key_group_range.start)
        hi = min(wanted.end, h.key_group_range.end)
        over = KeyGroupRange(lo, hi)
        changelogs = [
            c.to_json()
            for n in sorted(layers)
            for c in layers[n]
            if c.key_group_range.overlaps(over)
        ]
        rows.append((i, json.dumps(h.to_json()), lo, hi, json.dumps(changelogs)))
    return rows


#: The columns of a planned read's task table: one row per Spark task.
TASK_COLUMNS = "idx int, handle string, lo int, hi int, changelogs string"


@dataclass(frozen=True)
class ReadPlan:
    """A read planned on the driver: what every task gets, the Spark schema of what the
    tasks yield, and one row (TASK_COLUMNS) per task: a full file, the key groups kept of
    it and the changelogs over them (read_row reads one)."""

    task: TaskRead
    struct: T.StructType
    rows: list[tuple[int, str, int, int, str]]


def plan_keyed_read(
    spark: SparkSession | None,
    store: StoreLike,
    handles: Handles,
    spec: ReadSpec | None = None,
    *,
    time_zone: str | None = None,
) -> ReadPlan:
    """How to read the state's rows as `spec` asks (see read_keyed_state). Without a
    session (a Python data source plans in a Spark-side worker), files are read here
    when their handles record no schema, and timestamps are UTC as such sources yield."""
    spec = spec or ReadSpec()
    verdict = _migrating(spec.verdict)
    if verdict is not None and spec.schema is None:
        # The files hold the verdict's stored schema: that is what is checked and read.
        stored = pa.schema(f.with_nullable(True) for f in verdict.stored)
        spec = replace(spec, schema=from_arrow_schema(stored))
    chosen, max_par = _coerce_handles(handles, spec.max_parallelism)
    state = chosen[0].name
    if spec.rescale_to is not None:
        check_parallelism(spec.rescale_to, max_par, f"state '{state}' restore")
    wanted = spec.key_groups or KeyGroupRange(0, max_par - 1)
    if wanted.start < 0 or wanted.end >= max_par or wanted.size == 0:
        raise StateError(f"state '{state}': key groups {wanted} are not within 0..{max_par - 1}")
    chosen, layers = split_layers(chosen, wanted, f"state '{state}' key groups {wanted}")
    struct = _state_struct(spark, store, chosen, spec)
    keys = _changelog_keys(layers, state)
    if time_zone is None:
        time_zone = (spark.conf.get("spark.sql.session.timeZone") if spark else None) or "UTC"
    task, out_struct = _task_read(time_zone, store, struct, keys, max_par, spec)
    return ReadPlan(task, out_struct, _task_rows(chosen, layers, wanted))


def read_keyed_state(
    spark: SparkSession, store: StoreLike, handles: Handles, spec: ReadSpec | None = None
) -> DataFrame:
    """The state's rows as `spec` asks (by default: all of them, in the schema the
    handles record, each file verified), read by executors. The handles must cover the
    key groups asked for exactly once."""
    spec = spec or ReadSpec()
    plan = plan_keyed_read(spark, store, handles, spec)
    # One full file (and the changelogs over its key groups) per task: row i alone in
    # partition i, with no shuffle (task_rows).
    tasks = task_rows(spark, plan.rows, TASK_COLUMNS)
    out = tasks.mapInArrow(functools.partial(read_task, plan.task), plan.struct)
    if spec.rescale_to is not None and spec.partition_by_subtask:
        return repartition_by_id(out, spec.rescale_to, spec.subtask_column)
    return out


def read_keyed_state_for_parallelism(
    spark: SparkSession,
    store: StoreLike,
    handles: Handles,
    parallelism: int,
    spec: ReadSpec | None = None,
) -> DataFrame:
    """All of the state, with an int column naming the subtask that owns each row at the
    new `parallelism` (see ReadSpec.rescale_to)."""
    return read_keyed_state(
        spark, store, handles, replace(spec or ReadSpec(), key_groups=None, rescale_to=parallelism)
    )
