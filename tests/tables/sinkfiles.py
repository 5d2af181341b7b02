"""Sink manifests over real Parquet files in a store, for the table tests: what the
runtime's sink tasks and publish would leave, without Spark."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from batchpoint.protocol.checkpoint import FileHandle
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sink_manifest import SinkMode
from batchpoint.protocol.sinks import PublishedEpoch, SinkManifest
from batchpoint.storage import ObjectStore

PIPELINE = "pay"
SINK = "balances_table"
SCHEMA = pa.schema([pa.field("account_id", pa.string()), pa.field("balance", pa.int64())])


def staged_file(
    store: ObjectStore,
    checkpoint_id: int,
    rows: Mapping[str, int],
    part: int = 0,
    pipeline: str = PIPELINE,
) -> FileHandle:
    """One plain sink file of checkpoint `checkpoint_id` with `rows` (account -> balance)."""
    table = pa.table({"account_id": list(rows), "balance": list(rows.values())}, schema=SCHEMA)
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    data = buffer.getvalue()
    key = f"{PipelineLayout(pipeline).data_prefix(checkpoint_id)}{SINK}/part-{part}.parquet"
    store.put(key, data)
    return FileHandle(key, len(data), hashlib.sha256(data).hexdigest(), len(rows), name="sink")


def manifest(
    epochs: Sequence[tuple[int, int | None, Sequence[FileHandle]]],
    current: int | None,
    *,
    mode: str = "snapshot",
    generation: int = 0,
) -> SinkManifest:
    """A manifest of (checkpoint id, base id, files) epochs."""
    return SinkManifest(
        SINK,
        SinkMode(mode),
        ("account_id",),
        current,
        {cid: PublishedEpoch(cid, base, tuple(files)) for cid, base, files in epochs},
        generation,
    )


def save(store: ObjectStore, m: SinkManifest, pipeline: str = PIPELINE) -> None:
    store.put(PipelineLayout(pipeline).sink_manifest(m.sink), m.encode())
