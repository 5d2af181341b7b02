"""An Iceberg table read incrementally: barriers are snapshots, each epoch reads what
the snapshots after its base added, once; a rewrite or an expired base snapshot is a
clear SourceOffsetError (a real SQLite catalog over a folder and SeaweedFS)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from batchpoint.sources.errors import SourceOffsetError
from batchpoint.sources.iceberg_table import IcebergTableSource
from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.catalog import open_catalog

SCHEMA = pa.schema([pa.field("order_id", pa.string(), nullable=False), ("amount", pa.int64())])


@pytest.fixture
def source(table_store: StoreRef, tmp_path: Path) -> IcebergTableSource:
    catalog_uri = f"sqlite:///{tmp_path / 'catalog.db'}"
    store = table_store.open()
    catalog = open_catalog("batchpoint", store, catalog_uri)
    catalog.create_namespace_if_not_exists("shop")
    catalog.create_table("shop.orders", schema=pa.schema([f.with_nullable(True) for f in SCHEMA]))
    return IcebergTableSource(
        store, TableBinding("shop.orders"), schema=SCHEMA, catalog_uri=catalog_uri
    )


def _append(source: IcebergTableSource, *ids: str) -> None:
    rows = pa.table({"order_id": list(ids), "amount": [len(i) for i in ids]})
    source.table().append(rows.cast(source.table().schema().as_arrow()))


def _read(source: IcebergTableSource, start: object, end: object) -> list[str]:
    splits = source.files_between(start, end)  # type: ignore[arg-type]
    return sorted(i for s in splits for i in source.read_split(s).column("order_id").to_pylist())


def test_each_epoch_reads_the_rows_appended_since_its_base_once(
    source: IcebergTableSource,
) -> None:
    empty = source.capture_barrier()
    assert _read(source, None, empty) == []
    _append(source, "a", "b")
    first = source.capture_barrier()
    _append(source, "c")
    _append(source, "d", "e")
    second = source.capture_barrier()
    assert first.offset("snapshots") == 1 and second.offset("snapshots") == 3
    assert _read(source, empty, first) == ["a", "b"]
    assert _read(source, first, second) == ["c", "d", "e"]
    assert _read(source, None, second) == ["a", "b", "c", "d", "e"]
    assert _read(source, second, second) == []
    source.verify_barrier(first)


def test_a_rewritten_table_stops_the_epoch(source: IcebergTableSource) -> None:
    _append(source, "a")
    base = source.capture_barrier()
    source.table().overwrite(
        pa.table({"order_id": ["z"], "amount": [1]}).cast(source.table().schema().as_arrow())
    )
    with pytest.raises(SourceOffsetError, match="rewritten, not appended to"):
        source.files_between(base, source.capture_barrier())


def test_an_expired_base_snapshot_stops_the_epoch(source: IcebergTableSource) -> None:
    _append(source, "a")
    base = source.capture_barrier()
    _append(source, "b")
    table = source.table()
    table.maintenance.expire_snapshots().by_id(int(base["snapshots"].last)).commit()
    with pytest.raises(SourceOffsetError, match="has been expired"):
        source.files_between(base, source.capture_barrier())
    with pytest.raises(SourceOffsetError, match="has been expired"):
        source.verify_barrier(base)
