"""task_rows: the rows a read hands its Spark tasks, row i alone in partition i, each value
as it was given, whatever its characters and whatever the session's parser settings."""

from __future__ import annotations

import random
from typing import Any

import pytest

from batchpoint.spark.task_rows import task_rows

pytestmark = pytest.mark.spark

ODD = ["", "'", "\\", "\\'", '"{\\"a\\": 1}"', "line\nbreak", "é€😀", "unhex('00')", "a`b"]


def _rows(rng: random.Random, count: int) -> list[tuple[Any, ...]]:
    def text() -> str | None:
        pick = rng.random()
        if pick < 0.1:
            return None
        if pick < 0.5:
            return rng.choice(ODD) + rng.choice(ODD)
        return "".join(chr(rng.choice([rng.randint(32, 126), rng.randint(160, 0x2FFF)]))
                       for _ in range(rng.randint(0, 40)))  # fmt: skip

    return [(i, text(), rng.randint(-(2**31), 2**31 - 1), rng.randint(-(2**62), 2**62))
            for i in range(count)]  # fmt: skip


@pytest.mark.parametrize("escaped_literals", ["false", "true"])
def test_each_row_arrives_whole_in_its_own_partition(spark: Any, escaped_literals: str) -> None:
    from pyspark.sql import functions as F

    rng = random.Random(42)
    spark.conf.set("spark.sql.parser.escapedStringLiterals", escaped_literals)
    try:
        for count in (1, 2, 7, 60):
            rows = _rows(rng, count)
            frame = task_rows(spark, rows, "idx int, text string, small int, big bigint")
            assert frame.rdd.getNumPartitions() == count
            got = frame.select("*", F.spark_partition_id().alias("p")).collect()
            assert [(r.idx, r.text, r.small, r.big) for r in got] == rows
            assert [r.p for r in got] == list(range(count))
    finally:
        spark.conf.unset("spark.sql.parser.escapedStringLiterals")


def test_rows_out_of_order_or_of_another_type_are_refused(spark: Any) -> None:
    with pytest.raises(ValueError, match=r"numbered 0\.\.n-1"):
        task_rows(spark, [(1, "a")], "idx int, text string")
    with pytest.raises(ValueError, match="is not int, bigint or string"):
        task_rows(spark, [(0, 1.5)], "idx int, share double")
    assert task_rows(spark, [], "idx int, text string").count() == 0
