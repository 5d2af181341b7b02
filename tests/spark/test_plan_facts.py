"""What the optimizer proves on a classic session, read by plan_facts: one row per key
(`distinct_by`), which lets a changelog compare the new state by a keyed join. A wrong
"proven" would lose changes of keys with several rows, so each case that must not be
proven is as much the test as those that must."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.spark


def test_one_row_per_key_is_proven_only_where_the_plan_groups_by_the_key(spark: Any) -> None:
    from pyspark.sql import functions as F

    from batchpoint.spark.plan_facts import distinct_by

    rows = spark.range(40).select(
        (F.col("id") % 7).alias("key"), (F.col("id") % 3).alias("k2"), F.col("id").alias("v")
    )
    by_key = rows.groupBy("key").agg(F.sum("v").alias("total"))
    by_both = rows.groupBy("key", "k2").agg(F.sum("v").alias("total"))
    proven = {
        "an aggregation by the key": (by_key, ["key"]),
        "its columns reordered": (by_key.select("total", "key"), ["key"]),
        "a filter of it": (by_key.where("total > 3"), ["key"]),
        "by more keys than grouped": (by_key, ["key", "total"]),
        "by both grouping columns, in any order": (by_both, ["k2", "key"]),
        "duplicates dropped by the key": (rows.dropDuplicates(["key"]), ["key"]),
    }
    not_proven = {
        "rows as they come": (rows, ["key"]),
        "grouped by more than the key": (by_both, ["key"]),
        "a union of two aggregations": (by_key.unionByName(by_key), ["key"]),
        "the key renamed": (by_key.select(F.col("key").alias("k"), "total"), ["key"]),
        "the key computed anew": (by_key.select((F.col("key") % 2).alias("key")), ["key"]),
        "joined to rows with several per key": (by_key.join(rows, "key"), ["key"]),
        "two columns of the key's name": (by_key.join(rows, by_key.total == rows.v), ["key"]),
    }
    assert {name: distinct_by(df, keys) for name, (df, keys) in proven.items()} == dict.fromkeys(
        proven, True
    )
    assert {
        name: distinct_by(df, keys) for name, (df, keys) in not_proven.items()
    } == dict.fromkeys(not_proven, False)
