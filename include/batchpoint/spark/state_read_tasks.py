"""What the executors do when keyed state is read: download a file (in memory when
small), check its size and sha256 against its handle, keep the row groups and rows of the
key groups asked for, merge changelogs over a full file, and hand Spark batches in
exactly the schema it was promised. state_reader.py plans the read on the driver.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from batchpoint.spark.shipping import ShippedStore
from batchpoint.spark.worker_memory import releasing
from batchpoint.state.evolution import SchemaVerdict, migrate_batch
from batchpoint.state.format import (
    CHANGE_COLUMN,
    CHANGE_ROW,
    CHANGELOG_COLUMNS,
    KEY_GROUP_COLUMN,
    StateFileCorrupt,
    StateHandle,
    StateSchemaMismatch,
    file_sha256,
    read_header,
)
from batchpoint.state.keygroups import KeyGroupRange
from batchpoint.state.schemas import schema_differences
from batchpoint.storage import ObjectStore

#: Files up to this size are read into memory with store.get instead of a temp file.
SMALL_FILE_BYTES = 8 << 20
DEFAULT_READ_BATCH_ROWS = 10_000
#: Read batches are cut to about this many (uncompressed) bytes: decoding a batch of
#: wide rows grows string buffers by doubling, so its peak is a few times this.
DEFAULT_READ_BATCH_BYTES = 4 << 20
_ORDER = "__batchpoint_order"
_LAYER = "__batchpoint_layer"
#: A file's rows read in tables, closed (its temp file removed) when a read stops early.
Tables = Generator[pa.Table, None, None]


@dataclass(frozen=True)
class TaskRead:
    """What each Spark task of a read gets: the store, and the schema and key groups
    the driver decided on."""

    store: ShippedStore
    out_schema: pa.Schema  # what the tasks yield, in Spark's column order
    state_columns: tuple[str, ...]
    max_parallelism: int
    new_parallelism: int | None
    subtask_column: str | None
    verify: bool
    batch_rows: int = DEFAULT_READ_BATCH_ROWS
    batch_bytes: int = DEFAULT_READ_BATCH_BYTES
    requested: pa.Schema = field(default_factory=lambda: pa.schema([]))
    key_columns: tuple[str, ...] = ()
    # A MIGRATED verdict: the files hold its stored schema, Spark was promised the
    # declared one, and each batch is migrated on the way (state schema evolution).
    verdict: SchemaVerdict | None = None


@contextlib.contextmanager
def fetched(store: ObjectStore, handle: StateHandle, verify: bool) -> Iterator[Any]:
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
    spec: TaskRead, store: ObjectStore, handle: StateHandle, wanted: KeyGroupRange
) -> Iterator[pa.RecordBatch]:
    for table in _raw_tables(spec, store, handle, wanted):
        yield from _shaped(spec, table)


def _shaped(spec: TaskRead, table: pa.Table) -> Iterator[pa.RecordBatch]:
    for batch in table.to_batches(max_chunksize=spec.batch_rows):
        if batch.num_rows:
            yield _shape(spec, batch)


def _raw_tables(
    spec: TaskRead,
    store: ObjectStore,
    handle: StateHandle,
    wanted: KeyGroupRange,
    extra: Sequence[str] = (),
) -> Tables:
    """The file's rows in `wanted` as stored (state columns, `_key_group`, then `extra`),
    one row group at a time, each cut into batches of about `batch_bytes`."""
    with fetched(store, handle, spec.verify) as source:
        parquet = pq.ParquetFile(source)
        stored = parquet.schema_arrow
        read_header(stored, handle.path)
        # The file's own schema, not its fingerprint: a fingerprint of an earlier release
        # is the same for a nested field `large_x` and `x` (state/schemas.py).
        if differences := schema_differences(spec.requested, stored):
            raise StateSchemaMismatch(handle.path, differences)
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


class _LayerCursor:
    """One changelog file's rows handed out by key group, in order: the writer sorts a
    file by key group, so the rows of the groups up to g are a prefix of what is left.
    The file is opened when the first group of its range is asked for."""

    def __init__(self, tables: Callable[[], Tables], handle: StateHandle) -> None:
        self._open, self.handle = tables, handle
        self._tables: Tables | None = None
        self._held: list[pa.Table] = []
        self._ended = False
        self._seen = -1  # the last key group read

    def through(self, group: int) -> list[pa.Table]:
        """The rows of key groups up to `group` not handed out yet, with their layer."""
        if self.handle.key_group_range.start > group:
            return []
        if self._tables is None:
            self._tables = self._open()
        # What is held ends at the last group read: read on while that is not past `group`.
        while not self._ended and self._seen <= group:
            table = next(self._tables, None)
            if table is None:
                self._ended = True
            elif table.num_rows:
                self._seen = _in_order(self.handle, _groups(table), self._seen)
                layer = pa.repeat(pa.scalar(self.handle.layer, pa.int32()), table.num_rows)
                self._held.append(table.append_column(_LAYER, layer))
        out: list[pa.Table] = []
        while self._held:
            first = self._held[0]
            cut = int(np.searchsorted(_groups(first), group, "right"))
            if cut == first.num_rows:
                out.append(self._held.pop(0))
                continue
            if cut:
                out.append(first.slice(0, cut))
                self._held[0] = first.slice(cut)
            break
        return out

    def close(self) -> None:
        if self._tables is not None:
            self._tables.close()


def _groups(table: pa.Table) -> np.ndarray:
    return table.column(KEY_GROUP_COLUMN).to_numpy()


def _in_order(handle: StateHandle, groups: np.ndarray, seen: int) -> int:
    """The last of `groups`, a file's next rows, once they are known to come after
    `seen` and in order: the merge walks files by key group, and a file out of order
    would keep a changed key's old rows. The writer sorts every file; this refuses one
    that is not, whatever wrote it."""
    if groups[0] < seen or (len(groups) > 1 and bool(np.any(np.diff(groups) < 0))):
        raise StateFileCorrupt(handle.path, "its rows are not sorted by key group")
    return int(groups[-1])


def _latest_changes(spec: TaskRead, tables: Sequence[pa.Table]) -> pa.Table | None:
    """Of the changelog rows in `tables` (each with its layer), every changed key's rows
    as of the newest layer that has the key (all of that layer's rows of it, or its
    CHANGE_GONE mark); None when there are none."""
    if not tables:
        return None
    schema = tables[0].schema
    changes = pa.concat_tables([t.cast(schema) for t in tables])
    keys = list(spec.key_columns)
    numbered = _numbered(_as_spark_compares(changes.select([*keys, _LAYER]), keys))
    top = numbered.group_by(keys, use_threads=False).aggregate([(_LAYER, "max")])
    # Joined on the keys and row numbers only: Acero joins no list or struct payload.
    matched = numbered.join(top, keys, use_threads=False)
    newest = matched.filter(pc.equal(matched.column(_LAYER), matched.column(f"{_LAYER}_max")))
    return changes.take(_sorted_rows(newest)).drop_columns([_LAYER])


def _as_spark_compares(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """`table` with its float key columns as Spark compares them: -0.0 as 0.0 and every
    NaN as one. Acero joins and groups by the bits, so a full file's -0.0 row stayed
    beside the changelog's 0.0 row that replaced it (Spark's group by writes 0.0)."""
    for name in keys:
        column = table.column(name)
        if pa.types.is_floating(column.type):
            zero, nan = pa.scalar(0, column.type), pa.scalar(float("nan"), column.type)
            same = pc.if_else(pc.is_nan(column), nan, pc.add(column, zero))
            table = table.set_column(table.schema.get_field_index(name), name, same)
    return table


def _numbered(table: pa.Table) -> pa.Table:
    return table.append_column(_ORDER, pa.array(range(table.num_rows), pa.int64()))


def _sorted_rows(table: pa.Table) -> pa.Array:
    rows = table.column(_ORDER)
    return pc.take(rows, pc.sort_indices(rows))


def _read_merged(
    spec: TaskRead,
    store: ObjectStore,
    full: StateHandle,
    changelogs: Sequence[StateHandle],
    wanted: KeyGroupRange,
) -> Iterator[pa.RecordBatch]:
    """A full file with its changelogs applied, streamed by key group: every file is
    sorted by key group and a key's rows all carry its group, so the full file's rows
    are taken in runs of whole key groups and each run is merged with the changes of
    its groups alone (its rows of changed keys dropped, the changed keys' newest rows
    added). Memory holds one run and its changes, not a subtask's: after a changelog
    that rewrote most of a large state, holding every change of the subtask made a
    read's workers the largest processes of an epoch (docs/benchmarks.md)."""
    cursors = [
        _LayerCursor(
            functools.partial(_raw_tables, spec, store, handle, wanted, CHANGELOG_COLUMNS), handle
        )
        for handle in changelogs
    ]
    try:
        # The rows of the last key group seen, which the next table may continue.
        carry: list[pa.Table] = []
        carried = -1
        for table in _raw_tables(spec, store, full, wanted):
            groups = _groups(table)
            last = _in_order(full, groups, carried)
            cut = int(np.searchsorted(groups, last, "left"))
            if not cut and carried == last:
                carry.append(table)
                continue
            # Every group before `last` is whole: the carry's, and the table's up to cut.
            ready = pa.concat_tables([*carry, table.slice(0, cut)])
            yield from _merged_run(spec, ready, cursors, last - 1)
            carry, carried = [table.slice(cut)], last
        rest = pa.concat_tables(carry) if carry else None
        yield from _merged_run(spec, rest, cursors, wanted.end)
    finally:
        for cursor in cursors:
            cursor.close()


def _merged_run(
    spec: TaskRead, rows: pa.Table | None, cursors: Sequence[_LayerCursor], through: int
) -> Iterator[pa.RecordBatch]:
    """`rows` (whole key groups of the full file, up to `through`) merged with the
    changes of every key group up to `through` not merged yet."""
    changes = _latest_changes(spec, [t for cursor in cursors for t in cursor.through(through)])
    if changes is None:
        if rows is not None:
            yield from _shaped(spec, rows)
        return
    if rows is not None and rows.num_rows:
        keys = list(spec.key_columns)
        keyed = rows.select(keys)
        changed = _as_spark_compares(changes.select(keys).cast(keyed.schema), keys)
        unchanged = _numbered(_as_spark_compares(keyed, keys)).join(
            changed, keys, join_type="left anti", use_threads=False
        )
        yield from _shaped(spec, rows.take(_sorted_rows(unchanged)))
    standing = changes.filter(pc.equal(changes.column(CHANGE_COLUMN), CHANGE_ROW))
    yield from _shaped(spec, standing.drop_columns(list(CHANGELOG_COLUMNS)))


def _batch_rows(spec: TaskRead, meta: pq.FileMetaData) -> int:
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


def _shape(spec: TaskRead, batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch in exactly the Arrow schema Spark was promised."""
    rows = batch if spec.verdict is None else _migrated(spec.verdict, batch)
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
            columns.append(rows.column(out.name).cast(out.type))
    return pa.RecordBatch.from_arrays(columns, schema=spec.out_schema)


def _migrated(verdict: SchemaVerdict, batch: pa.RecordBatch) -> pa.RecordBatch:
    """Stored rows in the declared schema. The file's types are first cast to the
    verdict's stored ones, which may differ only as Spark's arrow types do (string or
    large_string, a timestamp's zone): the rule's casts start from the stored types."""
    stored = verdict.stored
    fields = [stored.field(f.name) if f.name in stored.names else f for f in batch.schema]
    arrays = [
        column if column.type == f.type else column.cast(f.type)
        for column, f in zip(batch.columns, fields, strict=True)
    ]
    return migrate_batch(pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields)), verdict)


def read_row(
    spec: TaskRead, store: ObjectStore, row: Mapping[str, Any]
) -> Iterator[pa.RecordBatch]:
    """One task's share of a read: a full file (its `handle`), the key groups `lo`..`hi`
    of it, and the `changelogs` over them, as the driver planned it (a row of
    state_reader's task table, or a partition of the batchpoint data source)."""
    handle = StateHandle.from_json(json.loads(row["handle"]))
    wanted = KeyGroupRange(row["lo"], row["hi"])
    changelogs = [StateHandle.from_json(h) for h in json.loads(row["changelogs"])]
    if changelogs:
        yield from _read_merged(spec, store, handle, changelogs, wanted)
    else:
        yield from _read_one(spec, store, handle, wanted)


@releasing
def read_task(spec: TaskRead, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    store = spec.store.open()
    for batch in batches:
        for row in batch.to_pylist():
            yield from read_row(spec, store, row)


def file_schema(store: ObjectStore, handle: StateHandle) -> pa.Schema:
    """A state file's Arrow schema, from its footer (read where the store is at hand)."""
    with fetched(store, handle, verify=False) as source:
        return pq.ParquetFile(source).schema_arrow


def footer_task(store: ShippedStore, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    opened = store.open()
    for batch in batches:
        for row in batch.to_pylist():
            handle = StateHandle.from_json(json.loads(row["handle"]))
            schema = file_schema(opened, handle)
            yield pa.RecordBatch.from_pydict(
                {"schema": [schema.serialize().to_pybytes()]},
                schema=pa.schema([pa.field("schema", pa.binary())]),
            )
