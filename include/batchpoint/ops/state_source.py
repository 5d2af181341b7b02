"""`spark.read.format("batchpoint")`: a pipeline's state, or a sink's published rows, as of
a checkpoint, through Spark's Python data source API (Spark's `statestore` source is the
model). The same reads as read_state and read_sink, planned by the same functions:

    from batchpoint.ops.state_source import register
    register(spark)  # once per session; storage from the BATCHPOINT_* settings
    (spark.read.format("batchpoint").option("pipeline", "payments")
        .option("operator", "balances").option("state", "balances")
        .option("checkpoint", 7).load())
    spark.read.format("batchpoint").options(pipeline="payments", sink="alerts").load()

Options: pipeline (optional with one pipeline on the storage), operator and state, or
sink; checkpoint (an id or "latest", the default: the head, or for a sink what readers
see now); root (another storage than the registered settings').

Spark runs a Python source's planning in Python workers of its own (on the Connect
server, over Connect), which see neither this process's environment nor its settings:
`register` bakes the settings (over Connect, their portable form, as every task gets
them) into the class it registers. Each partition is one task of the read_state plan
(a full state file, its key groups and the changelogs over them) or one sink file, and
`read` yields Arrow batches fetched from the store by pyarrow/boto3 in the worker.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from batchpoint.errors import ConfigError
from batchpoint.ops.dataframes import read_sink_file, sink_files, sink_struct, state_files
from batchpoint.ops.pipelines import open_pipeline, pipeline_names
from batchpoint.settings import Settings
from batchpoint.spark.compat import to_arrow_schema
from batchpoint.spark.state_read_tasks import TaskRead, read_row
from batchpoint.spark.state_reader import TASK_COLUMNS, ReadSpec, plan_keyed_read
from batchpoint.state.format import StateHandle
from batchpoint.storage import StoreRef

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

SOURCE_NAME = "batchpoint"
OPTIONS = ("root", "pipeline", "operator", "state", "sink", "checkpoint")
_TASK_FIELDS = tuple(column.split()[0] for column in TASK_COLUMNS.split(", "))


@dataclass(frozen=True)
class SourcePlan:
    """What a load reads: the rows' schema and one partition per Spark task. A state
    read carries the read_state plan's TaskRead; a sink read the store and file keys."""

    struct: StructType
    partitions: list[InputPartition]
    task: TaskRead | None = None
    store_ref: StoreRef | None = None


def _settings(options: Mapping[str, str], baked: Settings | None) -> Settings:
    settings = baked or Settings.from_env()
    root = options.get("root")
    if not root or root == settings.root:
        return settings
    same_kind = root.split(":", 1)[0] == settings.root.split(":", 1)[0]
    return settings.with_storage(root, settings.store_options if same_kind else {})


def _pipeline(options: Mapping[str, str], settings: Settings) -> str:
    name = options.get("pipeline")
    if name:
        return name
    names = pipeline_names(settings.store_ref.open())
    if len(names) != 1:
        raise ConfigError(
            f"batchpoint source: give option 'pipeline' "
            f"(pipelines in {settings.root}: {', '.join(names) or 'none'})"
        )
    return names[0]


def _check_options(options: Mapping[str, str]) -> None:
    given = {k.lower() for k in options}
    unknown = sorted(given - set(OPTIONS))
    if unknown:
        raise ConfigError(
            f"batchpoint source: unknown option(s) {', '.join(unknown)} "
            f"(options: {', '.join(OPTIONS)})"
        )
    if ("sink" in given) == bool(given & {"operator", "state"}):
        raise ConfigError(
            "batchpoint source: give options 'operator' and 'state' (a state) or 'sink' "
            "(a sink's published rows), not both or neither"
        )
    if "sink" not in given and not {"operator", "state"} <= given:
        missing = "state" if "operator" in given else "operator"
        raise ConfigError(f"batchpoint source: option '{missing}' is missing")


def plan_source(options: Mapping[str, str], baked: Settings | None = None) -> SourcePlan:
    """The plan of one load: the options checked, the checkpoint resolved, the files
    listed. Every mistake is one BatchpointError naming the value and the choices."""
    _check_options(options)
    settings = _settings(options, baked)
    coordinator = open_pipeline(settings, _pipeline(options, settings))
    checkpoint = options.get("checkpoint") or "latest"
    if options.get("sink"):
        return _sink_plan(coordinator, settings.store_ref, options["sink"], checkpoint)
    operator, state = options["operator"], options["state"]
    _, files = state_files(coordinator, operator, state, checkpoint)
    handles = [StateHandle.coerce(f) for f in files]
    # UTC: a Python source's Arrow batches must carry the zone Spark converts them with.
    plan = plan_keyed_read(None, settings.store_ref, handles, ReadSpec(), time_zone="UTC")
    parts = [InputPartition(dict(zip(_TASK_FIELDS, row, strict=True))) for row in plan.rows]
    return SourcePlan(plan.struct, parts, task=plan.task)


def _sink_plan(coordinator: Any, store_ref: StoreRef, sink: str, checkpoint: str) -> SourcePlan:
    _, files = sink_files(coordinator, sink, checkpoint)
    struct = sink_struct(sink, files)
    parts = [InputPartition(f.path) for f in files if f.rows]
    return SourcePlan(struct, parts, store_ref=store_ref)


class BatchpointReader(DataSourceReader):
    """Reads a SourcePlan's partitions inside Spark's Python workers."""

    def __init__(self, plan: SourcePlan, schema: StructType) -> None:
        if schema.fieldNames() != plan.struct.fieldNames():
            raise ConfigError(
                f"batchpoint source: a schema of its own ({', '.join(schema.fieldNames())}) "
                f"cannot be given; the rows have {', '.join(plan.struct.fieldNames())}"
            )
        self.plan = plan
        # Exactly the batches Spark checks against: its schema, with zone UTC.
        self.arrow = to_arrow_schema(schema, timezone="UTC")

    def partitions(self) -> list[InputPartition]:
        # Spark plans at least one task; an empty sink has no file for it to read.
        return self.plan.partitions or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if partition.value is None:
            return
        if self.plan.task is not None:
            task = replace(self.plan.task, out_schema=self.arrow)
            yield from read_row(task, task.store.open(), partition.value)
            return
        assert self.plan.store_ref is not None
        store = self.plan.store_ref.open()
        for batch in read_sink_file(store, self.arrow, partition.value):
            yield pa.RecordBatch.from_arrays(batch.columns, schema=self.arrow)


class BatchpointSource(DataSource):
    """The `batchpoint` format. Register it with `register(spark)`, which bakes the
    storage settings in; the class itself reads the settings of the worker's
    environment."""

    settings: ClassVar[Settings | None] = None

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _plan(self) -> SourcePlan:
        # Planned once in schema(): the instance travels pickled to reader(), so the
        # schema and the partitions come from the same resolved checkpoint.
        planned = self.__dict__.get("_planned")
        if planned is None:
            planned = self.__dict__["_planned"] = plan_source(self.options, type(self).settings)
        return planned

    def schema(self) -> StructType:
        return self._plan().struct

    def reader(self, schema: StructType) -> BatchpointReader:
        return BatchpointReader(self._plan(), schema)


def register(spark: SparkSession, settings: Settings | None = None) -> type[BatchpointSource]:
    """Register the `batchpoint` format with `spark` (classic or Connect), reading the
    storage of `settings` (default: the BATCHPOINT_* settings of this process)."""
    from batchpoint.spark.connect import is_connect
    from batchpoint.spark.remote import prepare_remote

    settings = settings or Settings.from_env()
    if is_connect(spark):
        # The server's workers plan and read: they get the store as every task does.
        ref = prepare_remote(spark, settings.store_ref)
        settings = settings.with_storage(ref.uri, dict(ref.options))
    # A class made here pickles by value (cloudpickle), so the settings travel with it.
    source = type("BatchpointSource", (BatchpointSource,), {"settings": settings})
    spark.dataSource.register(source)
    return source


__all__ = ["OPTIONS", "SOURCE_NAME", "BatchpointReader", "BatchpointSource", "register"]
