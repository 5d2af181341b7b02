"""An Iceberg table read incrementally: barriers are snapshots, each epoch reads what
the snapshots after its base added, once; a rewrite or an expired base snapshot is a
clear SourceOffsetError, and so is a table dropped and created anew; files are read by
field id; a damaged file is a SourceDataError (a real SQLite catalog over a folder and
SeaweedFS)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.io import load_file_io
from pyiceberg.types import StringType

from batchpoint.errors import ConfigError
from batchpoint.sources.barrier import SourceBarrier
from batchpoint.sources.errors import SourceDataError, SourceOffsetError
from batchpoint.sources.iceberg_table import IcebergTableSource
from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.catalog import file_io_properties, open_catalog

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


# -- a table dropped and created anew ---------------------------------------------------


def _recreate(source: IcebergTableSource) -> None:
    catalog = open_catalog("batchpoint", source.store, source.catalog_uri)
    catalog.drop_table("shop.orders")
    catalog.create_table("shop.orders", schema=pa.schema([f.with_nullable(True) for f in SCHEMA]))


def _as_earlier_release(barrier: SourceBarrier, depth: int) -> dict[str, object]:
    """A barrier as releases before table uuids wrote it: the depth, no digest."""
    return {"snapshots": {"offset": depth, "last": barrier["snapshots"].last}}


def test_a_table_dropped_and_created_anew_empty_stops_the_epoch(
    source: IcebergTableSource,
) -> None:
    _append(source, "a", "b")
    base = source.capture_barrier()
    _recreate(source)
    empty = source.capture_barrier()
    with pytest.raises(SourceOffsetError, match="dropped and created anew"):
        source.read_between(base, empty)
    with pytest.raises(SourceOffsetError, match="dropped and created anew"):
        source.files_between(base, empty)
    with pytest.raises(SourceOffsetError, match="dropped and created anew"):
        source.verify_barrier(base)
    # an earlier release's base records no uuid: the missing snapshot still tells
    with pytest.raises(SourceOffsetError, match="has no snapshot now"):
        source.read_between(_as_earlier_release(base, 1), _as_earlier_release(empty, 0))
    _append(source, "x")  # created anew with rows: the uuid tells it from the old one
    with pytest.raises(SourceOffsetError, match="uuid"):
        source.files_between(base, source.capture_barrier())


def test_a_barrier_of_an_earlier_release_still_reads(source: IcebergTableSource) -> None:
    _append(source, "a")
    _append(source, "b")
    old = _as_earlier_release(source.capture_barrier(), 2)
    _append(source, "c")
    new = source.capture_barrier()
    assert _read(source, old, new) == ["c"]
    assert _read(source, None, old) == ["a", "b"]
    assert [s.key for s in source.read_between(old, new).after] == [
        s.key for s in source.files_between(old, new)
    ]
    source.verify_barrier(old)


def test_the_offset_is_the_sequence_number_which_expiry_does_not_lower(
    source: IcebergTableSource,
) -> None:
    _append(source, "a")
    _append(source, "b")
    base = source.capture_barrier()
    table = source.table()
    for snapshot in table.snapshots():
        if str(snapshot.snapshot_id) != base["snapshots"].last:
            table.maintenance.expire_snapshots().by_id(snapshot.snapshot_id).commit()
    _append(source, "c")
    after = source.capture_barrier()
    assert (base.offset("snapshots"), after.offset("snapshots")) == (2, 3)
    assert _read(source, base, after) == ["c"]


# -- columns are read by field id -------------------------------------------------------


def _table_source(source: IcebergTableSource, name: str, schema: pa.Schema) -> IcebergTableSource:
    catalog = open_catalog("batchpoint", source.store, source.catalog_uri)
    catalog.create_table(f"shop.{name}", schema=pa.schema([f.with_nullable(True) for f in schema]))
    return IcebergTableSource(
        source.store, TableBinding(f"shop.{name}"), schema=schema, catalog_uri=source.catalog_uri
    )


def _rows(source: IcebergTableSource, end: SourceBarrier | None = None) -> list[dict[str, object]]:
    splits = source.files_between(None, end if end is not None else source.capture_barrier())
    return [row for split in splits for row in source.read_split(split).to_pylist()]


def test_a_column_dropped_and_re_added_reads_as_nulls_from_older_files(
    source: IcebergTableSource,
) -> None:
    schema = pa.schema([*SCHEMA, ("note", pa.string())])
    notes = _table_source(source, "notes", schema)
    table = notes.table()
    rows = pa.table({"order_id": ["o1"], "amount": [1], "note": ["dropped"]})
    table.append(rows.cast(table.schema().as_arrow()))
    with notes.table().update_schema() as update:
        update.delete_column("note")
    with notes.table().update_schema() as update:
        update.add_column("note", StringType())
    assert _rows(notes) == [{"order_id": "o1", "amount": 1, "note": None}]


def test_columns_swapped_by_renames_keep_their_values(source: IcebergTableSource) -> None:
    schema = pa.schema([*SCHEMA, ("fee", pa.int64())])
    fees = _table_source(source, "fees", schema)
    table = fees.table()
    table.append(
        pa.table({"order_id": ["o1"], "amount": [100], "fee": [1]}).cast(table.schema().as_arrow())
    )
    for old, new in (("amount", "tmp"), ("fee", "amount"), ("tmp", "fee")):
        with fees.table().update_schema() as update:
            update.rename_column(old, new)
    barrier = fees.capture_barrier()
    assert _rows(fees, barrier) == [{"order_id": "o1", "amount": 1, "fee": 100}]
    compared = fees.read_between(None, barrier).after  # the whole content, as changes read it
    assert [r for s in compared for r in fees.read_split(s).to_pylist()] == _rows(fees, barrier)
    # a rename after the barrier: the epoch (and its replay) reads the barrier's schema
    with fees.table().update_schema() as update:
        update.rename_column("fee", "charge")
    assert _rows(fees, barrier) == [{"order_id": "o1", "amount": 1, "fee": 100}]


# -- damage and failures are findings, named, without secrets ---------------------------


def test_a_damaged_data_file_is_a_source_data_error_naming_it(
    source: IcebergTableSource,
) -> None:
    _append(source, "a")
    [split] = source.files_between(None, source.capture_barrier())
    file_io = load_file_io(file_io_properties(source.store), split.key)
    with file_io.new_input(split.key).open() as stream:
        data = stream.read()
    file_io.delete(split.key)
    with file_io.new_output(split.key).create() as stream:
        stream.write(data[:-16])  # the footer cut off
    with pytest.raises(SourceDataError, match="not a readable Parquet file") as caught:
        source.read_split(split)
    assert caught.value.uri == split.key


def test_a_failing_catalog_is_a_config_error_without_its_password(
    source: IcebergTableSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Down:
        def load_table(self, identifier: str) -> None:
            raise RuntimeError(
                "cannot reach postgresql://etl:hunter2@db/catalog (token rest-token-42)"
            )

    monkeypatch.setattr("batchpoint.tables.catalog.open_catalog", lambda *args: Down())
    monkeypatch.setenv("PYICEBERG_CATALOG__BATCHPOINT__TOKEN", "rest-token-42")
    source.catalog_uri = "postgresql://etl:hunter2@db/catalog"
    with pytest.raises(ConfigError, match="the catalog failed") as caught:
        source.table()
    assert "hunter2" not in str(caught.value) and "rest-token-42" not in str(caught.value)
