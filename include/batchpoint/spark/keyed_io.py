"""What the operator runner needs from Spark, on top of state_io: keyed streams (state,
channels to downstream operators, staged sink output) written per subtask and read back,
and a source epoch read by executors. Everything here moves bytes inside Spark tasks."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from batchpoint.protocol.checkpoint import FileHandle
from batchpoint.sources.files import SourceSplit
from batchpoint.sources.split_packing import pack_splits
from batchpoint.spark.aligned_writes import units
from batchpoint.spark.compat import from_arrow_schema
from batchpoint.spark.remote import for_workers
from batchpoint.spark.state_reader import ReadSpec, read_keyed_state
from batchpoint.spark.state_writer import (
    SubtaskHooks,
    WriteSpec,
    write_empty_keyed_state,
    write_keyed_state,
)
from batchpoint.spark.stream_writer import write_streams
from batchpoint.spark.task_rows import task_rows, task_slots
from batchpoint.spark.worker_memory import releasing
from batchpoint.state.evolution import SchemaVerdict
from batchpoint.state.format import StateHandle
from batchpoint.storage import StoreRef
from batchpoint.storage.request_count import RequestLedger


class FileSourceDecl(Protocol):
    """What read_source needs of a declared file source (runtime.api.SourceDef is one).
    A protocol, so that spark/ depends on no layer above it."""

    @property
    def root(self) -> str: ...

    @property
    def format(self) -> str: ...

    @property
    def schema(self) -> pa.Schema: ...

    def files(self, default: StoreRef, *, with_schema: bool = False) -> Any: ...


def spark_schema(schema: pa.Schema):
    # Nullability is a data-quality rule (checked by sources and gates), not a reason
    # to refuse a DataFrame whose plan cannot prove it.
    return from_arrow_schema(pa.schema([f.with_nullable(True) for f in schema]))


def empty(spark: SparkSession, schema: pa.Schema | T.StructType) -> DataFrame:
    """No rows, as a plan Spark's optimizer knows is empty (`limit(0)`: an empty local
    relation), so that what a function derives from it is known empty without a job."""
    struct = schema if isinstance(schema, T.StructType) else spark_schema(schema)
    return spark.createDataFrame([], struct).limit(0)


def _to_file_handle(handle: StateHandle) -> FileHandle:
    body = handle.to_json()
    return FileHandle.from_json(body, handle.path)


def write_keyed(
    df: DataFrame, store_ref: StoreRef, spec: WriteSpec, requests: RequestLedger | None = None
) -> dict[int, list[FileHandle]]:
    """Write `df` partitioned by key group for `spec.parallelism` subtasks; every subtask
    gets at least one file. Returns the handles per subtask; `requests` gets each
    subtask's storage requests. Rows Spark already holds by subtask (an aggregation by
    the key) are written where they sit (spark/aligned_writes.py)."""
    in_place = units(df, spec)
    if in_place is not None:
        (handles,) = write_streams([(df, spec)], store_ref, requests, [in_place])
    else:
        handles = write_keyed_state(df, store_ref, spec, requests)
    return _by_subtask(handles, spec.parallelism)


def write_keyed_streams(
    frames: Sequence[tuple[DataFrame, WriteSpec]],
    store_ref: StoreRef,
    requests: RequestLedger | None = None,
) -> list[dict[int, list[FileHandle]]]:
    """write_keyed of each (rows, spec), all in one Spark action (spark/stream_writer):
    each stream's handles per subtask, in `frames`' order."""
    written = write_streams(frames, store_ref, requests)
    return [
        _by_subtask(handles, spec.parallelism)
        for handles, (_, spec) in zip(written, frames, strict=True)
    ]


def write_empty(
    schema: T.StructType,
    store_ref: StoreRef,
    spec: WriteSpec,
    requests: RequestLedger | None = None,
) -> dict[int, list[FileHandle]]:
    """write_keyed of no rows: each subtask's empty files, written without Spark."""
    handles = write_empty_keyed_state(schema, store_ref, spec, requests)
    return _by_subtask(handles, spec.parallelism)


def _by_subtask(handles: list[StateHandle], parallelism: int) -> dict[int, list[FileHandle]]:
    out: dict[int, list[FileHandle]] = {i: [] for i in range(parallelism)}
    for handle in handles:
        out[handle.subtask].append(_to_file_handle(handle))
    return out


def read_channel(
    spark: SparkSession, store_ref: StoreRef, files: Sequence[FileHandle]
) -> DataFrame:
    """A channel's rows; a channel its handles say holds none is an empty plan, read by
    no Spark task (what lets a consumer know it has nothing to do)."""
    handles = [StateHandle.coerce(f) for f in files]
    if handles and all(h.rows == 0 for h in handles) and handles[0].spark_schema:
        return empty(spark, T.StructType.fromJson(json.loads(handles[0].spark_schema)))
    return read_keyed(spark, store_ref, files)


def read_keyed(
    spark: SparkSession,
    store_ref: StoreRef,
    files: Sequence[FileHandle],
    schema: pa.Schema | None = None,
    what: str = "",
    *,
    verdict: SchemaVerdict | None = None,
) -> DataFrame:
    """Every row of the files (one keyed stream), read by executors. With a `verdict`
    (state schema evolution), files of its stored schema read as its declared one."""
    if verdict is not None:
        schema = verdict.declared
    if not files:
        if schema is None:
            raise ValueError(f"no files to read for {what or 'a stream'} and no schema")
        return empty(spark, schema)
    handles = [StateHandle.coerce(f) for f in files]
    if verdict is not None:
        return read_keyed_state(spark, store_ref, handles, ReadSpec(verdict=verdict))
    struct = spark_schema(schema) if schema is not None else None
    return read_keyed_state(spark, store_ref, handles, ReadSpec(schema=struct))


# -- sources ------------------------------------------------------------------------------


@releasing
def _read_splits_task(
    store_ref: StoreRef, source: FileSourceDecl, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    files = source.files(store_ref, with_schema=True)
    target = pa.schema([f.with_nullable(True) for f in source.schema])
    for batch in batches:
        for text in batch.column("splits").to_pylist():
            for split in json.loads(text):
                table = files.read_split(SourceSplit.from_json(split))
                yield from table.cast(target).to_batches(max_chunksize=10_000)


def read_source(
    spark: SparkSession, store_ref: StoreRef, source: FileSourceDecl, splits: Sequence[SourceSplit]
) -> DataFrame:
    """This epoch's input of a source: its files packed into Spark tasks as Spark packs
    its own file scans (sources/split_packing), in their order."""
    if not splits:
        return empty(spark, source.schema)
    runs = pack_splits(splits, task_slots(spark))
    rows = [(i, json.dumps([s.to_json() for s in run])) for i, run in enumerate(runs)]
    tasks = task_rows(spark, rows, "idx int, splits string")
    reader = functools.partial(_read_splits_task, for_workers(store_ref), source)
    return tasks.mapInArrow(reader, spark_schema(source.schema))


__all__ = [
    "FileSourceDecl",
    "SubtaskHooks",
    "WriteSpec",
    "empty",
    "read_channel",
    "read_keyed",
    "read_source",
    "spark_schema",
    "write_empty",
    "write_keyed",
    "write_keyed_streams",
]
