"""The integrity check's "no offset goes backwards" on an Iceberg table source: a
routine expiry of old snapshots is not a step back (the offset is the snapshot's
sequence number; an earlier release's depth is not compared), a rollback is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from batchpoint.protocol.checkpoint import CheckpointType, PendingCheckpoint
from batchpoint.protocol.layout import TaskId
from batchpoint.quality.source_offsets import _backwards
from batchpoint.sources.barrier import SourceBarrier
from batchpoint.sources.iceberg_table import IcebergTableSource
from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.catalog import open_catalog

SCHEMA = pa.schema([pa.field("order_id", pa.string(), nullable=False), ("amount", pa.int64())])


@pytest.fixture
def source(tmp_path: Path) -> IcebergTableSource:
    catalog_uri = f"sqlite:///{tmp_path / 'catalog.db'}"
    store = StoreRef.of((tmp_path / "store").as_uri()).open()
    catalog = open_catalog("batchpoint", store, catalog_uri)
    catalog.create_namespace_if_not_exists("shop")
    catalog.create_table("shop.orders", schema=pa.schema([f.with_nullable(True) for f in SCHEMA]))
    return IcebergTableSource(
        store, TableBinding("shop.orders"), schema=SCHEMA, catalog_uri=catalog_uri
    )


def _append(source: IcebergTableSource, *ids: str) -> None:
    table = source.table()
    rows = pa.table({"order_id": list(ids), "amount": [1] * len(ids)})
    table.append(rows.cast(table.schema().as_arrow()))


def _problems(
    base: SourceBarrier | dict[str, Any], barrier: SourceBarrier | dict[str, Any]
) -> list[str]:
    def json(value: SourceBarrier | dict[str, Any]) -> dict[str, Any]:
        return value.to_json() if isinstance(value, SourceBarrier) else value

    pending = PendingCheckpoint(
        pipeline="p",
        checkpoint_id=7,
        type=CheckpointType.CHECKPOINT,
        base_checkpoint_id=6,
        restore_generation=0,
        barrier={"orders": json(barrier)},
        base_barrier={"orders": json(base)},
        expected_tasks=(TaskId("op", 0),),
        trigger_time=0.0,
        deadline=1.0,
    )
    return [finding.problem for finding in _backwards(pending)]


def test_expiring_old_snapshots_is_not_a_step_back(source: IcebergTableSource) -> None:
    for row in ("a", "b", "c"):
        _append(source, row)
    base = source.capture_barrier()
    table = source.table()
    for snapshot in table.snapshots():
        if str(snapshot.snapshot_id) != base["snapshots"].last:
            table.maintenance.expire_snapshots().by_id(snapshot.snapshot_id).commit()
    _append(source, "d")
    assert _problems(base, source.capture_barrier()) == []


def test_an_earlier_release_depth_is_not_compared(source: IcebergTableSource) -> None:
    """Barriers written before sequence numbers counted the ancestors left: an expiry
    between two of them lowered the count, and an upgrade changes what is counted."""
    _append(source, "a")
    last = source.capture_barrier()["snapshots"].last
    old = {"snapshots": {"offset": 3, "last": last}}
    assert _problems(old, {"snapshots": {"offset": 2, "last": last}}) == []
    _append(source, "b")
    assert _problems(old, source.capture_barrier()) == []  # sequence 2 after depth 3


def test_a_rollback_is_a_step_back(source: IcebergTableSource) -> None:
    _append(source, "a")
    first = source.capture_barrier()
    _append(source, "b")
    base = source.capture_barrier()
    source.table().manage_snapshots().rollback_to_snapshot(int(first["snapshots"].last)).commit()
    [problem] = _problems(base, source.capture_barrier())
    assert "goes backwards: 2 in its base, 1" in problem


def test_a_table_emptied_is_a_step_back_and_file_offsets_are_still_compared() -> None:
    recorded = {"snapshots": {"offset": 3, "last": "123"}}  # an earlier release's
    assert len(_problems(recorded, {"snapshots": 0})) == 1
    assert len(_problems({"p0": 3}, {"p0": 2})) == 1
