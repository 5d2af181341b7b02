"""Snapshotting keyed state from Spark: every subtask's rows written by its own task.

``repartitionById`` puts subtask i's rows, sorted by key group, in partition i, so a
task knows its subtask from its partition id. It streams its rows as Arrow record
batches into local Parquet files that tile its key-group range, uploads them with the
store, and hands the driver only a small JSON handle per file.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from batchpoint.spark.compat import from_arrow_schema, repartition_by_id, to_arrow_schema
from batchpoint.spark.key_groups import check_key_columns, key_group_column, subtask_column
from batchpoint.spark.shipping import ShippedStore, StoreLike, driver_store, ship_store
from batchpoint.state.format import (
    CHANGE_COLUMN,
    CHANGE_ROW,
    CHANGELOG_COLUMNS,
    FORMAT_VERSION,
    KEY_GROUP_COLUMN,
    SUBTASK_COLUMN,
    StateError,
    StateFileWriter,
    StateHandle,
    check_written_handles,
    file_schema,
)
from batchpoint.state.keygroups import (
    KeyGroupRange,
    check_parallelism,
    key_group_range_for_subtask,
)
from batchpoint.state.keys import check_base_key, check_segment, state_file_key, subtask_prefix
from batchpoint.state.schemas import StateNotAsDeclared, schema_fingerprint
from batchpoint.storage import ObjectStore

DEFAULT_TARGET_FILE_BYTES = 128 << 20
DEFAULT_ROW_GROUP_BYTES = 8 << 20

_HANDLE_SCHEMA = "handle string"
_HANDLE_ARROW = pa.schema([pa.field("handle", pa.string())])

#: Called inside the task after a subtask's files are uploaded, with (subtask,
#: task_attempt, handles): where the protocol acks from the task itself.
SubtaskHook = Callable[[int, str, list[StateHandle]], None]


@dataclass(frozen=True)
class SubtaskHooks:
    """Calls inside a write's Spark tasks, shipped with them (so picklable): `before`
    with the subtask before it writes anything, `after` once its files are uploaded.
    Production writes have none; tests inject Spark task faults and pauses here."""

    before: Callable[[int], None] | None = None
    after: SubtaskHook | None = None


@dataclass(frozen=True)
class WriteSpec:
    """One keyed write: stream `stream` (a state, a channel, a sink's output) of
    `parallelism` subtasks over `max_parallelism` key groups of `key_columns`, written by
    attempt `attempt` under `base_key`. `layer` > 0 writes changelog `layer` (see
    `state_changelog`); `plain` files hold the user's columns only (no `_key_group`: a
    table format's data files). `declared`: a state's declared schema, which its files
    get exactly (nullability included: a null in a column declared not null fails the
    write, naming `what`), whatever Spark's schema of the rows says."""

    base_key: str
    stream: str
    attempt: str
    key_columns: tuple[str, ...]
    max_parallelism: int
    parallelism: int
    layer: int = 0
    plain: bool = False
    declared: pa.Schema | None = None
    what: str = ""
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES
    hooks: SubtaskHooks = field(default_factory=SubtaskHooks)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_columns", tuple(self.key_columns))

    def checked(self) -> WriteSpec:
        """The spec with its names checked and its base key normalised."""
        check_segment(self.stream, "state name")
        check_segment(self.attempt, "attempt id")
        check_parallelism(self.parallelism, self.max_parallelism, f"state '{self.stream}'")
        if self.plain and self.layer:
            raise StateError(f"state '{self.stream}': a changelog cannot be written plain")
        return replace(self, base_key=check_base_key(self.base_key))


@dataclass(frozen=True)
class _TaskWrite:
    """What each Spark task of a write gets: the spec, the store, and the file schema
    computed once on the driver."""

    spec: WriteSpec
    store: ShippedStore
    file_schema: pa.Schema
    fingerprint: str
    spark_schema: str
    required: tuple[str, ...] = ()  # state columns declared not null

    @property
    def stored_schema(self) -> pa.Schema:
        # Files without `_key_group` (a table sink's data files, which a table format adds
        # as they are: its schema is the user's columns only). The handles keep the ranges.
        if not self.spec.plain:
            return self.file_schema
        return self.file_schema.remove(self.file_schema.get_field_index(KEY_GROUP_COLUMN))


class _SubtaskWriter:
    """Writes one subtask's sorted rows as one or more files that tile its key-group
    range. A file is rolled only between two key groups, so ranges never overlap."""

    def __init__(self, task: _TaskWrite, store: ObjectStore, subtask: int, task_attempt: str):
        self.task = task
        self.spec = spec = task.spec
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
                    self._open().write(self._stored(batch.slice(0, cut)))
                    self._roll(end=int(groups[cut]) - 1)
                    batch, groups = batch.slice(cut), groups[cut:]
                    continue
            self._open().write(self._stored(batch))
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
        schema = self.task.file_schema
        columns = [batch.column(f.name).cast(f.type) for f in schema]
        self._check_required(batch)
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def _check_required(self, batch: pa.RecordBatch) -> None:
        """No null in a column the state declares not null (in a changelog, on the rows
        that hold a key's rows: a CHANGE_GONE row holds only its key)."""
        if not self.task.required:
            return
        rows = batch
        if self.spec.layer:
            rows = batch.filter(pc.equal(batch.column(CHANGE_COLUMN), CHANGE_ROW))
        for name in self.task.required:
            nulls = rows.column(name).null_count
            if nulls:
                raise StateNotAsDeclared(
                    f"{self.spec.what or self.spec.stream}: column '{name}' is declared not "
                    f"null, and the function set null in {nulls} row(s) (subtask "
                    f"{self.subtask}): fill it in the function, or declare it nullable"
                )

    def _stored(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if not self.spec.plain:
            return batch
        return batch.drop_columns([KEY_GROUP_COLUMN])

    def _check_order(self, groups: np.ndarray) -> None:
        low, high = int(groups[0]), int(groups[-1])
        if low < self._last_group or (len(groups) > 1 and bool(np.any(np.diff(groups) < 0))):
            raise StateError(
                f"state '{self.spec.stream}' subtask {self.subtask}: rows are not sorted "
                "by key group (the Spark plan lost sortWithinPartitions)"
            )
        if low not in self.range or high not in self.range:
            raise StateError(
                f"state '{self.spec.stream}': partition {self.subtask} got key groups "
                f"[{low}, {high}] outside its range {self.range} (the Spark plan did not keep "
                "repartitionById's partitioning)"
            )

    def _open(self) -> StateFileWriter:
        if self._file is None:
            part = len(self.handles)
            self._file = StateFileWriter(
                self._tmpdir / f"part-{part:05d}.parquet",
                self.task.stored_schema,
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
            spec.base_key, spec.stream, self.subtask, spec.attempt, len(self.handles),
            self.task_attempt,
        )  # fmt: skip
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
                name=spec.stream,
                schema_fingerprint=self.task.fingerprint,
                subtask=self.subtask,
                parallelism=spec.parallelism,
                max_parallelism=spec.max_parallelism,
                task_attempt=self.task_attempt,
                spark_schema=self.task.spark_schema,
                layer=spec.layer,
                net_rows=written.net_rows if spec.layer else None,
                key_columns=spec.key_columns if spec.layer else (),
            )
        )
        self._file_start = end + 1


def _write_subtask_files(
    task: _TaskWrite, subtask: int, task_attempt: str, batches: Iterable[pa.RecordBatch]
) -> list[StateHandle]:
    hooks = task.spec.hooks
    if hooks.before is not None:
        hooks.before(subtask)
    writer = _SubtaskWriter(task, task.store.open(), subtask, task_attempt)
    try:
        for batch in batches:
            writer.write(batch)
        handles = writer.finish()
        if hooks.after is not None:
            hooks.after(subtask, task_attempt, handles)
    except BaseException:
        writer.abort()
        raise
    writer.cleanup()
    return handles


def _write_task(task: _TaskWrite, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The mapInArrow body: partition i of the input is subtask i."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    assert ctx is not None
    handles = _write_subtask_files(task, ctx.partitionId(), f"t{ctx.taskAttemptId()}", batches)
    yield pa.RecordBatch.from_pydict(
        {"handle": [json.dumps(h.to_json()) for h in handles]}, schema=_HANDLE_ARROW
    )


def write_keyed_state(df: DataFrame, store: StoreLike, spec: WriteSpec) -> list[StateHandle]:
    """Snapshot `df` as keyed state: one Spark task per subtask, each writing files under
    ``<base_key>/<hh>/<stream>/subtask-<i>/<attempt>/`` (`state.keys`). Returns the
    handles, sorted by subtask and key group; together they cover key groups
    0..max_parallelism-1 once.

    `spec.attempt` must differ between runs that may overlap (an Airflow retry, another
    checkpoint); Spark task retries and speculative copies inside one run are told apart
    by the Spark task attempt id in the file name. A changelog (`spec.layer` > 0) needs
    `df` to have the CHANGELOG_COLUMNS.
    """
    spec = spec.checked()
    schema = df.schema
    task = _task_write(schema, store, spec)
    key_group = key_group_column(spec.key_columns, spec.max_parallelism, schema)
    by_subtask = df.withColumn(KEY_GROUP_COLUMN, key_group).withColumn(
        SUBTASK_COLUMN, subtask_column(KEY_GROUP_COLUMN, spec.max_parallelism, spec.parallelism)
    )
    by_subtask = (
        repartition_by_id(by_subtask, spec.parallelism, SUBTASK_COLUMN)
        .sortWithinPartitions(KEY_GROUP_COLUMN)
        .drop(SUBTASK_COLUMN)
    )
    rows = by_subtask.mapInArrow(functools.partial(_write_task, task), _HANDLE_SCHEMA).collect()
    return completed_handles(task, [StateHandle.from_json(json.loads(r.handle)) for r in rows])


def write_empty_keyed_state(
    schema: T.StructType, store: StoreLike, spec: WriteSpec
) -> list[StateHandle]:
    """What write_keyed_state writes for rows known to be none (an operator with
    nothing to do): every subtask's empty files, written here, without a Spark job."""
    spec = spec.checked()
    return completed_handles(_task_write(schema, store, spec), [])


def _task_write(schema: T.StructType, store: StoreLike, spec: WriteSpec) -> _TaskWrite:
    """The file schema (with the header every file carries) of rows of `schema` written
    by `spec`."""
    changelog = frozenset(CHANGELOG_COLUMNS) if spec.layer else frozenset()
    check_key_columns(schema, spec.key_columns, spec.stream, changelog)
    if spec.layer and not set(CHANGELOG_COLUMNS) <= set(schema.fieldNames()):
        raise StateError(f"state '{spec.stream}': a changelog needs columns {CHANGELOG_COLUMNS}")
    state_struct = T.StructType([f for f in schema.fields if f.name not in CHANGELOG_COLUMNS])
    state_schema = to_arrow_schema(schema, timezone="UTC")
    required: tuple[str, ...] = ()
    if spec.declared is not None:
        # The rows were conformed to the declaration (runtime/state_conform): the files
        # get it exactly, and the fingerprint says so, nullability included.
        state_schema = pa.schema(list(spec.declared))
        state_struct = from_arrow_schema(state_schema)
        required = tuple(f.name for f in state_schema if not f.nullable)
    fingerprint = schema_fingerprint(state_schema)
    header = {
        "format": FORMAT_VERSION,
        "state": spec.stream,
        "key_columns": list(spec.key_columns),
        "max_parallelism": spec.max_parallelism,
        "parallelism": spec.parallelism,
        "schema_fingerprint": fingerprint,
        **({"layer": spec.layer} if spec.layer else {}),
        **({"plain": True} if spec.plain else {}),
    }
    return _TaskWrite(
        spec=spec,
        store=ship_store(store),
        file_schema=file_schema(state_schema, header),
        fingerprint=fingerprint,
        spark_schema=state_struct.json(),
        required=required,
    )


def completed_handles(task: _TaskWrite, handles: list[StateHandle]) -> list[StateHandle]:
    """The handles Spark's tasks returned for a write, with the files of any subtask no
    task ran (written here), sorted by subtask and key group, and checked to cover every
    key group once."""
    handles = handles + _write_missing_subtasks(task, {h.subtask for h in handles})
    handles.sort(key=lambda h: (h.subtask, h.key_group_range.start))
    spec = task.spec
    check_written_handles(handles, spec.parallelism, spec.max_parallelism, spec.stream)
    return handles


def _write_missing_subtasks(task: _TaskWrite, seen: set[int]) -> list[StateHandle]:
    """Adaptive execution replaces an entirely empty input with an empty relation and
    runs no task at all; the driver then writes the (tiny, empty) files itself."""
    handles: list[StateHandle] = []
    for subtask in sorted(set(range(task.spec.parallelism)) - seen):
        handles += _write_subtask_files(task, subtask, "driver", [])
    return handles


def unreferenced_files(
    store: StoreLike, spec: WriteSpec, handles: Iterable[StateHandle]
) -> list[str]:
    """Files the write of `spec` left behind that no handle names: from failed or
    speculative Spark task attempts. The caller decides when deleting them is safe.
    Only the spread layout is listed: every task of one write runs this code, so no file
    of `spec.attempt` sits in a folder of the layout before issue 42."""
    referenced = {h.path for h in handles}
    target = driver_store(store)
    found = []
    for subtask in range(spec.parallelism):
        prefix = subtask_prefix(spec.base_key, spec.stream, subtask, spec.attempt)
        found += [o.key for o in target.list(prefix) if o.key not in referenced]
    return found
