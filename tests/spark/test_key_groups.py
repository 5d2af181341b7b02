"""Key groups computed by Spark SQL (format 3: Spark's Murmur3 hash, bits reversed when
max parallelism is a power of two; format 2: xxhash64): the JVM places every key where
the independent Python implementations do, whatever integer type carries it."""

from __future__ import annotations

import datetime
import struct
from typing import Any

import pytest
from pyspark.sql import functions as F

from batchpoint.spark.key_groups import key_group_column
from batchpoint.state.keygroups import KeyHash, assign_to_key_group
from batchpoint.state.murmur3 import spark_hash
from batchpoint.state.xxhash64 import xxh64

pytestmark = pytest.mark.spark

MAX_PAR = 128


def test_xxh64_matches_the_published_test_vectors() -> None:
    assert xxh64(b"") == 0xEF46DB3751D8E999
    assert xxh64(b"a") == 0xD24EC4F1A98C6E5B
    assert xxh64(b"abc") == 0x44BC2CF5AD770999
    # every tail path: 32-byte stripes, 8-byte lanes, a 4-byte word and single bytes
    long = bytes(range(256)) * 2
    assert len({xxh64(long[:n], 7) for n in range(0, 80)}) == 80


def _groups(
    spark: Any,
    rows: list[tuple],
    ddl: str,
    keys: list[str],
    kind: KeyHash = KeyHash.MURMUR3,
    max_par: int = MAX_PAR,
) -> list[int]:
    df = spark.createDataFrame(rows, ddl)
    column = key_group_column(keys, max_par, df.schema, kind)
    return [r[0] for r in df.select(column).collect()]


#: NaNs of other bits: Spark hashes every NaN as Java's one NaN (they are one key).
NANS = {
    i: struct.unpack("<d", struct.pack("<q", bits))[0]
    for i, bits in ((1, 0x7FF8000000000000), (2, 0x7FF8000000000123), (3, -0x8000000000000))
}


@pytest.mark.parametrize("max_par", [MAX_PAR, 96, 1])
@pytest.mark.parametrize("kind", [KeyHash.MURMUR3, KeyHash.XXHASH64])
def test_spark_places_each_key_type_where_the_python_reference_does(
    spark: Any, kind: KeyHash, max_par: int
) -> None:
    day = datetime.date(2026, 11, 24)
    rows = [
        (i, i * 7919, f"acct-{i}", f"k{i}".encode(), i % 2 == 0, day + datetime.timedelta(i),
         i / 3, NANS.get(i, -0.0 if i == 0 else float(i)))
        for i in range(-50, 150)
    ]  # fmt: skip
    ddl = "i int, l bigint, s string, b binary, o boolean, d date, x double, z double"
    names = ddl.replace(",", "").split()[::2]
    for position, name in enumerate(names):
        got = _groups(spark, rows, ddl, [name], kind, max_par)
        expected = [assign_to_key_group(r[position], max_par, kind) for r in rows]
        assert got == expected, name
        assert all(0 <= g < max_par for g in got)
    # several key columns, in order
    got = _groups(spark, rows, ddl, ["s", "i", "d"], kind, max_par)
    assert got == [assign_to_key_group((r[2], r[0], r[5]), max_par, kind) for r in rows]
    assert len(set(got)) > max_par // 2  # spread, not a constant


@pytest.mark.parametrize("kind", list(KeyHash))
def test_a_key_lands_in_one_group_whatever_integer_or_float_type_carries_it(
    spark: Any, kind: KeyHash
) -> None:
    """In every format: what lets an integer key column widen (int -> bigint) with no
    stored row changing key group (state/evolution/resolve.py)."""
    rows = [(i, i, i, i, float(i), float(i)) for i in range(-20, 100)]
    ddl = "t tinyint, s smallint, i int, l bigint, f float, d double"
    by_type = {n: _groups(spark, rows, ddl, [n], kind) for n in ("t", "s", "i", "l", "f", "d")}
    assert by_type["t"] == by_type["s"] == by_type["i"] == by_type["l"]
    assert by_type["f"] == by_type["d"]
    assert by_type["l"] == [assign_to_key_group(r[3], MAX_PAR, kind) for r in rows]
    ints = [(v, v) for v in (-(2**31), -(2**31) + 1, -1, 0, 2**31 - 2, 2**31 - 1, 123456789)]
    wide = _groups(spark, ints, "i int, l bigint", ["l", "i"], kind)  # a key of two columns
    assert wide == _groups(spark, ints, "i bigint, l bigint", ["l", "i"], kind)


def test_the_format_1_hash_is_still_the_python_one(spark: Any) -> None:
    rows = [(f"acct-{i}",) for i in range(40)]
    df = spark.createDataFrame(rows, "s string")
    column = key_group_column(["s"], MAX_PAR, df.schema, KeyHash.BLAKE2B)
    got = [r[0] for r in df.select(column).collect()]
    assert got == [assign_to_key_group(r[0], MAX_PAR, KeyHash.BLAKE2B) for r in rows]
    assert got != [assign_to_key_group(r[0], MAX_PAR) for r in rows]


def test_a_null_key_fails_the_job_saying_so(spark: Any) -> None:
    df = spark.createDataFrame([("a", 1), (None, 2)], "s string, n int")
    with pytest.raises(Exception, match="a key column is null"):
        df.select(key_group_column(["s", "n"], MAX_PAR, df.schema)).collect()


@pytest.mark.parametrize(("partitions", "max_par"), [(1, 8), (2, 128), (4, 128), (16, 64), (8, 8)])
def test_spark_hash_partitioning_puts_each_format_3_key_group_range_in_one_partition(
    spark: Any, partitions: int, max_par: int
) -> None:
    """What aligned writes rest on: partition p of Spark's hash partitioning by the key
    holds exactly the key groups whose top log2(partitions) bits are p reversed, one
    contiguous range."""
    df = spark.createDataFrame([(f"acct-{i}", i) for i in range(2000)], "s string, l bigint")
    for keys in (["s"], ["l"], ["s", "l"]):
        placed = df.repartition(partitions, *keys).select(
            F.spark_partition_id().alias("p"), key_group_column(keys, max_par, df.schema)
        )
        width = max_par // partitions
        ranges: dict[int, set[int]] = {}
        for p, group in placed.collect():
            ranges.setdefault(p, set()).add(group // width)
        assert all(len(units) == 1 for units in ranges.values()), (keys, ranges)
        assert len({u for units in ranges.values() for u in units}) == len(ranges)


def test_spark_hash_matches_the_python_murmur3_over_every_type_and_tail_length(spark: Any) -> None:
    texts = ["", "a", "ab", "abc", "abcd", "abcde", "é", "日本語x", "\x00\xff"]
    longs = [0, 1, -1, 2**63 - 1, -(2**63), 42, 7919 * 7919]
    rows = [(t, n, float(n) / 3, n % 2 == 0) for t in texts for n in longs]
    df = spark.createDataFrame(rows, "t string, n bigint, x double, b boolean")
    hashed = df.select("*", F.hash("t", "n").alias("h1"), F.hash("x", "b").alias("h2"))
    for t, n, x, b, h1, h2 in hashed.collect():
        assert h1 == spark_hash([("bytes", t), ("long", n)]), (t, n)
        assert h2 == spark_hash([("double", x), ("int", int(b))]), (x, b)
