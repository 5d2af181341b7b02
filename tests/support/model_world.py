"""The model's pipeline and what its tasks compute, without Spark.

Pipeline `model`: a file source `events` with partitions p0 and p1 (JSON lines
``{"v": n}``), a keyed operator `total` (parallelism 2, subtask i owns partition pi)
whose state is the running sum of its partition, an append sink `log` (every record of
the epoch, one line each) and a snapshot sink `sums` (the running sums after the epoch,
one Parquet row per partition) that is also the Iceberg table `model.sums` of the
catalog `model`, or in a Delta schedule the Delta table `model.sums` under the store's
tables/ (synced after every publish and restore, expired by GC).

Tasks read their input between the base checkpoint's barrier and their own, and their
state from the base checkpoint's files (invariant 4): so a lost, damaged or wrong base
shows up in the numbers, which the checker recomputes from the source files alone.
"""

from __future__ import annotations

import hashlib
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq

from batchpoint.errors import CheckpointNotFound
from batchpoint.protocol.checkpoint import (
    CheckpointStatus,
    FileHandle,
    PendingCheckpoint,
    TaskAcknowledgeResult,
)
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId
from batchpoint.runtime.api import OperatorContext, Pipeline, SinkMode
from batchpoint.sources.files import PartitionedFileSource
from batchpoint.storage.base import ObjectStore

PIPELINE = "model"
SOURCE = "events"
SOURCE_ROOT = "sources/model"
PARTITIONS = ("p0", "p1")
STATE_STREAM = "state-sums"
TABLE = "model.sums"
TABLE_CATALOG = "model"
SUMS_SCHEMA = pa.schema([("p", pa.string()), ("sum", pa.int64())])


def _no_spark(ctx: OperatorContext) -> None:  # the model's tasks compute in Python
    raise NotImplementedError


def build_model_pipeline(table_format: str = "iceberg") -> Pipeline:
    pipeline = Pipeline(PIPELINE, max_parallelism=8)
    pipeline.source(SOURCE, root=SOURCE_ROOT, schema=pa.schema([("v", pa.int64())]))
    pipeline.operator(
        "total",
        inputs=[SOURCE],
        key=["p"],
        states={"sums": pa.schema([("p", pa.string()), ("sum", pa.int64())])},
        parallelism=len(PARTITIONS),
    )(_no_spark)
    pipeline.sink("log", inputs=["total"], key=["line"], mode=SinkMode.APPEND)
    pipeline.sink(
        "sums", inputs=["total"], key=["p"], mode=SinkMode.SNAPSHOT, table=TABLE,
        catalog=TABLE_CATALOG, table_format=table_format,
    )  # fmt: skip
    return pipeline


def sums_file(sums: list[int]) -> bytes:
    """The `sums` sink's output: one row per partition, as Parquet (a table's data file)."""
    buffer = io.BytesIO()
    pq.write_table(pa.table({"p": list(PARTITIONS), "sum": sums}, schema=SUMS_SCHEMA), buffer)
    return buffer.getvalue()


def write_source_file(store: ObjectStore, index: int, partition: str, values: list[int]) -> str:
    """Append one file to a partition (names sort in the order they are written)."""
    key = f"{SOURCE_ROOT}/{partition}/f{index:06d}.jsonl"
    store.put(key, "".join(json.dumps({"v": v}) + "\n" for v in values).encode())
    return key


class BaseNotReady(Exception):
    """The base checkpoint is still pending: a task of a chained checkpoint waits."""


class BaseAborted(Exception):
    """The base checkpoint will never complete: the task declines."""


def _base_sums(c: CheckpointCoordinator, pending: PendingCheckpoint) -> list[int]:
    if pending.base_checkpoint_id is None:
        return [0] * len(PARTITIONS)
    try:
        base = c.completed.get(pending.base_checkpoint_id)
    except CheckpointNotFound:
        outcome = c.get_outcome(pending.base_checkpoint_id)
        if outcome is None and c.get_pending(pending.base_checkpoint_id) is not None:
            raise BaseNotReady(pending.base_checkpoint_id) from None
        raise BaseAborted(pending.base_checkpoint_id) from None
    sums = []
    for i in range(len(PARTITIONS)):
        ack = base.ack_for(TaskId("total", i))
        assert ack is not None, f"base {base.checkpoint_id} has no ack of total#{i}"
        handle = next(h for h in ack.handles if h.name == STATE_STREAM)
        sums.append(int(c.store.get(handle.path).data.decode()))
    return sums


def _epoch_records(c: CheckpointCoordinator, pending: PendingCheckpoint) -> list[tuple[str, str]]:
    """(partition, line) for every record the epoch reads, in source order."""
    source = PartitionedFileSource(c.store, SOURCE_ROOT, "jsonl")
    splits = source.files_between(pending.base_barrier.get(SOURCE), pending.barrier[SOURCE])
    out = []
    for split in splits:
        text = c.store.get(split.key).data.decode()
        name = split.key.rsplit("/", 1)[-1]
        for i, line in enumerate(text.splitlines()):
            out.append((split.partition, f"{split.partition}/{name}#{i}:{json.loads(line)['v']}"))
    return out


def task_output(c: CheckpointCoordinator, pending: PendingCheckpoint, task: TaskId) -> bytes:
    """What `task` writes for this epoch (state or staged sink output)."""
    operator, subtask = task.operator, task.subtask
    sums = _base_sums(c, pending)
    records = _epoch_records(c, pending)
    for partition, line in records:
        sums[PARTITIONS.index(partition)] += int(line.rsplit(":", 1)[1])
    if operator == "total":
        return str(sums[subtask]).encode()
    if operator == "log":
        return "".join(line + "\n" for _, line in records).encode()
    if operator == "sums":
        return sums_file(sums)
    raise ValueError(f"the model has no task {task}")


def stream_of(task: TaskId) -> str:
    return STATE_STREAM if task.operator == "total" else "sink"


def write_task_file(
    c: CheckpointCoordinator, pending: PendingCheckpoint, task: TaskId, attempt: str
) -> FileHandle:
    data = task_output(c, pending, task)
    stream = stream_of(task)
    key = c.layout.task_data_prefix(pending.checkpoint_id, task, attempt) + f"{stream}/part-0"
    c.store.put(key, data)
    digest = hashlib.sha256(data).hexdigest()
    rows = len(PARTITIONS) if task.operator == "sums" else data.count(b"\n") or 1
    return FileHandle(key, len(data), digest, rows, None, stream)


def run_task(
    c: CheckpointCoordinator, pending: PendingCheckpoint, task: TaskId, attempt: str
) -> TaskAcknowledgeResult:
    """One attempt of one task: compute, write, acknowledge (or decline if the base is
    gone). BaseNotReady propagates: the caller polls."""
    try:
        handle = write_task_file(c, pending, task, attempt)
    except BaseAborted as exc:
        c.decline(pending.checkpoint_id, task, attempt, f"base checkpoint {exc} will not complete")
        return TaskAcknowledgeResult.DISCARDED
    return c.acknowledge(pending.checkpoint_id, task, attempt, [handle])


def is_settled(c: CheckpointCoordinator, checkpoint_id: int) -> bool:
    outcome = c.get_outcome(checkpoint_id)
    return outcome is not None and outcome.status in (
        CheckpointStatus.COMPLETED,
        CheckpointStatus.ABORTED,
    )
