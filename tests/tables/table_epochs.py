"""Checkpoints of a small pipeline with an Iceberg table sink, without Spark: each epoch's
sink task stages a real Parquet file and acks it, the checkpoint completes, the manifest
publishes it and the table syncs, as `PipelineDriver.notify_complete` does. The catalog
can be taken down (`outage`): its SQLAlchemy URI then names a database that cannot be
opened, so every sync, expiry and read of the table meets the real driver's error, and
the manifest moves on without the table."""

from __future__ import annotations

import contextlib
import hashlib
import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from batchpoint.protocol.checkpoint import FileHandle, TaskMetrics
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId
from batchpoint.runtime.api import Pipeline
from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.iceberg import IcebergSinkTable
from batchpoint.tables.service import sink_table, sync_tables
from tables.sinkfiles import SCHEMA

PIPELINE = "pay"
SINK = "balances_table"
TABLE = "pay.balances"
CATALOG_ENV = "BATCHPOINT_TABLE_CATALOG"


def table_pipeline() -> Pipeline:
    pipeline = Pipeline(PIPELINE)
    pipeline.source("events", root="src", schema=pa.schema([("account_id", pa.string())]))
    pipeline.sink(SINK, inputs=["events"], key=["account_id"], mode="snapshot", table=TABLE)
    return pipeline


@dataclass
class TableEpochs:
    """The pipeline on `store_ref`, its catalog a SQLite file of the test's (set as
    BATCHPOINT_TABLE_CATALOG, as a deployment would)."""

    store_ref: StoreRef
    tmp_path: Path
    monkeypatch: pytest.MonkeyPatch
    config: CheckpointConfig = field(default_factory=lambda: CheckpointConfig(num_retained=1))

    def __post_init__(self) -> None:
        self.store = self.store_ref.open()
        self.catalog = f"sqlite:///{self.tmp_path / 'catalog.db'}"
        self.monkeypatch.setenv(CATALOG_ENV, self.catalog)
        self.pipeline = table_pipeline()
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
            sync_tables(self.store_ref, PIPELINE, {SINK: TableBinding(TABLE)})
        return cid

    def _stage(self, cid: int, task: TaskId, rows: Mapping[str, int]) -> FileHandle:
        table = pa.table({"account_id": list(rows), "balance": list(rows.values())}, SCHEMA)
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        data = buffer.getvalue()
        key = self.coordinator.layout.task_data_prefix(cid, task, "a1") + "part-0.parquet"
        self.store.put(key, data)
        return FileHandle(key, len(data), hashlib.sha256(data).hexdigest(), len(rows), name="sink")

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        """The catalog down: its URI names a database in a folder that does not exist,
        so SQLAlchemy's real driver fails to open it."""
        with self.monkeypatch.context() as patch:
            patch.setenv(CATALOG_ENV, f"sqlite:///{self.tmp_path / 'down' / 'catalog.db'}")
            yield

    def table(self) -> IcebergSinkTable:
        return sink_table(self.store_ref, PIPELINE, SINK, TableBinding(TABLE), self.catalog)

    def read(self, checkpoint_id: int | None = None) -> dict[str, int]:
        data = self.table().read(checkpoint_id).to_pydict()
        return dict(zip(data["account_id"], data["balance"], strict=True))

    def assert_every_snapshot_reads(self) -> list[int]:
        """The table now, and as of every checkpoint it lists, reads its rows; the
        checkpoints it lists."""
        table = self.table()
        listed = [c.checkpoint_id for c in table.history() if c.checkpoint_id is not None]
        assert self.read() == self.rows[table.position(table.require()).checkpoint_id]
        for cid in listed:
            assert self.read(cid) == self.rows[cid], cid
        return listed
