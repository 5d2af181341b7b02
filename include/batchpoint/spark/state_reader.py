"""Restoring keyed state in Spark: executors download, verify and stream state files.

The driver builds a one-row-per-file DataFrame of handles and tasks read the files,
keeping only the key groups asked for, so a restore at a new parallelism reads only the
old files that overlap a new subtask's range, mostly skipping whole row groups.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

from batchpoint.spark.shipping import ShippedStore, StoreLike, ship_store
from batchpoint.state.format import (
    CHANGE_COLUMN,
    CHANGE_ROW,
    CHANGELOG_COLUMNS,
    KEY_GROUP_COLUMN,
    SUBTASK_COLUMN,
    StateError,
    StateFileCorrupt,
    StateHandle,
    StateSchemaMismatch,
    file_sha256,
    read_header,
    schema_differences,
    schema_fingerprint,
    split_layers,
)
from batchpoint.state.keygroups import KeyGroupRange, check_parallelism
from batchpoint.storage import ObjectStore

#: Files up to this size are read into memory with store.get instead of a temp file.
SMALL_FILE_BYTES = 8 << 20
DEFAULT_READ_BATCH_ROWS = 10_000
#: Read batches are cut to about this many (uncompressed) bytes: decoding a batch of
#: wide rows grows string buffers by doubling, so its peak is a few times this.
DEFAULT_READ_BATCH_BYTES = 4 << 20
_ORDER = "__batchpoint_order"
_LAYER = "__batchpoint_layer"


@dataclass(frozen=True)
class _ReadSpec:
    store: ShippedStore
    out_schema: pa.Schema  # what the tasks yield, in Spark's column order
    state_columns: tuple[str, ...]
    fingerprint: str
    max_parallelism: int
    new_parallelism: int | None
    subtask_column: str | None
    verify: bool
    batch_rows: int = DEFAULT_READ_BATCH_ROWS
    batch_bytes: int = DEFAULT_READ_BATCH_BYTES
    requested: pa.Schema = field(default_factory=lambda: pa.schema([]))
    key_columns: tuple[str, ...] = ()


@contextlib.contextmanager
def _fetched(store: ObjectStore, handle: StateHandle, verify: bool) -> Iterator[Any]:
    """The file's bytes as something pq.ParquetFile opens: in memory when small, else a
    temp file, so no file is ever held whole in memory past SMALL_FILE_BYTES."""
    if handle.size <= SMALL_FILE_BYTES:
        data = store.get(handle.path).data
        if verify:
            _verify(handle, len(data), hashlib.sha256(data).hexdigest())
        yield pa.BufferReader(data)
        return
    tmpdir = Path(tempfile.mkdtemp(prefix="bp-restore-"))
    try:
        local = tmpdir / "state.parquet"
        store.download_file(handle.path, local)
        if verify:
            _verify(handle, local.stat().st_size, file_sha256(local))
        yield str(local)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _verify(handle: StateHandle, size: int, sha256: str) -> None:
    if size != handle.size:
        raise StateFileCorrupt(handle.path, f"{size} bytes, the handle records {handle.size}")
    if sha256 != handle.sha256:
        raise StateFileCorrupt(
            handle.path, f"sha256 {sha256[:12]}..., the handle records {handle.sha256[:12]}..."
        )


def _row_groups_in(parquet: pq.ParquetFile, wanted: KeyGroupRange) -> list[int]:
    """Row groups whose key-group statistics may hold rows of `wanted`: rows are sorted by
    key group, so a rescale mostly skips whole row groups without decoding them."""
    meta = parquet.metadata
    index = parquet.schema_arrow.get_field_index(KEY_GROUP_COLUMN)
    chosen = []
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(index).statistics
        known = stats is not None and stats.has_min_max
        if known and (stats.max < wanted.start or stats.min > wanted.end):
            continue
        chosen.append(i)
    return chosen


def _read_one(
    spec: _ReadSpec, store: ObjectStore, handle: StateHandle, wanted: KeyGroupRange
) -> Iterator[pa.RecordBatch]:
    for table in _raw_tables(spec, store, handle, wanted):
        yield from _shaped(spec, table)


def _shaped(spec: _ReadSpec, table: pa.Table) -> Iterator[pa.RecordBatch]:
    for batch in table.to_batches(max_chunksize=spec.batch_rows):
        if batch.num_rows:
            yield _shape(spec, batch)


def _raw_tables(
    spec: _ReadSpec,
    store: ObjectStore,
    handle: StateHandle,
    wanted: KeyGroupRange,
    extra: Sequence[str] = (),
) -> Iterator[pa.Table]:
    """The file's rows in `wanted` as stored (state columns, `_key_group`, then `extra`),
    one row group at a time, each cut into batches of about `batch_bytes`."""
    with _fetched(store, handle, spec.verify) as source:
        parquet = pq.ParquetFile(source)
        stored = parquet.schema_arrow
        header = read_header(stored, handle.path)
        if header.get("schema_fingerprint") != spec.fingerprint:
            raise StateSchemaMismatch(handle.path, schema_differences(spec.requested, stored))
        groups = _row_groups_in(parquet, wanted)
        if not groups:
            return
        whole = wanted.start <= handle.key_group_range.start and (
            handle.key_group_range.end <= wanted.end
        )
        columns = [*spec.state_columns, KEY_GROUP_COLUMN, *extra]
        rows = _batch_rows(spec, parquet.metadata)
        for index in groups:
            # One row group at a time: iter_batches() reads ahead and, with wide string
            # columns, held several row groups' buffers at once (pyarrow 26); a row group
            # is bounded by the writer's row_group_bytes.
            table = parquet.read_row_group(index, columns=columns, use_threads=False)
            if not whole:
                table = _filter_groups(table, wanted)
            for batch in table.to_batches(max_chunksize=rows):
                if batch.num_rows:
                    yield pa.Table.from_batches([batch])
            del table


def _latest_changes(
    spec: _ReadSpec, store: ObjectStore, changelogs: Sequence[StateHandle], wanted: KeyGroupRange
) -> pa.Table:
    """The rows of every changed key of `wanted` as of the newest changelog that has
    the key (all of that layer's rows of it, or its CHANGE_GONE mark)."""
    tables = []
    for handle in changelogs:
        for table in _raw_tables(spec, store, handle, wanted, extra=CHANGELOG_COLUMNS):
            layer = pa.array([handle.layer] * table.num_rows, pa.int32())
            tables.append(table.append_column(_LAYER, layer))
    if not tables:
        return pa.table({})
    schema = tables[0].schema
    changes = pa.concat_tables([t.cast(schema) for t in tables])
    keys = list(spec.key_columns)
    numbered = _numbered(changes.select([*keys, _LAYER]))
    top = numbered.group_by(keys, use_threads=False).aggregate([(_LAYER, "max")])
    # Joined on the keys and row numbers only: Acero joins no list or struct payload.
    matched = numbered.join(top, keys, use_threads=False)
    newest = matched.filter(pc.equal(matched.column(_LAYER), matched.column(f"{_LAYER}_max")))
    return changes.take(_sorted_rows(newest)).drop_columns([_LAYER])


def _numbered(table: pa.Table) -> pa.Table:
    return table.append_column(_ORDER, pa.array(range(table.num_rows), pa.int64()))


def _sorted_rows(table: pa.Table) -> pa.Array:
    rows = table.column(_ORDER)
    return pc.take(rows, pc.sort_indices(rows))


def _read_merged(
    spec: _ReadSpec,
    store: ObjectStore,
    full: StateHandle,
    changelogs: Sequence[StateHandle],
    wanted: KeyGroupRange,
) -> Iterator[pa.RecordBatch]:
    """A full file with its changelogs applied: its rows of changed keys are dropped,
    then each changed key's newest rows are added. Only the changes are held in
    memory; the full file streams as usual."""
    changes = _latest_changes(spec, store, changelogs, wanted)
    if changes.num_rows == 0:
        yield from _read_one(spec, store, full, wanted)
        return
    keys = list(spec.key_columns)
    changed = changes.select(keys)
    for table in _raw_tables(spec, store, full, wanted):
        numbered = _numbered(table.select(keys))
        unchanged = numbered.join(
            changed.cast(table.select(keys).schema), keys, join_type="left anti",
            use_threads=False,
        )  # fmt: skip
        yield from _shaped(spec, table.take(_sorted_rows(unchanged)))
    standing = changes.filter(pc.equal(changes.column(CHANGE_COLUMN), CHANGE_ROW))
    yield from _shaped(spec, standing.drop_columns(list(CHANGELOG_COLUMNS)))


def _batch_rows(spec: _ReadSpec, meta: pq.FileMetaData) -> int:
    """Rows per read batch, so that a batch of wide rows stays near `batch_bytes`."""
    if meta.num_rows == 0:
        return spec.batch_rows
    total = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    per_row = max(1, total // meta.num_rows)
    return max(1, min(spec.batch_rows, spec.batch_bytes // per_row))


def _filter_groups(table: pa.Table, wanted: KeyGroupRange) -> pa.Table:
    groups = table.column(KEY_GROUP_COLUMN)
    mask = pc.and_(pc.greater_equal(groups, wanted.start), pc.less_equal(groups, wanted.end))
    return table.filter(mask)


def _shape(spec: _ReadSpec, batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch in exactly the Arrow schema Spark was promised."""
    columns = []
    for out in spec.out_schema:
        if out.name == spec.subtask_column:
            assert spec.new_parallelism is not None
            groups = batch.column(KEY_GROUP_COLUMN).cast(pa.int64())
            subtasks = pc.divide(
                pc.multiply(groups, spec.new_parallelism), spec.max_parallelism
            )  # integer division of non-negative ints: Flink's operator index
            columns.append(subtasks.cast(pa.int32()))
        else:
            columns.append(batch.column(out.name).cast(out.type))
    return pa.RecordBatch.from_arrays(columns, schema=spec.out_schema)


def _read_task(spec: _ReadSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    store = spec.store.open()
    for batch in batches:
        for row in batch.to_pylist():
            handle = StateHandle.from_json(json.loads(row["handle"]))
            wanted = KeyGroupRange(row["lo"], row["hi"])
            changelogs = [StateHandle.from_json(h) for h in json.loads(row["changelogs"])]
            if changelogs:
                yield from _read_merged(spec, store, handle, changelogs, wanted)
            else:
                yield from _read_one(spec, store, handle, wanted)


def _footer_task(
    store: ShippedStore, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    opened = store.open()
    for batch in batches:
        for row in batch.to_pylist():
            handle = StateHandle.from_json(json.loads(row["handle"]))
            with _fetched(opened, handle, verify=False) as source:
                schema = pq.ParquetFile(source).schema_arrow
            yield pa.RecordBatch.from_pydict(
                {"schema": [schema.serialize().to_pybytes()]},
                schema=pa.schema([pa.field("schema", pa.binary())]),
            )


def stored_schema(spark: SparkSession, store: StoreLike, handle: StateHandle) -> pa.Schema:
    """A state file's Arrow schema, read by a one-task job (the file may be on S3, where
    only executors are meant to read state)."""
    tasks = spark.createDataFrame([(json.dumps(handle.to_json()),)], "handle string")
    row = tasks.mapInArrow(
        functools.partial(_footer_task, ship_store(store)), "schema binary"
    ).first()
    assert row is not None
    return pa.ipc.read_schema(pa.py_buffer(row.schema))


def _as_struct(spark: SparkSession, schema: T.StructType | str) -> T.StructType:
    if isinstance(schema, T.StructType):
        return schema
    parsed = spark.createDataFrame([], schema).schema
    return parsed


def check_state_schema(
    spark: SparkSession,
    store: StoreLike,
    handles: Sequence[StateHandle],
    schema: T.StructType | str,
) -> None:
    """Raise StateSchemaMismatch, naming the file and the columns that differ, when the
    files were not written with `schema` (compared by name and type, in order)."""
    requested = to_arrow_schema(_as_struct(spark, schema), timezone="UTC")
    fingerprint = schema_fingerprint(requested)
    for handle in handles:
        if handle.schema_fingerprint and handle.schema_fingerprint != fingerprint:
            actual = stored_schema(spark, store, handle)
            differences = schema_differences(requested, actual)
            raise StateSchemaMismatch(handle.path, differences or ["the schema fingerprint"])


def _coerce_handles(
    handles: Iterable[StateHandle | Mapping[str, Any]], max_parallelism: int | None
) -> tuple[list[StateHandle], int]:
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


def _read(
    spark: SparkSession,
    store: StoreLike,
    handles: Iterable[StateHandle | Mapping[str, Any]],
    wanted: KeyGroupRange | None,
    schema: T.StructType | str | None,
    *,
    new_parallelism: int | None,
    subtask_col: str | None,
    keep_key_group: bool,
    verify: bool,
    max_parallelism: int | None,
) -> DataFrame:
    chosen, max_par = _coerce_handles(handles, max_parallelism)
    state = chosen[0].name
    wanted = wanted or KeyGroupRange(0, max_par - 1)
    if wanted.start < 0 or wanted.end >= max_par or wanted.size == 0:
        raise StateError(f"state '{state}': key groups {wanted} are not within 0..{max_par - 1}")
    chosen, layers = split_layers(chosen, wanted, f"state '{state}' key groups {wanted}")
    if schema is None and chosen[0].spark_schema:
        # The writer recorded it; each task still checks its file's header fingerprint.
        struct = T.StructType.fromJson(json.loads(chosen[0].spark_schema))
    elif schema is None:
        stored = stored_schema(spark, store, chosen[0])
        struct = from_arrow_schema(pa.schema(f for f in stored if f.name != KEY_GROUP_COLUMN))
    else:
        struct = _as_struct(spark, schema)
        check_state_schema(spark, store, chosen, struct)
    requested = to_arrow_schema(struct, timezone="UTC")
    out_struct = T.StructType(list(struct.fields))
    if keep_key_group:
        out_struct = out_struct.add(KEY_GROUP_COLUMN, T.IntegerType(), nullable=False)
    if subtask_col is not None:
        out_struct = out_struct.add(subtask_col, T.IntegerType(), nullable=False)
    time_zone = spark.conf.get("spark.sql.session.timeZone") or "UTC"
    key_columns = {c.key_columns for files in layers.values() for c in files}
    if len(key_columns) > 1 or () in key_columns:
        raise StateError(f"state '{state}': its changelogs do not agree on the key columns")
    spec = _ReadSpec(
        store=ship_store(store),
        out_schema=to_arrow_schema(out_struct, timezone=time_zone),
        state_columns=tuple(struct.fieldNames()),
        fingerprint=schema_fingerprint(requested),
        max_parallelism=max_par,
        new_parallelism=new_parallelism,
        subtask_column=subtask_col,
        verify=verify,
        requested=requested,
        key_columns=key_columns.pop() if key_columns else (),
    )
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
    # One full file (and the changelogs over its key groups) per task: repartitionById
    # places row i in partition i exactly.
    tasks = spark.createDataFrame(rows, "idx int, handle string, lo int, hi int, changelogs string")
    tasks = tasks.repartitionById(len(rows), "idx")
    return tasks.mapInArrow(functools.partial(_read_task, spec), out_struct)


def read_keyed_state(
    spark: SparkSession,
    store: StoreLike,
    handles: Iterable[StateHandle | Mapping[str, Any]],
    key_groups: KeyGroupRange | None = None,
    schema: T.StructType | str | None = None,
    *,
    keep_key_group: bool = False,
    verify: bool = True,
    max_parallelism: int | None = None,
) -> DataFrame:
    """The state's rows in `key_groups` (all of them when None), read by executors.

    For a restore at a new parallelism, a new subtask passes its own range
    (``key_group_range_for_subtask``): only the old files that overlap it are read, and
    only its key groups are kept. The handles must cover the range exactly once.
    `schema` (a StructType or DDL string) must match the files' schema; None takes the
    one their handles record (or, for older handles, reads it from the first file). Each
    file's size and sha256 are checked against its handle.
    """
    return _read(
        spark,
        store,
        handles,
        key_groups,
        schema,
        new_parallelism=None,
        subtask_col=None,
        keep_key_group=keep_key_group,
        verify=verify,
        max_parallelism=max_parallelism,
    )


def read_keyed_state_for_parallelism(
    spark: SparkSession,
    store: StoreLike,
    handles: Iterable[StateHandle | Mapping[str, Any]],
    parallelism: int,
    schema: T.StructType | str | None = None,
    *,
    subtask_column_name: str = SUBTASK_COLUMN,
    partition_by_subtask: bool = True,
    keep_key_group: bool = False,
    verify: bool = True,
    max_parallelism: int | None = None,
) -> DataFrame:
    """All of the state, with an int column naming the subtask that owns each row at the
    new `parallelism`. With `partition_by_subtask`, partition i holds subtask i's rows."""
    coerced, max_par = _coerce_handles(handles, max_parallelism)
    check_parallelism(parallelism, max_par, f"state '{coerced[0].name}' restore")
    out = _read(
        spark,
        store,
        coerced,
        None,
        schema,
        new_parallelism=parallelism,
        subtask_col=subtask_column_name,
        keep_key_group=keep_key_group,
        verify=verify,
        max_parallelism=max_par,
    )
    return out.repartitionById(parallelism, subtask_column_name) if partition_by_subtask else out
