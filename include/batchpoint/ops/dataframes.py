"""A pipeline's state and sink outputs as Spark DataFrames, as of a checkpoint (Spark's
`statestore` reader is the model): for notebooks, checks and backfills.

    from batchpoint.ops.dataframes import read_sink, read_state
    read_state(spark, "payments", "balances", "balances", checkpoint=7).show()
    read_sink(spark, "payments", "balances_table").count()  # what readers see now

Storage comes from the BATCHPOINT_* settings unless `settings` is given. Executors read
the files, as the runtime does; nothing is written.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from batchpoint.errors import BatchpointError
from batchpoint.ops.pipelines import open_pipeline
from batchpoint.ops.sinks import find_sink, recorded_topologies
from batchpoint.ops.verify import nothing_to
from batchpoint.protocol.checkpoint import CompletedCheckpoint, FileHandle
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.protocol.sinks import visible_files
from batchpoint.protocol.state_names import StateName, find_state
from batchpoint.runtime.incremental import base_state_files
from batchpoint.settings import Settings
from batchpoint.state.format import RESERVED_COLUMNS
from batchpoint.storage import ObjectStore, StoreRef

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

Checkpoint = int | str  # an id, or "latest"


def resolve_checkpoint(coordinator: PipelineHistory, checkpoint: Checkpoint) -> int:
    """ "latest" is the head (what the next epoch builds on); an id must be completed
    and its records still kept."""
    if checkpoint == "latest":
        head = coordinator.head.get().checkpoint_id
        if head is None:
            raise BatchpointError(f"pipeline '{coordinator.pipeline}' has no checkpoint yet")
        return head
    if isinstance(checkpoint, str):
        if not checkpoint.isdigit():
            raise BatchpointError(f"checkpoint {checkpoint!r}: give an id or 'latest'")
        checkpoint = int(checkpoint)
    return checkpoint


def _completed(coordinator: PipelineHistory, checkpoint_id: int) -> CompletedCheckpoint:
    outcome = coordinator.get_outcome(checkpoint_id)
    if outcome is None or outcome.completed is None:
        state = "is not completed" if outcome is not None else "does not exist (or was pruned)"
        raise BatchpointError(
            f"checkpoint {checkpoint_id} of '{coordinator.pipeline}' {state}: "
            f"retained are {coordinator.completed.retained_ids() or 'none'}"
        )
    return outcome.completed


def find_state_at(
    coordinator: PipelineHistory, operator: str, state: str, checkpoint: Checkpoint
) -> tuple[CompletedCheckpoint, StateName]:
    """The checkpoint, and the state `operator`/`state` names in it: by uid, by name
    now, or by any name a kept checkpoint recorded (protocol/state_names.py)."""
    cid = resolve_checkpoint(coordinator, checkpoint)
    # Pending, aborted or discarded: refused here, in verify's words, before a reader
    # starts Spark on files that are not there (yet, ever, or any more).
    if (why := nothing_to(coordinator, cid, "read")) is not None:
        raise BatchpointError(why)
    completed = _completed(coordinator, cid)
    found = find_state(
        operator,
        state,
        completed.topology,
        checkpoint_id=cid,
        declared=coordinator.load_spec().operators,
        recorded=recorded_topologies(coordinator),
    )
    return completed, found


def state_files(
    coordinator: PipelineHistory, operator: str, state: str, checkpoint: Checkpoint
) -> tuple[int, list[FileHandle]]:
    """The files (every layer) of an operator's state at a checkpoint."""
    completed, found = find_state_at(coordinator, operator, state, checkpoint)
    return completed.checkpoint_id, found_state_files(completed, found)


def found_state_files(completed: CompletedCheckpoint, found: StateName) -> list[FileHandle]:
    # the files are named by identity: the checkpoint's uids
    files = base_state_files(completed, found.operator_uid, found.state_uid)
    if not files:
        raise BatchpointError(
            f"checkpoint {completed.checkpoint_id} holds no files of state {found.label}"
        )
    return files


def _open(pipeline: str, settings: Settings | None) -> tuple[CheckpointCoordinator, StoreRef]:
    settings = settings or Settings.from_env()
    return open_pipeline(settings, pipeline), settings.store_ref


def read_state(
    spark: SparkSession,
    pipeline: str,
    operator: str,
    state: str,
    checkpoint: Checkpoint = "latest",
    *,
    settings: Settings | None = None,
) -> DataFrame:
    """An operator's state as of a checkpoint, one row per stored row (changelog layers
    merged), with the state's columns."""
    coordinator, store_ref = _open(pipeline, settings)
    completed, found = find_state_at(coordinator, operator, state, checkpoint)
    return read_found_state(spark, store_ref, completed, found)


def read_found_state(
    spark: SparkSession, store_ref: StoreRef, completed: CompletedCheckpoint, found: StateName
) -> DataFrame:
    """The state `find_state_at` found, read by its uids as they are (looked up again by
    name, a uid could name another operator: a declared name outranks a recorded uid)."""
    from batchpoint.spark import keyed_io

    files = found_state_files(completed, found)
    return keyed_io.read_keyed(spark, store_ref, files, what=f"state {found.label}")


def sink_files(
    coordinator: PipelineHistory, sink: str, checkpoint: Checkpoint
) -> tuple[int | None, list[FileHandle]]:
    """The files a reader of the sink sees as of a published checkpoint ("latest": now);
    `sink` a uid, a name or an earlier name (ops/sinks.py::find_sink)."""
    ref = find_sink(coordinator, sink).ref
    manifest = coordinator.sinks.manifest(ref)
    if manifest is None or not manifest.epochs:  # a first publish creates it empty
        raise BatchpointError(
            f"sink '{ref.label}' of '{coordinator.pipeline}' has published nothing"
        )
    as_of = None if checkpoint == "latest" else resolve_checkpoint(coordinator, checkpoint)
    return as_of, visible_files(manifest, as_of)


def sink_struct(sink: str, files: list[FileHandle]) -> StructType:
    """The Spark schema of a sink's rows, as its files record it (reserved columns out)."""
    from pyspark.sql import types as T

    recorded = next((f.meta.get("spark_schema") for f in files if f.meta.get("spark_schema")), None)
    if recorded is None:
        raise BatchpointError(f"sink '{sink}': its files record no schema (nothing to read)")
    struct = T.StructType.fromJson(json.loads(recorded))
    return T.StructType([f for f in struct.fields if f.name not in RESERVED_COLUMNS])


def read_sink_file(store: ObjectStore, schema: pa.Schema, key: str) -> Iterator[pa.RecordBatch]:
    """One published file's rows in `schema` (read inside a Spark task)."""
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(store.get(key).data))
    table = table.drop_columns([c for c in table.column_names if c in RESERVED_COLUMNS])
    yield from table.select(schema.names).cast(schema).to_batches()


def _read_files_task(store_ref: StoreRef, schema: pa.Schema, batches: Iterator[pa.RecordBatch]):
    store = store_ref.open()
    for batch in batches:
        for key in batch.column("key").to_pylist():
            yield from read_sink_file(store, schema, key)


def read_sink(
    spark: SparkSession,
    pipeline: str,
    sink: str,
    checkpoint: Checkpoint = "latest",
    *,
    settings: Settings | None = None,
) -> DataFrame:
    """A sink's published rows as of a checkpoint ("latest": what readers see now), one
    Spark task per file. A table sink's table holds the same rows (see tables/)."""
    from batchpoint.spark.compat import repartition_by_id, to_arrow_schema
    from batchpoint.spark.remote import for_workers

    coordinator, store_ref = _open(pipeline, settings)
    as_of, files = sink_files(coordinator, sink, checkpoint)
    struct = sink_struct(sink, files)
    arrow = to_arrow_schema(struct, timezone="UTC")
    delta = _delta_keys(coordinator, store_ref, sink, as_of)
    paths = delta if delta is not None else [f.path for f in files if f.rows]
    keys = list(enumerate(paths))
    if not keys:
        return spark.createDataFrame([], struct)
    tasks = repartition_by_id(spark.createDataFrame(keys, "idx int, key string"), len(keys), "idx")
    reader = functools.partial(_read_files_task, for_workers(store_ref), arrow)
    return tasks.mapInArrow(reader, struct)


def _delta_keys(
    coordinator: PipelineHistory, store_ref: StoreRef, sink: str, as_of: int | None
) -> list[str] | None:
    """A Delta table sink's files as of the checkpoint: the Delta version it published
    (time travel through the table), or None for any other sink."""
    from batchpoint.tables.binding import TableBinding

    found = find_sink(coordinator, sink)
    binding = TableBinding.from_properties(found.properties)
    if binding is None or not binding.is_delta:
        return None
    from batchpoint.tables.delta import DeltaSinkTable

    table = DeltaSinkTable(binding, coordinator.pipeline, found.ref, store_ref.open())
    return table.keys_at(as_of)


def describe_rows(df: DataFrame, limit: int) -> tuple[list[str], list[list[Any]], int]:
    """Columns, the first `limit` rows (sorted by the first column) and the row count."""
    total = df.count()
    rows = df.orderBy(df.columns[0]).limit(limit).collect() if df.columns else []
    return df.columns, [list(r) for r in rows], total


# The writing side (a savepoint from DataFrames) lives in its own module; it is asked of
# this one beside read_state.
from batchpoint.ops.bootstrap import write_savepoint  # noqa: E402, F401
