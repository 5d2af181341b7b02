"""Key groups computed by Spark SQL (format 2): the JVM's xxhash64 places every key
where the independent Python implementation does, whatever integer type carries it."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from batchpoint.spark.key_groups import key_group_column
from batchpoint.state.keygroups import KeyHash, assign_to_key_group
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


def _groups(spark: Any, rows: list[tuple], ddl: str, keys: list[str]) -> list[int]:
    df = spark.createDataFrame(rows, ddl)
    column = key_group_column(keys, MAX_PAR, df.schema)
    return [r[0] for r in df.select(column).collect()]


def test_spark_places_each_key_type_where_the_python_reference_does(spark: Any) -> None:
    day = datetime.date(2026, 11, 24)
    rows = [
        (i, i * 7919, f"acct-{i}", f"k{i}".encode(), i % 2 == 0, day + datetime.timedelta(i),
         i / 3, -0.0 if i == 0 else float(i))
        for i in range(-50, 150)
    ]  # fmt: skip
    ddl = "i int, l bigint, s string, b binary, o boolean, d date, x double, z double"
    names = ddl.replace(",", "").split()[::2]
    for position, name in enumerate(names):
        got = _groups(spark, rows, ddl, [name])
        expected = [assign_to_key_group(r[position], MAX_PAR) for r in rows]
        assert got == expected, name
        assert all(0 <= g < MAX_PAR for g in got)
    # several key columns, in order
    got = _groups(spark, rows, ddl, ["s", "i", "d"])
    assert got == [assign_to_key_group((r[2], r[0], r[5]), MAX_PAR) for r in rows]
    assert len(set(got)) > MAX_PAR // 2  # spread, not a constant


def test_a_key_lands_in_one_group_whatever_integer_or_float_type_carries_it(spark: Any) -> None:
    rows = [(i, i, i, i, float(i), float(i)) for i in range(-20, 100)]
    ddl = "t tinyint, s smallint, i int, l bigint, f float, d double"
    by_type = {name: _groups(spark, rows, ddl, [name]) for name in ("t", "s", "i", "l", "f", "d")}
    assert by_type["t"] == by_type["s"] == by_type["i"] == by_type["l"]
    assert by_type["f"] == by_type["d"]
    assert by_type["l"] == [assign_to_key_group(r[3], MAX_PAR) for r in rows]


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
