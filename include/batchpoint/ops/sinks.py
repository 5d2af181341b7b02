"""A sink's published rows as of a checkpoint (or now), and a table sink's commit
history: what `batchpoint sink show` and `sink history` print. A table sink is read
through its table (time travel by checkpoint id), any other through its manifest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from batchpoint.errors import BatchpointError
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline import OperatorKind
from batchpoint.protocol.sinks import read_sink_table
from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.iceberg import IcebergSinkTable, TableCommit


@dataclass
class SinkView:
    pipeline: str
    sink: str
    checkpoint_id: int | None  # None: as published now
    source: str  # "iceberg table <id> snapshot <n>" or "sink manifest"
    rows: pa.Table
    total_rows: int

    def to_json(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "sink": self.sink,
            "checkpoint_id": self.checkpoint_id,
            "source": self.source,
            "total_rows": self.total_rows,
            "rows": self.rows.to_pylist(),
        }


def sink_binding(coordinator: CheckpointCoordinator, sink: str) -> TableBinding | None:
    """The sink's table, from the spec the pipeline registered (no code needed); an
    unknown sink is an error naming the pipeline's sinks."""
    spec = coordinator.load_spec()  # raises, naming the pipeline, when none is registered
    sinks = {op.name: op for op in spec.operators if op.kind is OperatorKind.SINK}
    if sink not in sinks:
        raise BatchpointError(
            f"pipeline '{coordinator.pipeline}' has no sink '{sink}' "
            f"(sinks: {', '.join(sorted(sinks)) or 'none'})"
        )
    return TableBinding.from_properties(sinks[sink].properties)


def _table(
    coordinator: CheckpointCoordinator, store_ref: StoreRef, sink: str, binding: TableBinding | None
) -> IcebergSinkTable:
    from batchpoint.tables.service import sink_table

    if binding is None:
        raise BatchpointError(f"sink '{sink}' of '{coordinator.pipeline}' is not a table sink")
    return sink_table(store_ref, coordinator.pipeline, sink, binding)


def show_sink(
    coordinator: CheckpointCoordinator,
    store_ref: StoreRef,
    sink: str,
    checkpoint_id: int | None = None,
    limit: int | None = None,
) -> SinkView:
    binding = sink_binding(coordinator, sink)
    if binding is not None:
        table = _table(coordinator, store_ref, sink, binding)
        snapshot = table.snapshot_of(checkpoint_id) if checkpoint_id is not None else None
        rows = table.read(checkpoint_id)
        source = f"{binding}" + (f", snapshot {snapshot}" if snapshot is not None else "")
    else:
        manifest = coordinator.sinks.manifest(sink)
        if manifest is None:
            raise BatchpointError(f"sink '{sink}' of '{coordinator.pipeline}' published nothing")
        rows = read_sink_table(coordinator.store, coordinator.pipeline, sink, checkpoint_id)
        source = "sink manifest"
    total = rows.num_rows
    if rows.num_rows and rows.column_names:
        rows = rows.sort_by([(rows.column_names[0], "ascending")])
    if limit is not None:
        rows = rows.slice(0, limit)
    return SinkView(coordinator.pipeline, sink, checkpoint_id, source, rows, total)


def sink_history(
    coordinator: CheckpointCoordinator, store_ref: StoreRef, sink: str
) -> list[TableCommit]:
    return _table(coordinator, store_ref, sink, sink_binding(coordinator, sink)).history()
