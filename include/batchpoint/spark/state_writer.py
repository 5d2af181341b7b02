"""Snapshotting keyed state from Spark: every subtask's rows written by its own task.

``repartitionById`` puts subtask i's rows, sorted by key group, in partition i, so a
task knows its subtask from its partition id. It streams its rows as Arrow record
batches into local Parquet files that tile its key-group range, uploads them with the
store, and hands the driver only a small JSON handle per file.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from batchpoint.spark.compat import from_arrow_schema, repartition_by_id, to_arrow_schema
from batchpoint.spark.key_groups import check_key_columns, key_group_column, subtask_column
from batchpoint.spark.shipping import StoreLike, driver_store, ship_store
from batchpoint.spark.subtask_writer import _SubtaskWriter, _TaskWrite
from batchpoint.spark.worker_memory import releasing
from batchpoint.spark.write_requests import report_requests, requests_column
from batchpoint.state.format import (
    CHANGELOG_COLUMNS,
    FORMAT_VERSION,
    KEY_GROUP_COLUMN,
    SUBTASK_COLUMN,
    StateError,
    StateHandle,
    check_written_handles,
    file_schema,
)
from batchpoint.state.keygroups import (
    KeyGroupRange,
    check_parallelism,
    key_group_range_for_subtask,
)
from batchpoint.state.keys import check_base_key, check_segment, subtask_prefix
from batchpoint.state.schemas import schema_fingerprint
from batchpoint.storage.request_count import CountingStore, RequestCount, RequestLedger

DEFAULT_TARGET_FILE_BYTES = 128 << 20
DEFAULT_ROW_GROUP_BYTES = 8 << 20

_HANDLE_SCHEMA = "handle string, requests string"
_HANDLE_ARROW = pa.schema([pa.field("handle", pa.string()), pa.field("requests", pa.string())])

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


def _write_subtask_files(
    task: _TaskWrite,
    subtask: int,
    task_attempt: str,
    batches: Iterable[pa.RecordBatch],
    requests: RequestCount,
) -> list[StateHandle]:
    hooks = task.spec.hooks
    if hooks.before is not None:
        hooks.before(subtask)
    store = CountingStore(task.store.open(), requests)
    writer = _SubtaskWriter(task, store, subtask, task_attempt)
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


@releasing
def _write_task(task: _TaskWrite, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The mapInArrow body: partition i of the input is subtask i."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    assert ctx is not None
    requests = RequestCount()
    handles = _write_subtask_files(
        task, ctx.partitionId(), f"t{ctx.taskAttemptId()}", batches, requests
    )
    yield pa.RecordBatch.from_pydict(
        {
            "handle": [json.dumps(h.to_json()) for h in handles],
            "requests": requests_column(requests, len(handles)),
        },
        schema=_HANDLE_ARROW,
    )


def write_keyed_state(
    df: DataFrame, store: StoreLike, spec: WriteSpec, requests: RequestLedger | None = None
) -> list[StateHandle]:
    """Snapshot `df` as keyed state: one Spark task per subtask, each writing files under
    ``<base_key>/<hh>/<stream>/subtask-<i>/<attempt>/`` (`state.keys`). Returns the
    handles, sorted by subtask and key group; together they cover key groups
    0..max_parallelism-1 once.

    `spec.attempt` must differ between runs that may overlap (an Airflow retry, another
    checkpoint); Spark task retries and speculative copies inside one run are told apart
    by the Spark task attempt id in the file name. A changelog (`spec.layer` > 0) needs
    `df` to have the CHANGELOG_COLUMNS. `requests` gets each subtask's storage requests.
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
    report_requests(requests, rows)
    handles = [StateHandle.from_json(json.loads(r.handle)) for r in rows]
    return completed_handles(task, handles, requests)


def write_empty_keyed_state(
    schema: T.StructType, store: StoreLike, spec: WriteSpec, requests: RequestLedger | None = None
) -> list[StateHandle]:
    """What write_keyed_state writes for rows known to be none (an operator with
    nothing to do): every subtask's empty files, written here, without a Spark job."""
    spec = spec.checked()
    return completed_handles(_task_write(schema, store, spec), [], requests)


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


def completed_handles(
    task: _TaskWrite, handles: list[StateHandle], requests: RequestLedger | None = None
) -> list[StateHandle]:
    """The handles Spark's tasks returned for a write, with the files of any subtask no
    task ran (written here), sorted by subtask and key group, and checked to cover every
    key group once."""
    handles = handles + _write_missing_subtasks(task, handles, requests)
    handles.sort(key=lambda h: (h.subtask, h.key_group_range.start))
    spec = task.spec
    check_written_handles(handles, spec.parallelism, spec.max_parallelism, spec.stream)
    return handles


def _write_missing_subtasks(
    task: _TaskWrite, written: list[StateHandle], ledger: RequestLedger | None
) -> list[StateHandle]:
    """Key groups no file covers: adaptive execution replaces an entirely empty input
    with an empty relation and runs no task at all, and an aligned write's task writes
    only the key groups it holds rows of. The driver writes their (tiny, empty) files."""
    handles: list[StateHandle] = []
    spec = task.spec
    for subtask in range(spec.parallelism):
        own = key_group_range_for_subtask(spec.max_parallelism, spec.parallelism, subtask)
        covered = sorted(h.key_group_range for h in written if h.subtask == subtask)
        for gap in _gaps(own, covered):
            requests = RequestCount()
            if gap == own:
                handles += _write_subtask_files(task, subtask, "driver", [], requests)
            else:
                store = CountingStore(task.store.open(), requests)
                writer = _SubtaskWriter(task, store, subtask, "driver", gap)
                handles += writer.finish()
                writer.cleanup()
            if ledger is not None:
                ledger.add(subtask, requests.by_kind())
    return handles


def _gaps(own: KeyGroupRange, covered: list[KeyGroupRange]) -> list[KeyGroupRange]:
    """The parts of `own` that no range of `covered` (sorted) reaches. Overlaps are left
    to the coverage check."""
    gaps, start = [], own.start
    for kgr in covered:
        if kgr.start > start:
            gaps.append(KeyGroupRange(start, kgr.start - 1))
        start = max(start, kgr.end + 1)
    if start <= own.end:
        gaps.append(KeyGroupRange(start, own.end))
    return gaps


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
        found += [o.key for o in target.list_sizes(prefix) if o.key not in referenced]
    return found
