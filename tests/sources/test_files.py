"""PartitionedFileSource: listing, barriers, exact epoch splits, and bad input."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from batchpoint.codec import envelope
from batchpoint.errors import ConfigError
from batchpoint.sources import (
    PartitionedFileSource,
    PartitionOffset,
    SourceBarrier,
    SourceDataError,
    SourceOffsetError,
    SourceSplit,
)
from batchpoint.sources.barrier import FileEntry, prefix_digest
from batchpoint.sources.readers import select_declared
from batchpoint.storage.local import LocalObjectStore
from demo.payments_data import write_epoch_files

SCHEMA = pa.schema(
    [
        pa.field("account_id", pa.string(), nullable=False),
        pa.field("amount", pa.int64(), nullable=False),
        pa.field("note", pa.string()),  # optional: may be absent or null
    ]
)


@pytest.fixture
def store(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "store")


def jsonl(*records: object) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def source(store: LocalObjectStore, fmt: str = "jsonl", **kwargs: object) -> PartitionedFileSource:
    return PartitionedFileSource(store, "in/src", fmt, schema=SCHEMA, **kwargs)  # type: ignore[arg-type]


def put_files(store: LocalObjectStore, partition: str, *names: str) -> None:
    for name in names:
        store.put(f"in/src/{partition}/{name}", jsonl({"account_id": "a", "amount": 1}))


# -- listing and barriers ---------------------------------------------------------------


def test_partitions_are_discovered_or_declared(store: LocalObjectStore) -> None:
    put_files(store, "p1", "a.jsonl")
    put_files(store, "p0", "a.jsonl")
    put_files(store, "_staging", "a.jsonl")
    put_files(store, ".trash", "a.jsonl")
    assert source(store).partitions() == ["p0", "p1"]
    declared = source(store, partitions=["p1", "p9"])
    assert declared.partitions() == ["p1", "p9"]
    assert declared.capture_barrier().counts() == {"p1": 1, "p9": 0}


def test_list_files_orders_by_name_and_skips_hidden(store: LocalObjectStore) -> None:
    put_files(store, "p0", "f2.jsonl", "f10.jsonl", "f1.jsonl", "_SUCCESS", ".f3.jsonl.part")
    put_files(store, "p0", "_temporary/0/f4.jsonl", "sub/f0.jsonl")
    assert source(store).list_files("p0") == [
        "in/src/p0/f1.jsonl",
        "in/src/p0/f10.jsonl",
        "in/src/p0/f2.jsonl",
        "in/src/p0/sub/f0.jsonl",
    ]


def test_barrier_records_count_last_name_and_digest(store: LocalObjectStore) -> None:
    put_files(store, "p0", "a", "b")
    put_files(store, "p1", "a")
    barrier = source(store).capture_barrier()
    assert barrier.counts() == {"p0": 2, "p1": 1}
    assert barrier["p0"].last == "b" and barrier["p0"].digest.startswith("sha256:")
    assert SourceBarrier.from_json(json.loads(json.dumps(barrier.to_json()))) == barrier
    assert source(store).capture_barrier() == barrier  # nothing arrived: same barrier


def test_files_between_reads_every_file_exactly_once_and_late_files_later(
    store: LocalObjectStore,
) -> None:
    src = PartitionedFileSource(store, "in/pay", "jsonl")
    previous: SourceBarrier | None = None
    seen: list[str] = []
    for epoch in range(5):
        written = write_epoch_files(store, "in/pay", epoch, events_per_epoch=200)
        barrier = src.capture_barrier()
        splits = src.files_between(previous, barrier)
        # Exactly what arrived since the last barrier, late files included.
        assert sorted(s.key for s in splits) == sorted(written)
        if epoch > 0:
            assert any(f"late-e{epoch - 1:05d}" in s.key for s in splits)
        for split in splits:
            assert src.list_files(split.partition)[split.index] == split.key
            assert split.size == store.head(split.key).size
        seen.extend(s.key for s in splits)
        previous = barrier
    everything = [k for p in src.partitions() for k in src.list_files(p)]
    assert sorted(seen) == sorted(everything) and len(set(seen)) == len(seen)


def test_an_epoch_replayed_later_reads_the_same_files(store: LocalObjectStore) -> None:
    put_files(store, "p0", "a", "b")
    src = source(store)
    barrier = src.capture_barrier()
    first = src.files_between(None, barrier)
    put_files(store, "p0", "c")
    put_files(store, "p1", "a")
    assert src.files_between(None, barrier) == first
    later = src.files_between(barrier, src.capture_barrier())
    assert [(s.partition, s.index) for s in later] == [("p0", 2), ("p1", 0)]


def test_int_offsets_are_accepted_unverified(store: LocalObjectStore) -> None:
    put_files(store, "p0", "a", "b", "c")
    splits = source(store).files_between({"p0": 1}, {"p0": 3})
    assert [s.key.rsplit("/", 1)[1] for s in splits] == ["b", "c"]


def test_end_before_start_is_refused(store: LocalObjectStore) -> None:
    put_files(store, "p0", "a", "b")
    with pytest.raises(SourceOffsetError, match=r"'p0'.*end offset 1 is before the start offset 2"):
        source(store).files_between({"p0": 2}, {"p0": 1})


def test_offset_beyond_the_files_present_is_refused(store: LocalObjectStore) -> None:
    put_files(store, "p0", "a", "b")
    with pytest.raises(SourceOffsetError, match=r"'p0'.*covers 5 files but only 2 are present"):
        source(store).files_between(None, {"p0": 5})


def test_partition_dropped_from_the_end_barrier_is_refused(store: LocalObjectStore) -> None:
    put_files(store, "p0", "a")
    put_files(store, "p1", "a")
    with pytest.raises(SourceOffsetError, match=r"'p1'.*end barrier does not name it"):
        source(store).files_between({"p0": 0, "p1": 1}, {"p0": 1})


def test_files_directly_under_a_root_without_partitions_are_refused(
    store: LocalObjectStore,
) -> None:
    """They would never be read: every epoch would run on nothing, in silence."""
    src = source(store)
    assert dict(src.capture_barrier()) == {}  # an empty root: nothing landed yet
    store.put("in/src/_SUCCESS", b"")  # hidden: a writer's marker
    assert dict(src.capture_barrier()) == {}
    store.put("in/src/e00001.jsonl", jsonl({"account_id": "a", "amount": 1}))
    with pytest.raises(ConfigError, match=r"1 file\(s\) directly under its root \(e00001.jsonl\)"):
        src.capture_barrier()
    put_files(store, "p0", "a")  # with a partition, the layout is the documented one
    assert list(src.capture_barrier()) == ["p0"]


def test_a_partition_seen_empty_may_disappear(store: LocalObjectStore) -> None:
    """A writer's temporary folder captured at offset 0, then cleaned up: it covered
    nothing, so the epochs after it go on (they were all refused)."""
    put_files(store, "p0", "a")
    put_files(store, "p2", "_temporary")  # hidden from the listing: p2 is at offset 0
    src = source(store)
    base = src.capture_barrier()
    assert base.offset("p2") == 0
    store.delete("in/src/p2/_temporary")
    put_files(store, "p0", "b")
    end = src.capture_barrier()
    assert "p2" not in end
    src.verify_barrier(base)
    assert [s.key.rsplit("/", 1)[1] for s in src.files_between(base, end)] == ["b"]


def test_deleted_file_before_the_offset_is_refused(store: LocalObjectStore) -> None:
    put_files(store, "p0", "a", "b", "c")
    src = source(store)
    barrier = src.capture_barrier()
    store.delete("in/src/p0/a")
    put_files(store, "p0", "d")  # the count alone would still look fine
    with pytest.raises(SourceOffsetError, match=r"'p0'.*file.* before 'c' were deleted"):
        src.files_between(None, barrier)
    with pytest.raises(SourceOffsetError, match="'p0'"):
        src.verify_barrier(barrier)


def test_file_inserted_before_the_offset_is_refused(store: LocalObjectStore) -> None:
    put_files(store, "p0", "b", "c")
    src = source(store)
    barrier = src.capture_barrier()
    put_files(store, "p0", "a")  # sorts before files already read: positions shift
    with pytest.raises(SourceOffsetError, match=r"sorting before 'c' appeared.*sort last"):
        src.files_between(barrier, src.capture_barrier())
    store.delete("in/src/p0/a")  # the way out the message gives: renamed to sort last
    put_files(store, "p0", "d")
    assert [s.key.rsplit("/", 1)[1] for s in src.files_between(barrier, src.capture_barrier())] == [
        "d"
    ]


def test_last_file_renamed_is_refused(store: LocalObjectStore) -> None:
    put_files(store, "p0", "a", "b")
    src = source(store)
    barrier = src.capture_barrier()
    store.delete("in/src/p0/b")
    put_files(store, "p0", "b2")
    with pytest.raises(SourceOffsetError, match=r"'b' .*deleted or renamed"):
        src.verify_barrier(barrier)


def test_swap_or_rewrite_before_the_last_file_is_caught_by_the_digest(
    store: LocalObjectStore,
) -> None:
    put_files(store, "p0", "a", "c", "d")
    src = source(store)
    barrier = src.capture_barrier()
    store.delete("in/src/p0/a")
    put_files(store, "p0", "b")  # same count, same last name, different files
    with pytest.raises(SourceOffsetError, match="not the ones recorded"):
        src.verify_barrier(barrier)
    store.delete("in/src/p0/b")
    put_files(store, "p0", "a")
    src.verify_barrier(barrier)  # back as it was
    store.put("in/src/p0/c", jsonl({"account_id": "a", "amount": 100}))  # rewritten in place
    with pytest.raises(SourceOffsetError, match="rewritten"):
        src.verify_barrier(barrier)


def test_barrier_json_and_offset_validation() -> None:
    barrier = SourceBarrier({"p1": 2, "p0": {"offset": 1, "last": "x", "digest": "sha256:0"}})
    assert list(barrier) == ["p0", "p1"]
    assert barrier.offset("p9") == 0 and barrier.total() == 3
    assert not barrier["p1"].verified and barrier["p0"].verified
    with pytest.raises(ConfigError):
        PartitionOffset(-1)
    with pytest.raises(ConfigError):
        SourceBarrier({"p0": "3"})


def test_split_json_roundtrip() -> None:
    split = SourceSplit("p0", 3, "in/src/p0/x.jsonl", 12)
    assert SourceSplit.from_json(json.loads(json.dumps(split.to_json()))) == split


def test_bad_configuration_is_refused(store: LocalObjectStore) -> None:
    with pytest.raises(ConfigError, match="format 'xml'"):
        PartitionedFileSource(store, "in", "xml")
    with pytest.raises(ConfigError, match="invalid"):
        PartitionedFileSource(store, "in", "csv", partitions=["a/b"])
    with pytest.raises(ConfigError, match="twice"):
        PartitionedFileSource(store, "in", "csv", partitions=["a", "a"])
    put_files(store, "p0", "a")
    schemaless = PartitionedFileSource(store, "in/src", "jsonl")
    with pytest.raises(ConfigError, match="no declared schema"):
        schemaless.read_split(schemaless.files_between(None, schemaless.capture_barrier())[0])


# -- reading ----------------------------------------------------------------------------


def read_one(store: LocalObjectStore, fmt: str, data: bytes, **kwargs: object) -> pa.Table:
    store.put(f"in/src/p0/f.{fmt}", data)
    src = source(store, fmt, **kwargs)
    [split] = src.files_between(None, src.capture_barrier())
    return src.read_split(split)


def parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


EXPECTED = [
    {"account_id": "a", "amount": 5, "note": "x"},
    {"account_id": "b", "amount": -3, "note": None},
]


def test_reads_jsonl_to_the_declared_schema(store: LocalObjectStore) -> None:
    data = jsonl(
        {"amount": 5, "account_id": "a", "note": "x", "extra": [1]},
        {"account_id": "b", "amount": -3},
    )
    table = read_one(store, "jsonl", data + b"\n")
    assert table.schema == SCHEMA and table.to_pylist() == EXPECTED


def test_reads_csv_to_the_declared_schema(store: LocalObjectStore) -> None:
    table = read_one(store, "csv", b"extra,account_id,amount,note\n1,a,5,x\n2,b,-3,\n")
    assert table.schema == SCHEMA and table.to_pylist() == EXPECTED


def test_csv_does_not_turn_words_like_na_into_nulls(store: LocalObjectStore) -> None:
    table = read_one(store, "csv", b"account_id,amount\nNA,1\nnull,2\n")
    assert table.column("account_id").to_pylist() == ["NA", "null"]


def test_reads_parquet_casting_to_the_declared_schema(store: LocalObjectStore) -> None:
    table = pa.table(
        {
            "account_id": ["a", "b"],
            "amount": pa.array([5, -3], pa.int32()),
            "note": ["x", None],
        }
    )
    assert read_one(store, "parquet", parquet_bytes(table)).to_pylist() == EXPECTED


def test_large_files_are_downloaded_instead_of_held_in_memory(
    store: LocalObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_get(key: str) -> None:
        raise AssertionError(f"get({key}) used for a large file")

    monkeypatch.setattr(store, "get", no_get)
    table = read_one(store, "jsonl", jsonl(*EXPECTED), download_threshold=0)
    assert table.to_pylist() == EXPECTED


def test_empty_files_are_empty_tables(store: LocalObjectStore) -> None:
    assert read_one(store, "jsonl", b"").num_rows == 0
    store.delete("in/src/p0/f.jsonl")
    assert read_one(store, "csv", b"").num_rows == 0


def test_a_file_gone_or_rewritten_after_listing_is_refused(store: LocalObjectStore) -> None:
    store.put("in/src/p0/f.jsonl", jsonl(*EXPECTED))
    src = source(store)
    [split] = src.files_between(None, src.capture_barrier())
    store.put("in/src/p0/f.jsonl", jsonl(*EXPECTED, *EXPECTED))
    with pytest.raises(SourceOffsetError, match="rewritten"):
        src.read_split(split)
    store.delete("in/src/p0/f.jsonl")
    with pytest.raises(SourceOffsetError, match="no longer exists"):
        src.read_split(split)


def bad(store: LocalObjectStore, fmt: str, data: bytes) -> SourceDataError:
    with pytest.raises(SourceDataError) as caught:
        read_one(store, fmt, data)
    error = caught.value
    assert error.uri == store.child(f"in/src/p0/f.{fmt}")
    assert error.uri in str(error)
    return error


GOOD = {"account_id": "a", "amount": 1}


def test_malformed_json_line_names_file_and_line(store: LocalObjectStore) -> None:
    data = jsonl(GOOD, GOOD) + b'{"account_id": "a", "amount": 1\n' + jsonl(GOOD)
    error = bad(store, "jsonl", data)
    assert error.line == 3 and "not valid JSON" in str(error) and "line 3" in str(error)


def test_json_line_that_is_not_an_object(store: LocalObjectStore) -> None:
    error = bad(store, "jsonl", jsonl(GOOD, [1, 2]))
    assert error.line == 2 and "expected a JSON object" in error.problem


def test_json_record_missing_its_key(store: LocalObjectStore) -> None:
    error = bad(store, "jsonl", jsonl(GOOD, GOOD, {"amount": 7}))
    assert (error.line, error.column) == (3, "account_id")
    assert "required column 'account_id' is missing" in str(error)


def test_json_record_with_null_key(store: LocalObjectStore) -> None:
    error = bad(store, "jsonl", jsonl(GOOD, {"account_id": None, "amount": 7}))
    assert (error.line, error.column) == (2, "account_id") and "is null" in error.problem


def test_json_value_of_the_wrong_type(store: LocalObjectStore) -> None:
    error = bad(store, "jsonl", jsonl(GOOD, {"account_id": "a", "amount": "ten"}))
    assert (error.line, error.column) == (2, "amount") and "not a valid int64" in error.problem


def test_line_numbers_hold_in_files_of_many_blocks(store: LocalObjectStore) -> None:
    data = jsonl(*[GOOD] * 50_000) + b"oops\n"
    assert bad(store, "jsonl", data).line == 50_001


def test_csv_missing_required_column(store: LocalObjectStore) -> None:
    error = bad(store, "csv", b"account_id,note\na,x\n")
    assert "missing required column(s) 'amount'" in error.problem and "account_id, note" in str(
        error
    )


def test_csv_empty_key(store: LocalObjectStore) -> None:
    error = bad(store, "csv", b"account_id,amount\na,1\n\nb,2\n,3\n")
    assert (error.line, error.column) == (5, "account_id") and "is empty" in error.problem


def test_csv_bad_value_and_bad_row(store: LocalObjectStore) -> None:
    error = bad(store, "csv", b"account_id,amount\na,1\nb,x\n")
    assert (error.line, error.column) == (3, "amount") and "'x' is not a valid int64" in str(error)
    store.delete("in/src/p0/f.csv")
    error = bad(store, "csv", b"account_id,amount\na,1\nb\n")
    assert error.line == 3 and "expected 2 fields" in error.problem


def test_csv_duplicate_column(store: LocalObjectStore) -> None:
    error = bad(store, "csv", b"account_id,amount,amount\na,1,2\n")
    assert error.column == "amount" and "more than once" in error.problem


def test_parquet_missing_column_null_key_and_garbage(store: LocalObjectStore) -> None:
    error = bad(store, "parquet", parquet_bytes(pa.table({"account_id": ["a"]})))
    assert "missing required column(s) 'amount'" in error.problem
    store.delete("in/src/p0/f.parquet")
    error = bad(
        store, "parquet", parquet_bytes(pa.table({"account_id": ["a", None], "amount": [1, 2]}))
    )
    assert (error.row, error.column) == (1, "account_id")
    store.delete("in/src/p0/f.parquet")
    error = bad(store, "parquet", b"definitely not parquet")
    assert "not a readable Parquet file" in error.problem
    store.delete("in/src/p0/f.parquet")
    error = bad(store, "parquet", parquet_bytes(pa.table({"account_id": ["a"], "amount": ["x"]})))
    assert error.column == "amount" and "cannot read as int64" in error.problem


# -- names that are not UTF-8 -------------------------------------------------------------


def test_a_file_name_that_is_not_utf8_is_read_and_its_barrier_round_trips(
    store: LocalObjectStore, tmp_path: Path
) -> None:
    """A local folder may hold a name that is not UTF-8 (a Latin-1 producer's): Python
    lists it with surrogate escapes, its digest covers its bytes, and the barrier survives
    the record codec's JSON, so the trigger neither crashes nor loses the file."""
    put_files(store, "p0", "0001.jsonl")
    folder = os.fsencode(tmp_path / "store" / "in" / "src" / "p0")
    with open(folder + b"/0002-\xe9t\xe9.jsonl", "wb") as handle:
        handle.write(jsonl({"account_id": "b", "amount": 2}))
    src = source(store)
    barrier = src.capture_barrier()
    assert barrier["p0"].last == "0002-\udce9t\udce9.jsonl"
    stored = envelope.encode("test", 1, {"barrier": barrier.to_json()})
    _, body = envelope.decode("test", stored, "test", (1,))
    recorded = SourceBarrier.from_json(body["barrier"])
    assert recorded == barrier
    src.verify_barrier(recorded)
    rows = src.read_splits(src.files_between(None, recorded)).column("account_id").to_pylist()
    assert rows == ["a", "b"]


def test_digests_of_utf8_names_are_unchanged() -> None:
    """Barriers recorded by earlier releases must still verify: a UTF-8 name's digest is
    the hash of its UTF-8 bytes, as it always was."""
    files = [FileEntry("0001.jsonl", 12), FileEntry("été/0002.jsonl", 3)]
    expected = hashlib.sha256("0001.jsonl\x0012\nété/0002.jsonl\x003\n".encode()).hexdigest()
    assert prefix_digest(files) == f"sha256:{expected}"


# -- a table file's rows as declared (Delta, Iceberg, a pipeline's output) ---------------


def test_select_declared_fills_absent_nullable_columns_and_refuses_the_rest() -> None:
    table = pa.table({"amount": pa.array([1, 2**40]), "account_id": ["a", "b"], "x": [0, 0]})
    declared = pa.schema([pa.field("account_id", pa.string(), nullable=False), ("note", pa.int8())])
    out = select_declared(table, declared, "s3://b/f.parquet")
    assert out.schema == pa.schema([("account_id", pa.string()), ("note", pa.int8())])
    assert out.to_pylist() == [{"account_id": "a", "note": None}, {"account_id": "b", "note": None}]
    required = declared.append(pa.field("region", pa.string(), nullable=False))
    with pytest.raises(SourceDataError, match=r"required columns \['region'\]") as missing:
        select_declared(table, required, "s3://b/f.parquet")
    assert missing.value.uri == "s3://b/f.parquet"
    narrow = pa.schema([("amount", pa.int32())])
    with pytest.raises(SourceDataError, match="cannot read as int32") as out_of_range:
        select_declared(table, narrow, "s3://b/f.parquet")
    assert out_of_range.value.column == "amount"
