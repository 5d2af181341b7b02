"""Every stream of an operator's snapshot (its states, full or as a changelog layer, and
its channels) written by one Spark action, in one pass over the rows.

Each stream's frame gets its own `_key_group` and `_subtask` (its own key columns and
max parallelism), then all are brought to one shape: `_stream` (the stream's index),
`_subtask`, `_key_group`, and one struct column per stream holding its columns (null in
the other streams' rows). One `repartitionById` by subtask and one sort by (stream, key
group) put subtask i's rows of every stream in partition i, stream after stream, each
sorted by key group; the task splits its batches by stream and feeds each stream's rows,
flattened back to its own columns, to that stream's `_SubtaskWriter`. The files and
handles are exactly those of one `write_keyed_state` per stream.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
from collections.abc import Iterator, Sequence
from functools import reduce
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from batchpoint.spark.aligned_writes import runs, units
from batchpoint.spark.compat import repartition_by_id
from batchpoint.spark.key_groups import key_group_column, subtask_column
from batchpoint.spark.shipping import StoreLike, driver_store
from batchpoint.spark.state_writer import WriteSpec, _task_write, completed_handles
from batchpoint.spark.subtask_writer import _SubtaskWriter, _TaskWrite
from batchpoint.spark.worker_memory import releasing
from batchpoint.spark.write_requests import report_requests, requests_column
from batchpoint.state.format import (
    KEY_GROUP_COLUMN,
    SUBTASK_COLUMN,
    StateCoverageError,
    StateError,
    StateHandle,
)
from batchpoint.state.keygroups import KeyGroupRange
from batchpoint.storage.request_count import CountingStore, RequestCount, RequestLedger

log = logging.getLogger(__name__)

STREAM_COLUMN = "_stream"

_HANDLE_SCHEMA = "stream int, handle string, requests string"
_HANDLE_ARROW = pa.schema(
    [
        pa.field("stream", pa.int32()),
        pa.field("handle", pa.string()),
        pa.field("requests", pa.string()),
    ]
)


def _struct_column(index: int) -> str:
    return f"_s{index}"


def _common_shape(frames: Sequence[tuple[DataFrame, WriteSpec]]) -> DataFrame:
    """The union of every stream's rows, each with its own key group and subtask."""
    # the frames' own method: a Connect frame is no subclass of the classic one
    return reduce(lambda left, right: left.unionByName(right), _shaped(frames))


def _shaped(frames: Sequence[tuple[DataFrame, WriteSpec]]) -> list[DataFrame]:
    """Each stream's rows in the common shape, with its own key group and subtask."""
    structs = [T.StructType(df.schema.fields) for df, _ in frames]
    shaped = []
    for i, (df, spec) in enumerate(frames):
        own = F.struct(*[F.col(f"`{c}`") for c in df.columns])
        keyed = df.withColumn(
            KEY_GROUP_COLUMN, key_group_column(spec.key_columns, spec.max_parallelism, df.schema)
        ).withColumn(
            SUBTASK_COLUMN,
            subtask_column(KEY_GROUP_COLUMN, spec.max_parallelism, spec.parallelism),
        )
        shaped.append(
            keyed.select(
                F.lit(i).cast(T.IntegerType()).alias(STREAM_COLUMN),
                F.col(SUBTASK_COLUMN),
                F.col(KEY_GROUP_COLUMN),
                *[
                    (own if j == i else F.lit(None).cast(struct)).alias(_struct_column(j))
                    for j, struct in enumerate(structs)
                ],
            )
        )
    return shaped


def _stream_rows(batch: pa.RecordBatch, index: int) -> pa.RecordBatch:
    """Stream `index`'s rows of `batch` (all of them its own) as its own columns."""
    struct = batch.column(_struct_column(index))
    fields = [struct.type.field(k) for k in range(struct.type.num_fields)]
    columns = struct.flatten()
    return pa.RecordBatch.from_arrays(
        [*columns, batch.column(KEY_GROUP_COLUMN)],
        names=[*[f.name for f in fields], KEY_GROUP_COLUMN],
    )


def _split(batch: pa.RecordBatch) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The runs of one stream's rows in `batch` (rows come sorted by stream)."""
    streams = batch.column(STREAM_COLUMN).to_numpy(zero_copy_only=False)
    if len(streams) == 0:
        return
    cuts = [0, *(np.flatnonzero(np.diff(streams)) + 1).tolist(), len(streams)]
    for start, end in itertools.pairwise(cuts):
        index = int(streams[start])
        yield index, _stream_rows(batch.slice(start, end - start), index)


@releasing
def _write_streams_task(
    tasks: Sequence[_TaskWrite], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The mapInArrow body: partition i is subtask i of every stream. Any failure
    removes every file this task attempt uploaded, of every stream (Spark retries the
    task, which writes them again under its own attempt id)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    assert ctx is not None
    subtask, task_attempt = ctx.partitionId(), f"t{ctx.taskAttemptId()}"
    writers: list[_SubtaskWriter] = []
    requests = RequestCount()
    try:
        for task in tasks:
            if task.spec.hooks.before is not None:
                task.spec.hooks.before(subtask)
            store = CountingStore(task.store.open(), requests)
            writers.append(_SubtaskWriter(task, store, subtask, task_attempt))
        last = -1
        for batch in batches:
            for index, rows in _split(batch):
                if index < last:
                    raise StateError(
                        f"subtask {subtask}: rows are not sorted by stream (the Spark plan "
                        "lost sortWithinPartitions)"
                    )
                last = index
                writers[index].write(rows)
        out: list[tuple[int, StateHandle]] = []
        for index, (task, writer) in enumerate(zip(tasks, writers, strict=True)):
            handles = writer.finish()
            if task.spec.hooks.after is not None:
                task.spec.hooks.after(subtask, task_attempt, handles)
            out += [(index, h) for h in handles]
    except BaseException:
        for writer in writers:
            writer.abort()
        raise
    for writer in writers:
        writer.cleanup()
    yield pa.RecordBatch.from_pydict(
        {
            "stream": [i for i, _ in out],
            "handle": [json.dumps(h.to_json()) for _, h in out],
            "requests": requests_column(requests, len(out)),
        },
        schema=_HANDLE_ARROW,
    )


@releasing
def _write_aligned_task(
    tasks: Sequence[_TaskWrite], counts: Sequence[int], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The mapInArrow body of an aligned pass: the partition holds whole units (stream i
    cut into `counts[i]` parts of its key groups) of one stream or several, each sorted
    by key group; each (stream, unit) run is written as `_write_streams_task` writes a
    subtask. Any failure removes every file this task attempt uploaded."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    assert ctx is not None
    attempt = f"t{ctx.taskAttemptId()}"
    sizes = [t.spec.max_parallelism // n for t, n in zip(tasks, counts, strict=True)]
    writers: dict[tuple[int, int], _SubtaskWriter] = {}
    requests: dict[int, RequestCount] = {}
    out: list[tuple[int, StateHandle]] = []
    current: tuple[int, int] | None = None
    try:
        for batch in batches:
            for pair, rows in runs(batch, STREAM_COLUMN, sizes):
                if pair != current:
                    if current is not None:
                        out += _finished(tasks, current[0], writers[current], attempt)
                    if pair in writers:
                        raise StateError(
                            f"stream {pair[0]}: rows are not sorted by stream and key group "
                            "(the Spark plan lost sortWithinPartitions)"
                        )
                    current = pair
                    writers[pair] = _unit_writer(tasks, counts, pair, attempt, requests)
                writers[pair].write(_stream_rows(rows, pair[0]))
        if current is not None:
            out += _finished(tasks, current[0], writers[current], attempt)
    except BaseException:
        for writer in writers.values():
            writer.abort()
        raise
    for writer in writers.values():
        writer.cleanup()
    first = {h.subtask: n for n, (_, h) in reversed(list(enumerate(out)))}
    yield pa.RecordBatch.from_pydict(
        {
            "stream": [i for i, _ in out],
            "handle": [json.dumps(h.to_json()) for _, h in out],
            "requests": [
                json.dumps(requests[h.subtask].by_kind()) if first[h.subtask] == n else ""
                for n, (_, h) in enumerate(out)
            ],
        },
        schema=_HANDLE_ARROW,
    )


def _unit_writer(
    tasks: Sequence[_TaskWrite],
    counts: Sequence[int],
    pair: tuple[int, int],
    attempt: str,
    requests: dict[int, RequestCount],
) -> _SubtaskWriter:
    index, unit = pair
    task, count = tasks[index], counts[index]
    spec = task.spec
    subtask = unit * spec.parallelism // count
    size = spec.max_parallelism // count
    part = KeyGroupRange(unit * size, (unit + 1) * size - 1)
    if spec.hooks.before is not None:
        spec.hooks.before(subtask)
    store = CountingStore(task.store.open(), requests.setdefault(subtask, RequestCount()))
    whole = count == spec.parallelism
    return _SubtaskWriter(task, store, subtask, attempt, None if whole else part)


def _finished(
    tasks: Sequence[_TaskWrite], index: int, writer: _SubtaskWriter, attempt: str
) -> list[tuple[int, StateHandle]]:
    handles = writer.finish()
    after = tasks[index].spec.hooks.after
    if after is not None:
        after(writer.subtask, attempt, handles)
    return [(index, h) for h in handles]


def write_streams(
    frames: Sequence[tuple[DataFrame, WriteSpec]],
    store: StoreLike,
    requests: RequestLedger | None = None,
    in_place: Sequence[int | None] | None = None,
) -> list[list[StateHandle]]:
    """Write each (rows, spec) as write_keyed_state would, all in one Spark action; the
    handles per stream, in `frames`' order, each sorted by subtask and key group. Every
    spec has the same parallelism (one attempt's). `requests` gets each subtask's
    storage requests, over all its streams. A stream whose rows already sit by subtask
    (aligned_writes.py) is written where they are, with no shuffle; `in_place`: each
    stream's `aligned_writes.units`, when the caller has them already."""
    specs = [spec.checked() for _, spec in frames]
    if len({s.parallelism for s in specs}) != 1:
        raise StateError("the streams of one pass must share their parallelism")
    frames = [(df, spec) for (df, _), spec in zip(frames, specs, strict=True)]
    tasks = [_task_write(df.schema, store, spec) for df, spec in frames]
    if in_place is None:
        in_place = [units(df, spec) for df, spec in frames]
    if any(in_place):
        written = _aligned_pass(frames, tasks, in_place, requests)
        try:
            return _completed(tasks, written, requests)
        except StateCoverageError:
            # The plan did not keep each subtask in one partition after all: the files
            # overlap. Drop them and write through repartitionById.
            stray = [h.path for handles in written for h in handles]
            driver_store(store).delete_many(stray)
            log.warning(
                "the rows of %s did not sit by subtask as Spark's plan said: written again "
                "through repartitionById",
                ", ".join(s.stream for s in specs),
            )
    by_subtask = (
        repartition_by_id(_common_shape(frames), specs[0].parallelism, SUBTASK_COLUMN)
        .sortWithinPartitions(STREAM_COLUMN, KEY_GROUP_COLUMN)
        .drop(SUBTASK_COLUMN)
    )
    writer = functools.partial(_write_streams_task, tasks)
    rows = by_subtask.mapInArrow(writer, _HANDLE_SCHEMA).collect()
    return _completed(tasks, _handles_of(rows, len(frames), requests), requests)


def _aligned_pass(
    frames: Sequence[tuple[DataFrame, WriteSpec]],
    tasks: Sequence[_TaskWrite],
    in_place: Sequence[int | None],
    requests: RequestLedger | None,
) -> list[list[StateHandle]]:
    """The pass with the aligned streams left where they are and each other stream
    moved by subtask on its own; each task writes the (stream, unit) runs it holds."""
    parallelism = frames[0][1].parallelism
    shaped = [
        frame if here else repartition_by_id(frame, parallelism, SUBTASK_COLUMN)
        for frame, here in zip(_shaped(frames), in_place, strict=True)
    ]
    union = functools.reduce(lambda left, right: left.unionByName(right), shaped)
    counts = [here or parallelism for here in in_place]
    writer = functools.partial(_write_aligned_task, tasks, counts)
    rows = (
        union.sortWithinPartitions(STREAM_COLUMN, KEY_GROUP_COLUMN)
        .mapInArrow(writer, _HANDLE_SCHEMA)
        .collect()
    )
    return _handles_of(rows, len(frames), requests)


def _handles_of(
    rows: Sequence[Any], streams: int, requests: RequestLedger | None
) -> list[list[StateHandle]]:
    report_requests(requests, rows)
    written: list[list[StateHandle]] = [[] for _ in range(streams)]
    for row in rows:
        written[row.stream].append(StateHandle.from_json(json.loads(row.handle)))
    return written


def _completed(
    tasks: Sequence[_TaskWrite],
    written: Sequence[list[StateHandle]],
    requests: RequestLedger | None,
) -> list[list[StateHandle]]:
    return [
        completed_handles(task, list(handles), requests)
        for task, handles in zip(tasks, written, strict=True)
    ]
