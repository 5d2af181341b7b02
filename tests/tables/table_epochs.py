"""Checkpoints of a small pipeline with an Iceberg or a Delta table sink, without Spark:
each epoch's sink task stages a real Parquet file and acks it, the checkpoint completes,
the manifest publishes it and the table syncs, as `PipelineDriver.notify_complete` does.

The table can be taken down (`outage`), and the manifest moves on without it. Iceberg:
the catalog's SQLAlchemy URI names a database that cannot be opened, so every sync,
expiry and read of the table meets the real driver's error. Delta (no catalog, and
delta-rs cannot be told to fail): a storage fault at the log commit, after the commit's
copies were made (the adapter's commit wrapped), and with `reads` at every read of the
table too."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from batchpoint.errors import CheckpointError
from batchpoint.protocol.checkpoint import FileHandle, TaskMetrics
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.sinks import SinkPublisher
from batchpoint.runtime.api import Pipeline
from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.delta import DeltaSinkTable
from batchpoint.tables.delta_location import table_key
from batchpoint.tables.service import sink_table, sync_tables
from batchpoint.tables.sync import SinkTableAdapter
from tables.sinkfiles import SCHEMA

PIPELINE = "pay"
SINK = "balances_table"
TABLE = "pay.balances"
CATALOG_ENV = "BATCHPOINT_TABLE_CATALOG"
SPARK_SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "account_id", "type": "string", "nullable": True, "metadata": {}},
            {"name": "balance", "type": "long", "nullable": True, "metadata": {}},
        ],
    }
)


def table_pipeline(table_format: str = "iceberg") -> Pipeline:
    pipeline = Pipeline(PIPELINE)
    pipeline.source("events", root="src", schema=pa.schema([("account_id", pa.string())]))
    pipeline.sink(
        SINK,
        inputs=["events"],
        key=["account_id"],
        mode="snapshot",
        table=TABLE,
        table_format=table_format,
    )
    return pipeline


def commit_fault(self: DeltaSinkTable, table: object, step: object, generation: int) -> None:
    """A Delta commit that copies its files into the table, then meets a storage fault
    writing the log's next version: what a commit that failed mid-way leaves."""
    wanted = pa.schema(table.schema())  # type: ignore[attr-defined]
    for staged in step.files:  # type: ignore[attr-defined]
        self._add(staged, wanted, step)  # type: ignore[arg-type]
    raise OSError(f"storage fault writing the _delta_log of {self.uri}")


@dataclass
class TableEpochs:
    """The pipeline on `store_ref`, its table in `table_format`; an Iceberg table's catalog
    a SQLite file of the test's (set as BATCHPOINT_TABLE_CATALOG, as a deployment would)."""

    store_ref: StoreRef
    tmp_path: Path
    monkeypatch: pytest.MonkeyPatch
    config: CheckpointConfig = field(default_factory=lambda: CheckpointConfig(num_retained=1))
    table_format: str = "iceberg"

    def __post_init__(self) -> None:
        self.store = self.store_ref.open()
        self.catalog = f"sqlite:///{self.tmp_path / 'catalog.db'}"
        self.monkeypatch.setenv(CATALOG_ENV, self.catalog)
        self.binding = TableBinding(TABLE, format=self.table_format)
        self.delta = self.binding.is_delta
        self.pipeline = table_pipeline(self.table_format)
        self.coordinator = CheckpointCoordinator(self.store, PIPELINE, self.config)
        self.coordinator.register(self.pipeline.spec())
        self.rows: dict[int, dict[str, int]] = {}

    def epoch(self, rows: Mapping[str, int]) -> int:
        """One completed checkpoint whose sink output is `rows`; published, then its
        table synced (a sync that fails, as during an outage, is what a failed finalize
        leaves: the manifest published, the table behind)."""
        c = self.coordinator
        pending = c.trigger({"events": {}})
        cid = pending.checkpoint_id
        for task in pending.expected_tasks:
            handles = [self._stage(cid, task, rows)] if task.operator == SINK else []
            c.acknowledge(cid, task, "a1", handles, TaskMetrics())
        outcome = c.try_finalize(cid)
        assert outcome is not None and outcome.completed is not None, outcome
        self.rows[cid] = dict(rows)
        sinks = [(SINK, "snapshot", ["account_id"])]
        assert c.notify_checkpoint_complete(cid, sinks).published == [f"{SINK}@{cid}"]
        with contextlib.suppress(Exception):
            sync_tables(self.store_ref, PIPELINE, {SINK: self.binding})
        return cid

    def _stage(self, cid: int, task: TaskId, rows: Mapping[str, int]) -> FileHandle:
        table = pa.table({"account_id": list(rows), "balance": list(rows.values())}, SCHEMA)
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        data = buffer.getvalue()
        key = self.coordinator.layout.task_data_prefix(cid, task, "a1") + "part-0.parquet"
        self.store.put(key, data)
        digest = hashlib.sha256(data).hexdigest()
        # the schema a Spark sink task records (ops/dataframes.py::read_sink reads it)
        meta = {"spark_schema": SPARK_SCHEMA}
        return FileHandle(key, len(data), digest, len(rows), name="sink", meta=meta)

    @contextlib.contextmanager
    def outage(self, *, reads: bool = False) -> Iterator[None]:
        """Iceberg: the catalog down (its URI names a database in a folder that does not
        exist, so SQLAlchemy's real driver fails to open it). Delta: every commit meets
        a storage fault after its copies; with `reads`, every read of the table too."""
        with self.monkeypatch.context() as patch:
            patch.setenv(CATALOG_ENV, f"sqlite:///{self.tmp_path / 'down' / 'catalog.db'}")
            patch.setattr(DeltaSinkTable, "commit", commit_fault)
            if reads:

                def unreachable(adapter: DeltaSinkTable, version: int | None = None) -> None:
                    raise OSError(f"storage fault reading {adapter.uri}")

                patch.setattr(DeltaSinkTable, "_open", unreachable)
            yield

    def table(self) -> SinkTableAdapter:
        return sink_table(self.store_ref, PIPELINE, SINK, self.binding, self.catalog)

    def read_files(self, checkpoint_id: int) -> list[str]:
        """The keys the table reads for checkpoint `checkpoint_id`'s sink output that are
        in storage: Iceberg's snapshots read the checkpoint's staged files, Delta's
        versions their copies in the table's folder."""
        prefix = self.coordinator.layout.operator_data_prefix(checkpoint_id, SINK)
        if self.delta:
            prefix = table_key(self.binding) + "batchpoint/" + prefix
        return [i.key for i in self.store.list(prefix)]

    def read(self, checkpoint_id: int | None = None) -> dict[str, int]:
        data = self.table().read(checkpoint_id).to_pydict()
        return dict(zip(data["account_id"], data["balance"], strict=True))

    def assert_every_snapshot_reads(self) -> list[int]:
        """The table now, and as of every checkpoint it lists, reads its rows; the
        checkpoints it lists. A Delta log lists every commit it ever made: a version of a
        checkpoint GC dropped whose copies expiry deleted gives the clear error, and is
        not in the list (as Iceberg's expired snapshots are not); every other one reads,
        those of the retained checkpoints and the current one always."""
        table = self.table()
        listed = [c.checkpoint_id for c in table.history() if c.checkpoint_id is not None]
        position = table.position(table.require())
        assert self.read() == self.rows[position.checkpoint_id]
        kept = self._retained() | {position.checkpoint_id}
        expired: set[int] = set()
        for cid in listed:
            try:
                assert self.read(cid) == self.rows[cid], cid
            except CheckpointError as exc:
                if not self.delta or cid in kept or "reads files that are gone" not in str(exc):
                    raise
                expired.add(cid)
        return [cid for cid in listed if cid not in expired]

    def _retained(self) -> set[int]:
        manifest = SinkPublisher(self.store, self.coordinator.layout).manifest(SINK)
        return set(manifest.epochs) if manifest is not None else set()
