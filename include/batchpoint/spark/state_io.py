"""Writing and reading keyed operator state from Spark, through the ObjectStore.

Spark here cannot reach S3 itself (no hadoop-aws), and the driver must never hold the
state, so every byte of state moves inside Spark tasks: a task streams its rows as
Arrow record batches into a local Parquet file, uploads it with the store, and hands
the driver only a small JSON handle per file. Reading is the mirror image: the driver
builds a one-row-per-file DataFrame of handles, and tasks download and stream the files.

Layout on write (Flink's key-group assignment, with the same hash as keygroups.py):
``_key_group`` is computed in Python by an Arrow UDF (Spark's own hash would differ
from the one restores and the rest of batchpoint use), the subtask follows from the key
group by plain integer arithmetic, and ``repartitionById`` puts subtask i's rows in
partition i, so a task knows its subtask from its partition id.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

from batchpoint.errors import ConfigError
from batchpoint.state.format import (
    FORMAT_VERSION,
    KEY_GROUP_COLUMN,
    RESERVED_COLUMNS,
    SUBTASK_COLUMN,
    StateError,
    StateFileCorrupt,
    StateFileWriter,
    StateHandle,
    StateSchemaMismatch,
    check_base_key,
    check_coverage,
    check_segment,
    check_written_handles,
    file_schema,
    file_sha256,
    read_header,
    schema_differences,
    schema_fingerprint,
    state_file_key,
    subtask_prefix,
)
from batchpoint.state.keygroups import (
    KeyGroupRange,
    assign_to_key_group,
    check_parallelism,
    key_group_range_for_subtask,
)
from batchpoint.storage import ObjectStore, StoreRef

log = logging.getLogger(__name__)

#: Files up to this size are read into memory with store.get instead of a temp file.
SMALL_FILE_BYTES = 8 << 20
DEFAULT_TARGET_FILE_BYTES = 128 << 20
DEFAULT_ROW_GROUP_BYTES = 8 << 20
DEFAULT_READ_BATCH_ROWS = 10_000
#: Read batches are cut to about this many (uncompressed) bytes: decoding a batch of
#: wide rows grows string buffers by doubling, so its peak is a few times this.
DEFAULT_READ_BATCH_BYTES = 4 << 20

#: Spark types whose Arrow -> Python values have a stable canonical encoding.
_KEY_TYPES = (
    T.ByteType,
    T.ShortType,
    T.IntegerType,
    T.LongType,
    T.StringType,
    T.BinaryType,
    T.BooleanType,
    T.DateType,
    T.DecimalType,
    T.FloatType,
    T.DoubleType,
)

_HANDLE_SCHEMA = "handle string"
_HANDLE_ARROW = pa.schema([pa.field("handle", pa.string())])

#: Called inside the task after a subtask's files are uploaded, with (subtask,
#: task_attempt, handles): where the protocol acks from the task itself.
SubtaskHook = Callable[[int, str, list[StateHandle]], None]


# --- getting the store onto executors --------------------------------------------------


StoreLike = ObjectStore | StoreRef | tuple[str, Mapping[str, str]]


@dataclass(frozen=True)
class _Shipped:
    """What travels to the executors: the store itself when it pickles, else a ref."""

    store: ObjectStore | None = None
    ref: StoreRef | None = None

    def open(self) -> ObjectStore:
        if self.store is not None:
            return self.store
        assert self.ref is not None
        return self.ref.open()


def _ship(store: StoreLike) -> _Shipped:
    if isinstance(store, StoreRef):
        return _Shipped(ref=store)
    if isinstance(store, tuple):
        uri, options = store
        return _Shipped(ref=StoreRef.of(uri, options))
    with contextlib.suppress(Exception):  # any pickling failure: send a ref instead
        pickle.dumps(store)
        return _Shipped(store=store)
    if store.uri.startswith("file:"):
        return _Shipped(ref=StoreRef.of(store.uri))  # a local store needs no options
    raise ConfigError(
        f"store {store.uri} cannot be sent to Spark executors: pass (uri, options) or a "
        "StoreRef so that executors can open it themselves"
    )


def _driver_store(store: StoreLike) -> ObjectStore:
    return store if isinstance(store, ObjectStore) else _ship(store).open()


# --- key groups in Spark ---------------------------------------------------------------


def _key_groups_of(arrays: Sequence[pa.Array], max_parallelism: int) -> pa.Array:
    columns = [a.to_pylist() for a in arrays]
    keys: Iterable[Any] = columns[0] if len(columns) == 1 else zip(*columns, strict=True)
    try:
        return pa.array([assign_to_key_group(k, max_parallelism) for k in keys], pa.int32())
    except ValueError as exc:
        raise StateError(
            f"cannot assign a key group: {exc} (keyed state needs non-null keys)"
        ) from None


def _key_group_function(max_parallelism: int) -> Callable[..., pa.Array]:
    # Type hints (not a functionType) are how pyspark 4.1+ wants Arrow UDFs declared.
    def key_groups(*arrays: pa.Array) -> pa.Array:
        return _key_groups_of(arrays, max_parallelism)

    return key_groups


def key_group_column(key_columns: Sequence[str], max_parallelism: int) -> Column:
    """`_key_group` as a Spark column, computed with batchpoint's stable key hash (the one
    `keygroups.assign_to_key_group` uses), not Spark's."""
    from pyspark.sql.functions import arrow_udf

    udf = arrow_udf(_key_group_function(max_parallelism), T.IntegerType())
    return udf(*[F.col(c) for c in key_columns])


def subtask_column(key_group: str, max_parallelism: int, parallelism: int) -> Column:
    """keygroups.subtask_for_key_group as a Spark expression: exact integer arithmetic
    (DIV on non-negative bigints is floor division)."""
    return F.expr(
        f"CAST((CAST(`{key_group}` AS BIGINT) * {parallelism}) DIV {max_parallelism} AS INT)"
    )


def _check_key_columns(schema: T.StructType, key_columns: Sequence[str], state: str) -> None:
    if not key_columns:
        raise StateError(f"state '{state}': give at least one key column")
    fields = {f.name: f for f in schema.fields}
    for name in key_columns:
        if name not in fields:
            raise StateError(
                f"state '{state}': key column '{name}' is not in the state "
                f"(columns: {', '.join(fields)})"
            )
        if not isinstance(fields[name].dataType, _KEY_TYPES):
            raise StateError(
                f"state '{state}': key column '{name}' has type "
                f"{fields[name].dataType.simpleString()}, which has no stable key hash: "
                "cast it to string, bigint or date"
            )
    reserved = sorted(RESERVED_COLUMNS & set(fields))
    if reserved:
        raise StateError(f"state '{state}': column names {reserved} are reserved by batchpoint")


# --- writing ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _WriteSpec:
    store: _Shipped
    base_key: str
    state_name: str
    attempt_id: str
    key_columns: tuple[str, ...]
    max_parallelism: int
    parallelism: int
    file_schema: pa.Schema
    fingerprint: str
    target_file_bytes: int
    row_group_bytes: int
    on_subtask_written: SubtaskHook | None = None


class _SubtaskWriter:
    """Writes one subtask's sorted rows as one or more files that tile its key-group
    range. A file is rolled only between two key groups, so ranges never overlap."""

    def __init__(self, spec: _WriteSpec, store: ObjectStore, subtask: int, task_attempt: str):
        self.spec = spec
        self.store = store
        self.subtask = subtask
        self.task_attempt = task_attempt
        self.range = key_group_range_for_subtask(spec.max_parallelism, spec.parallelism, subtask)
        self.handles: list[StateHandle] = []
        self._tmpdir = Path(tempfile.mkdtemp(prefix="bp-state-"))
        self._file: StateFileWriter | None = None
        self._file_start = self.range.start
        self._last_group = -1

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        batch = self._conform(batch)
        groups = batch.column(KEY_GROUP_COLUMN).to_numpy()
        self._check_order(groups)
        # Decide on rolling every row group's worth of rows, not only between Spark's
        # batches, so a file overshoots its target by at most one row group.
        step = max(1, self.spec.row_group_bytes * batch.num_rows // max(1, batch.nbytes))
        for offset in range(0, batch.num_rows, step):
            self._write_sorted(batch.slice(offset, step), groups[offset : offset + step])

    def _write_sorted(self, batch: pa.RecordBatch, groups: np.ndarray) -> None:
        while batch.num_rows:
            if self._file is not None and self._file.bytes_written >= self.spec.target_file_bytes:
                # Rows of the key group already in the file must stay with it.
                cut = int(np.searchsorted(groups, self._last_group, side="right"))
                if cut < len(groups):
                    self._open().write(batch.slice(0, cut))
                    self._roll(end=int(groups[cut]) - 1)
                    batch, groups = batch.slice(cut), groups[cut:]
                    continue
            self._open().write(batch)
            self._last_group = int(groups[-1])
            break

    def finish(self) -> list[StateHandle]:
        self._open()  # an empty subtask still writes a file: restores see its range covered
        self._roll(end=self.range.end)
        return self.handles

    def abort(self) -> None:
        # Best effort: a task killed outright leaves its files to the protocol's cleanup.
        if self._file is not None:
            with contextlib.suppress(Exception):
                self._file.abort()
        with contextlib.suppress(Exception):
            self.store.delete_many(h.path for h in self.handles)
        self.cleanup()

    def cleanup(self) -> None:
        shutil.rmtree(self._tmpdir, ignore_errors=True)

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        # Spark may send large_string or another time zone; every file of a state gets
        # exactly the schema computed once on the driver.
        schema = self.spec.file_schema
        columns = [batch.column(f.name).cast(f.type) for f in schema]
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def _check_order(self, groups: np.ndarray) -> None:
        low, high = int(groups[0]), int(groups[-1])
        if low < self._last_group or (len(groups) > 1 and bool(np.any(np.diff(groups) < 0))):
            raise StateError(
                f"state '{self.spec.state_name}' subtask {self.subtask}: rows are not sorted "
                "by key group (the Spark plan lost sortWithinPartitions)"
            )
        if low not in self.range or high not in self.range:
            raise StateError(
                f"state '{self.spec.state_name}': partition {self.subtask} got key groups "
                f"[{low}, {high}] outside its range {self.range} (the Spark plan did not keep "
                "repartitionById's partitioning)"
            )

    def _open(self) -> StateFileWriter:
        if self._file is None:
            part = len(self.handles)
            self._file = StateFileWriter(
                self._tmpdir / f"part-{part:05d}.parquet",
                self.spec.file_schema,
                row_group_bytes=self.spec.row_group_bytes,
            )
        return self._file

    def _roll(self, end: int) -> None:
        assert self._file is not None
        kgr = KeyGroupRange(self._file_start, end)
        written = self._file.close({"batchpoint.key_group_range": json.dumps(kgr.to_json())})
        self._file = None
        spec = self.spec
        key = state_file_key(
            spec.base_key,
            spec.state_name,
            self.subtask,
            spec.attempt_id,
            len(self.handles),
            self.task_attempt,
        )
        try:
            info = self.store.upload_file(key, written.local_path)
        finally:
            written.local_path.unlink(missing_ok=True)
        if info.size != written.size:
            raise StateError(f"state file '{key}': uploaded {info.size} bytes of {written.size}")
        self.handles.append(
            StateHandle(
                path=key,
                size=written.size,
                sha256=written.sha256,
                rows=written.rows,
                key_group_range=kgr,
                name=spec.state_name,
                schema_fingerprint=spec.fingerprint,
                subtask=self.subtask,
                parallelism=spec.parallelism,
                max_parallelism=spec.max_parallelism,
                task_attempt=self.task_attempt,
            )
        )
        self._file_start = end + 1


def _write_subtask_files(
    spec: _WriteSpec, subtask: int, task_attempt: str, batches: Iterable[pa.RecordBatch]
) -> list[StateHandle]:
    writer = _SubtaskWriter(spec, spec.store.open(), subtask, task_attempt)
    try:
        for batch in batches:
            writer.write(batch)
        handles = writer.finish()
        if spec.on_subtask_written is not None:
            spec.on_subtask_written(subtask, task_attempt, handles)
    except BaseException:
        writer.abort()
        raise
    writer.cleanup()
    return handles


def _write_task(spec: _WriteSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The mapInArrow body: partition i of the input is subtask i."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    assert ctx is not None
    handles = _write_subtask_files(spec, ctx.partitionId(), f"t{ctx.taskAttemptId()}", batches)
    yield pa.RecordBatch.from_pydict(
        {"handle": [json.dumps(h.to_json()) for h in handles]}, schema=_HANDLE_ARROW
    )


def write_keyed_state(
    df: DataFrame,
    store: StoreLike,
    base_key: str,
    state_name: str,
    key_columns: Sequence[str],
    max_parallelism: int,
    parallelism: int,
    attempt_id: str,
    *,
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES,
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    on_subtask_written: SubtaskHook | None = None,
) -> list[StateHandle]:
    """Snapshot `df` as keyed state: one Spark task per subtask, each writing files under
    ``<base_key>/<state_name>/subtask-<i>/<attempt_id>/``. Returns the handles, sorted by
    subtask and key group; together they cover key groups 0..max_parallelism-1 once.

    `attempt_id` must differ between runs that may overlap (an Airflow retry, another
    checkpoint); Spark task retries and speculative copies inside one run are told apart
    by the Spark task attempt id in the file name.
    """
    check_segment(state_name, "state name")
    check_segment(attempt_id, "attempt id")
    base_key = check_base_key(base_key)
    check_parallelism(parallelism, max_parallelism, f"state '{state_name}'")
    _check_key_columns(df.schema, key_columns, state_name)
    state_schema = to_arrow_schema(df.schema, timezone="UTC")
    fingerprint = schema_fingerprint(state_schema)
    header = {
        "format": FORMAT_VERSION,
        "state": state_name,
        "key_columns": list(key_columns),
        "max_parallelism": max_parallelism,
        "parallelism": parallelism,
        "schema_fingerprint": fingerprint,
    }
    spec = _WriteSpec(
        store=_ship(store),
        base_key=base_key,
        state_name=state_name,
        attempt_id=attempt_id,
        key_columns=tuple(key_columns),
        max_parallelism=max_parallelism,
        parallelism=parallelism,
        file_schema=file_schema(state_schema, header),
        fingerprint=fingerprint,
        target_file_bytes=target_file_bytes,
        row_group_bytes=row_group_bytes,
        on_subtask_written=on_subtask_written,
    )
    key_group = key_group_column(key_columns, max_parallelism)
    by_subtask = (
        df.withColumn(KEY_GROUP_COLUMN, key_group)
        .withColumn(
            SUBTASK_COLUMN,
            subtask_column(KEY_GROUP_COLUMN, max_parallelism, parallelism),
        )
        .repartitionById(parallelism, SUBTASK_COLUMN)
        .sortWithinPartitions(KEY_GROUP_COLUMN)
        .drop(SUBTASK_COLUMN)
    )
    rows = by_subtask.mapInArrow(functools.partial(_write_task, spec), _HANDLE_SCHEMA).collect()
    handles = [StateHandle.from_json(json.loads(r.handle)) for r in rows]
    handles += _write_missing_subtasks(spec, {h.subtask for h in handles})
    handles.sort(key=lambda h: (h.subtask, h.key_group_range.start))
    check_written_handles(handles, parallelism, max_parallelism, state_name)
    return handles


def _write_missing_subtasks(spec: _WriteSpec, seen: set[int]) -> list[StateHandle]:
    """Adaptive execution replaces an entirely empty input with an empty relation and
    runs no task at all; the driver then writes the (tiny, empty) files itself."""
    handles: list[StateHandle] = []
    for subtask in sorted(set(range(spec.parallelism)) - seen):
        handles += _write_subtask_files(spec, subtask, "driver", [])
    return handles


def unreferenced_files(
    store: StoreLike,
    base_key: str,
    state_name: str,
    attempt_id: str,
    handles: Iterable[StateHandle],
    parallelism: int,
) -> list[str]:
    """Files a write attempt left behind that no handle names: from failed or
    speculative Spark task attempts. The caller decides when deleting them is safe."""
    referenced = {h.path for h in handles}
    target = _driver_store(store)
    found = []
    for subtask in range(parallelism):
        prefix = subtask_prefix(base_key, state_name, subtask, attempt_id)
        found += [o.key for o in target.list(prefix) if o.key not in referenced]
    return found


# --- reading ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _ReadSpec:
    store: _Shipped
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
        columns = [*spec.state_columns, KEY_GROUP_COLUMN]
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
                    yield _shape(spec, batch)
            del table


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
            yield from _read_one(spec, store, handle, KeyGroupRange(row["lo"], row["hi"]))


def _footer_task(store: _Shipped, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
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
    row = tasks.mapInArrow(functools.partial(_footer_task, _ship(store)), "schema binary").first()
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
    chosen = check_coverage(chosen, wanted, f"state '{state}' key groups {wanted}")
    if schema is None:
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
    spec = _ReadSpec(
        store=_ship(store),
        out_schema=to_arrow_schema(out_struct, timezone=time_zone),
        state_columns=tuple(struct.fieldNames()),
        fingerprint=schema_fingerprint(requested),
        max_parallelism=max_par,
        new_parallelism=new_parallelism,
        subtask_column=subtask_col,
        verify=verify,
        requested=requested,
    )
    rows = [
        (i, json.dumps(h.to_json()), max(wanted.start, h.key_group_range.start),
         min(wanted.end, h.key_group_range.end))
        for i, h in enumerate(chosen)
    ]  # fmt: skip
    # One file per task: repartitionById places row i in partition i exactly.
    tasks = spark.createDataFrame(rows, "idx int, handle string, lo int, hi int")
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
    `schema` (a StructType or DDL string) must match the files' schema; None reads it
    from the first file. Each file's size and sha256 are checked against its handle.
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
