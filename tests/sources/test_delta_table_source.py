"""A Delta table read incrementally: barriers are versions, each epoch reads what the
commits after its base added, once (a compaction in between adds nothing); a rewrite, a
cleaned-up log or vacuumed files are a clear SourceOffsetError naming the version; with
changes=True, the rows read as removed and added are exactly the difference between the
two versions' contents, through the change data feed or without it (real tables written
by delta-rs, on a folder and on SeaweedFS)."""

from __future__ import annotations

import dataclasses
import datetime
import sys
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from batchpoint.errors import ConfigError
from batchpoint.protocol.sink_manifest import SinkMode
from batchpoint.sources.barrier import SourceBarrier
from batchpoint.sources.delta_table import DeltaTableSource
from batchpoint.sources.errors import SourceDataError, SourceOffsetError
from batchpoint.sources.files import SourceSplit
from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.delta_location import storage_options

SCHEMA = pa.schema([pa.field("order_id", pa.string(), nullable=False), ("amount", pa.int64())])
CDF = {"delta.enableChangeDataFeed": "true"}


@pytest.fixture
def source(table_store: StoreRef) -> DeltaTableSource:
    binding = TableBinding("shop.orders", format="delta")
    return DeltaTableSource(table_store.open(), binding, schema=SCHEMA, key=("order_id",))


def _options(source: DeltaTableSource) -> dict[str, str] | None:
    return storage_options(source.store) or None


def _write(source: DeltaTableSource, *ids: str, mode: str = "append", **kw: Any) -> None:
    rows = pa.table({"order_id": list(ids), "amount": [len(i) for i in ids]})
    write_deltalake(source.uri, rows, mode=mode, storage_options=_options(source), **kw)  # type: ignore[arg-type]


def _table(source: DeltaTableSource, version: int | None = None) -> DeltaTable:
    return DeltaTable(source.uri, version=version, storage_options=_options(source))


def _read(source: DeltaTableSource, start: object, end: object) -> list[str]:
    splits = source.files_between(start, end)  # type: ignore[arg-type]
    return sorted(i for s in splits for i in source.read_split(s).column("order_id").to_pylist())


def test_each_epoch_reads_the_rows_appended_since_its_base_once(
    source: DeltaTableSource,
) -> None:
    empty = source.capture_barrier()  # no table yet
    assert empty.offset("versions") == 0 and _read(source, None, empty) == []
    _write(source, "a", "b")
    first = source.capture_barrier()
    _write(source, "c")
    _table(source).optimize.compact()  # rewrites files, adds no row: skipped
    _write(source, "d", "e")
    second = source.capture_barrier()
    assert first.offset("versions") == 1 and second.offset("versions") == 4
    assert first["versions"].last == "0" and second["versions"].last == "3"
    assert _read(source, empty, first) == ["a", "b"]
    assert _read(source, first, second) == ["c", "d", "e"]
    assert _read(source, None, second) == ["a", "b", "c", "d", "e"]  # the content
    assert _read(source, second, second) == []
    source.verify_barrier(first)


def test_the_executors_read_only_the_files(source: DeltaTableSource) -> None:
    _write(source, "a")
    base = source.capture_barrier()
    _write(source, "b", "c")
    splits = source.files_between(base, source.capture_barrier())
    log = [o.key for o in source.store.list("delta/shop/orders/_delta_log/")]
    assert log and source.store.delete_many(log) == len(log)
    rows = [i for s in splits for i in source.read_split(s).column("order_id").to_pylist()]
    assert sorted(rows) == ["b", "c"]


@pytest.mark.parametrize(
    ("operation", "rewrite"),
    [
        ("DELETE", lambda t: t.delete("order_id = 'a'")),
        ("UPDATE", lambda t: t.update(updates={"amount": "7"}, predicate="order_id = 'a'")),
        ("WRITE", None),  # an overwrite
    ],
)
def test_a_rewritten_table_stops_the_epoch_naming_version_and_operation(
    source: DeltaTableSource, operation: str, rewrite: Any
) -> None:
    _write(source, "a", "b")
    base = source.capture_barrier()
    _write(source, "c")
    if rewrite is None:
        _write(source, "z", mode="overwrite")
    else:
        rewrite(_table(source))
    source.key = None  # not read as changes
    with pytest.raises(SourceOffsetError, match=f"version 2 is an? {operation} commit") as e:
        source.files_between(base, source.capture_barrier())
    assert "changes=True and a key" in str(e.value)


def test_a_table_deleted_and_created_anew_stops_the_epoch(source: DeltaTableSource) -> None:
    """Its versions count from 0 again: past the base's version, the new table's commits
    would be read as if they followed it, and its first rows skipped."""
    _write(source, "a")
    _write(source, "b")
    base = source.capture_barrier()
    assert base["versions"].digest == str(_table(source).metadata().id)
    files = [o.key for o in source.store.list("delta/shop/orders/")]
    assert source.store.delete_many(files) == len(files)
    for row in ("x", "y", "z"):
        _write(source, row)
    end = source.capture_barrier()
    with pytest.raises(SourceOffsetError, match="deleted and created anew") as refused:
        source.files_between(base, end)
    assert base["versions"].digest in str(refused.value)
    with pytest.raises(SourceOffsetError, match="deleted and created anew"):
        source.verify_barrier(base)
    assert _read(source, None, end) == ["x", "y", "z"]  # a new start reads it all


def test_a_cleaned_up_log_stops_the_epoch_naming_the_version(source: DeltaTableSource) -> None:
    _write(source, "a", configuration={"delta.logRetentionDuration": "interval 0 seconds"})
    base = source.capture_barrier()
    _write(source, "b")
    _write(source, "c")
    table = _table(source)
    table.create_checkpoint()
    table.cleanup_metadata()  # the commits before the checkpoint's version 2
    with pytest.raises(SourceOffsetError, match=r"commit of version 1, after the base .* 0, is"):
        source.files_between(base, source.capture_barrier())
    with pytest.raises(SourceOffsetError, match="version 0 of the barrier can no longer"):
        source.verify_barrier(base)
    assert _read(source, None, source.capture_barrier()) == ["a", "b", "c"]  # a new start can


def test_vacuumed_files_stop_a_changes_epoch_naming_the_version(
    source: DeltaTableSource,
) -> None:
    _write(source, "a", "b")
    base = source.capture_barrier()
    _table(source).delete("order_id = 'a'")  # rewrites the file that held a and b
    _table(source).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    with pytest.raises(SourceOffsetError, match=r"version 1 \(DELETE\) can no longer be read"):
        source.read_between(base, source.capture_barrier())


def _rows(source: DeltaTableSource, splits: tuple[SourceSplit, ...]) -> Counter[tuple[Any, ...]]:
    tables = [source.read_split(s) for s in splits]
    return Counter(tuple(r.values()) for t in tables for r in t.to_pylist())


def _content(source: DeltaTableSource, barrier: SourceBarrier) -> Counter[tuple[Any, ...]]:
    table = _table(source, int(barrier["versions"].last)).to_pyarrow_table()
    return Counter(tuple(r.values()) for r in table.select(SCHEMA.names).to_pylist())


@pytest.mark.parametrize("feed", [True, False], ids=["change-data-feed", "no-feed"])
def test_changes_are_the_difference_between_the_two_versions(
    source: DeltaTableSource, feed: bool
) -> None:
    """Updated, deleted, merged, appended-then-deleted rows over one epoch: the rows read
    as removed are the base content less the barrier's, those read as added the reverse."""
    _write(source, *[f"o{i}" for i in range(6)], configuration=CDF if feed else None)
    base = source.capture_barrier()
    table = _table(source)
    table.update(updates={"amount": "amount * 10"}, predicate="order_id = 'o1'")
    table.delete("order_id = 'o2'")
    _write(source, "o6", "o7")
    merged = pa.table({"order_id": ["o3", "o8"], "amount": [33, 8]})
    _table(source).merge(
        merged, "t.order_id = s.order_id", source_alias="s", target_alias="t"
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    _table(source).delete("order_id = 'o6'")  # appended and deleted within the epoch
    end = source.capture_barrier()
    read = source.read_between(base, end)
    assert read.mode is SinkMode.SNAPSHOT and read.key_columns == ("order_id",)
    removed, added = _rows(source, read.before), _rows(source, read.after)
    old, new = _content(source, base), _content(source, end)
    assert removed - added == old - new
    assert added - removed == new - old
    assert {("o1", 20), ("o3", 33), ("o7", 2), ("o8", 8)} == set(added - removed)
    # through the feed: its change data files, one side each, where the commits had them
    sides = {s.rows for s in read.before + read.after}
    assert sides == ({"removed", "added", ""} if feed else {""})


def test_partition_values_come_from_the_log(table_store: StoreRef) -> None:
    schema = pa.schema([("order_id", pa.string()), ("day", pa.date32())])
    binding = TableBinding("shop.daily", format="delta")
    source = DeltaTableSource(table_store.open(), binding, schema=schema)

    def write(*days: int) -> None:
        rows = pa.table(
            {"order_id": [f"o{d}" for d in days], "day": [datetime.date(2024, 1, d) for d in days]}
        )
        write_deltalake(
            source.uri, rows, mode="append", partition_by=["day"], storage_options=_options(source)
        )

    write(1, 2)
    first = source.capture_barrier()
    write(3)
    second = source.capture_barrier()

    def rows(start: object, end: object) -> list[tuple[str, datetime.date]]:
        splits = source.files_between(start, end)  # type: ignore[arg-type]
        return sorted(
            (r["order_id"], r["day"]) for s in splits for r in source.read_split(s).to_pylist()
        )

    assert rows(None, first) == [
        ("o1", datetime.date(2024, 1, 1)),
        ("o2", datetime.date(2024, 1, 2)),
    ]
    assert rows(first, second) == [("o3", datetime.date(2024, 1, 3))]


def test_a_column_the_table_gained_reads_as_nulls_in_its_older_files(
    table_store: StoreRef,
) -> None:
    """A nullable column added by a schema merge is absent from the files written before
    it: read as nulls there (as a file source reads an absent column), every epoch, while
    an absent required column is still refused."""
    declared = SCHEMA.append(pa.field("note", pa.string()))
    binding = TableBinding("shop.evolving", format="delta")
    source = DeltaTableSource(table_store.open(), binding, schema=declared)
    _write(source, "a")
    base = source.capture_barrier()
    rows = pa.table({"order_id": ["b"], "amount": [1], "note": ["gift"]})
    write_deltalake(
        source.uri, rows, mode="append", schema_mode="merge", storage_options=_options(source)
    )
    end = source.capture_barrier()
    content = [r for s in source.files_between(None, end) for r in source.read_split(s).to_pylist()]
    assert sorted(content, key=str) == [
        {"order_id": "a", "amount": 1, "note": None},
        {"order_id": "b", "amount": 1, "note": "gift"},
    ]
    old = source.files_between(None, base)
    assert source.read_split(old[0]).to_pylist() == [{"order_id": "a", "amount": 1, "note": None}]
    source.schema = declared.append(pa.field("region", pa.string(), nullable=False))
    with pytest.raises(SourceDataError, match=r"required columns \['region'\]"):
        source.read_split(old[0])


def test_a_damaged_data_file_or_a_value_out_of_range_is_a_data_error(
    source: DeltaTableSource,
) -> None:
    _write(source, "a")
    [split] = source.files_between(None, source.capture_barrier())
    source.schema = pa.schema([("order_id", pa.string()), ("amount", pa.int32())])
    rows = pa.table({"order_id": ["big"], "amount": [2**40]})
    write_deltalake(source.uri, rows, mode="overwrite", storage_options=_options(source))
    [big] = source.files_between(None, source.capture_barrier())
    with pytest.raises(SourceDataError, match="cannot read as int32") as out_of_range:
        source.read_split(big)
    assert out_of_range.value.column == "amount" and big.key in out_of_range.value.uri
    source.store.put(split.key, b"\0" * split.size)  # torn: same size, no Parquet left
    with pytest.raises(SourceDataError, match="not a readable Parquet file") as damaged:
        source.read_split(split)
    assert damaged.value.uri == source.store.child(split.key)


@pytest.mark.parametrize(
    ("damage", "found"),
    [
        (lambda data: data + b"\n{garbage", "at line 3: Expecting property name"),
        (lambda data: b"\xff\xfe" + data, "is damaged: 'utf-8' codec can't decode"),
        (lambda data: data + b"\n[1]", "at line 3: a list, not a JSON object"),
    ],
    ids=["not-json", "not-utf-8", "not-an-object"],
)
def test_a_damaged_commit_stops_the_epoch_naming_its_version(
    source: DeltaTableSource, damage: Any, found: str
) -> None:
    _write(source, "a")
    base = source.capture_barrier()
    _write(source, "b")
    end = source.capture_barrier()
    commit = "delta/shop/orders/_delta_log/00000000000000000001.json"
    data = source.store.get(commit).data
    assert len(data.splitlines()) == 2  # commitInfo and add: the damage is line 3
    source.store.put(commit, damage(data))
    with pytest.raises(SourceOffsetError, match="the commit of version 1") as refused:
        source.files_between(base, end)
    assert commit in str(refused.value) and found in str(refused.value)


def _epochs(source: DeltaTableSource, rows: pa.Table) -> tuple[list[Any], list[Any]]:
    """What a first epoch and an incremental one read of `rows`, appended partitioned by
    `part`: the same rows, read from the table's content and from its log."""

    def write(table: pa.Table) -> None:
        write_deltalake(
            source.uri,
            table,
            mode="append",
            partition_by=["part"],
            storage_options=_options(source),
        )

    def read(start: object, end: object) -> list[Any]:
        splits = source.files_between(start, end)  # type: ignore[arg-type]
        found = [r for s in splits for r in source.read_split(s).to_pylist()]
        return sorted(
            ((r["order_id"], r["part"]) for r in found if r["order_id"] != "seed"), key=str
        )

    write(rows.slice(0, 1).set_column(0, "order_id", pa.array(["seed"])))
    base = source.capture_barrier()
    write(rows)
    end = source.capture_barrier()
    return read(None, end), read(base, end)


def test_a_null_partition_value_reads_as_null_in_every_epoch(table_store: StoreRef) -> None:
    """The log writes a null partition value as "": a first epoch (delta-rs) and an
    incremental one (the log) both read it as null, and an empty string too (the
    protocol cannot tell them apart)."""
    schema = pa.schema([pa.field("order_id", pa.string(), nullable=False), ("part", pa.string())])
    binding = TableBinding("shop.by_part", format="delta")
    source = DeltaTableSource(table_store.open(), binding, schema=schema)
    rows = pa.table({"order_id": ["a", "b", "c"], "part": ["x", "", None]})
    first, incremental = _epochs(source, rows)
    assert first == incremental == [("a", "x"), ("b", None), ("c", None)]


def test_a_zoned_timestamp_partition_reads_the_same_in_every_epoch(
    table_store: StoreRef,
) -> None:
    """The log writes a zoned timestamp's partition value in UTC without an offset (newer
    writers with one): every form reads as the same instant, first epoch or incremental."""
    zoned = pa.timestamp("us", "UTC")
    schema = pa.schema([pa.field("order_id", pa.string(), nullable=False), ("part", zoned)])
    binding = TableBinding("shop.by_time", format="delta")
    source = DeltaTableSource(table_store.open(), binding, schema=schema)
    at = datetime.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC)
    first, incremental = _epochs(
        source, pa.table({"order_id": ["a"], "part": pa.array([at], zoned)})
    )
    assert first == incremental == [("a", at)]
    [split] = source.files_between(None, source.capture_barrier())[-1:]
    source.schema = schema.set(1, pa.field("part", pa.timestamp("us", "Europe/Paris")))
    for text in (
        "2024-01-02 03:04:05.678901",
        "2024-01-02T03:04:05.678901Z",
        "2024-01-02T04:04:05.678901+01:00",
    ):
        moved = dataclasses.replace(split, values={"part": text})
        assert source.read_split(moved).column("part").to_pylist() == [at], text


def test_without_deltalake_the_source_says_what_to_install(
    source: DeltaTableSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "deltalake", None)  # an import of it fails
    with pytest.raises(ConfigError, match=r"pip install 'batchpoint\[tables\]'"):
        source.capture_barrier()
