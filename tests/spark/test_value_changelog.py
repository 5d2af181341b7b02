"""A value state's changelog (one row per key: a keyed join) against the array comparison
every state may use: the same rows on one-row-per-key data, read back the same through a
chain of layers, a duplicated key refused, and no shuffle or sort beyond a plain join's."""

from __future__ import annotations

import random
import re
from collections import Counter
from typing import Any

import pytest

from batchpoint.storage.base import ObjectStore

pytestmark = pytest.mark.spark

MAX_PAR = 16
SCHEMA = "account string, balance bigint, note string, tags array<string>"
WHAT = "operator 'balances': state 'balances'"


def _write(store: ObjectStore, df: Any, layer: int) -> list:
    from batchpoint.spark.state_io import WriteSpec, write_keyed_state

    spec = WriteSpec(f"chk-{layer}/data", "s", f"a{layer}", ("account",), MAX_PAR, 3, layer=layer)
    return write_keyed_state(df, store, spec)


def _read(spark: Any, store: ObjectStore, handles: list) -> list:
    from batchpoint.spark.state_io import ReadSpec, read_keyed_state

    return read_keyed_state(spark, store, handles, ReadSpec(schema=SCHEMA)).collect()


def _bag(rows: Any) -> Counter:
    return Counter(tuple(tuple(v) if isinstance(v, list) else v for v in r) for r in rows)


def _value(rng: random.Random) -> tuple:
    """Values with nulls everywhere a column allows them (a null inside an array too)."""
    balance = rng.choice([None, 0, rng.randrange(-50, 50)])
    note = rng.choice([None, "", "x", "y"])
    tags = rng.choice([None, [], ["a"], ["a", None], ["b", "a"]])
    return balance, note, tags


def _versions(seed: int, count: int) -> list[list[tuple]]:
    """Random epochs of one-row-per-key data: inserts, updates (to nulls too, or to the
    same values), deletes, and keys that come back after a delete."""
    rng = random.Random(seed)
    state = {f"k{i}": _value(rng) for i in range(rng.randrange(0, 60))}
    versions = [sorted((k, *v) for k, v in state.items())]
    for _ in range(count - 1):
        for key in list(state):
            roll = rng.random()
            if roll < 0.15:
                del state[key]
            elif roll < 0.4:
                state[key] = _value(rng)
        for _ in range(rng.randrange(0, 15)):
            state[f"k{rng.randrange(0, 90)}"] = _value(rng)
        versions.append(sorted((k, *v) for k, v in state.items()))
    return versions


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_join_changelog_is_the_array_changelog_and_restores_through_a_chain(
    spark: Any, state_store: ObjectStore, seed: int
) -> None:
    from batchpoint.spark.state_changelog import changelog
    from batchpoint.spark.value_changelog import value_changelog

    versions = _versions(seed, 4)
    frames = [spark.createDataFrame(v, SCHEMA).repartition(3) for v in versions]
    handles = _write(state_store, frames[0], 0)
    for layer in range(1, len(frames)):
        old, new = frames[layer - 1], frames[layer]
        joined = value_changelog(new, old, ["account"], WHAT)
        assert joined.columns == changelog(new, old, ["account"]).columns
        assert _bag(joined.collect()) == _bag(changelog(new, old, ["account"]).collect())
        handles += _write(state_store, joined, layer)
        assert _bag(_read(spark, state_store, handles)) == _bag(versions[layer])
    assert max(h.layer for h in handles) == len(versions) - 1


def test_a_second_row_for_a_key_of_a_value_state_fails_the_write(
    spark: Any, state_store: ObjectStore
) -> None:
    from batchpoint.spark.value_changelog import value_changelog

    old = spark.createDataFrame([("k1", 1, "secret-note", None)], SCHEMA)
    new = spark.createDataFrame([("k1", 2, "secret-note", None), ("k1", 3, None, None)], SCHEMA)
    with pytest.raises(Exception, match=re.escape(WHAT)) as raised:
        _write(state_store, value_changelog(new, old, ["account"], WHAT), 1)
    assert "declared a value state" in str(raised.value)
    assert "secret-note" not in str(raised.value) and "k1" not in str(raised.value)
    # A key that is new this epoch is checked as well as one that was there before.
    fresh = spark.createDataFrame([("k2", 1, None, None), ("k2", 1, None, None)], SCHEMA)
    with pytest.raises(Exception, match="declared a value state"):
        value_changelog(fresh.unionByName(new.limit(0)), old, ["account"], WHAT).collect()


@pytest.mark.parametrize("proven", [False, True])
def test_a_base_with_several_rows_of_a_key_is_replaced_by_the_value_row(
    spark: Any, state_store: ObjectStore, proven: bool
) -> None:
    """A state declared a value state since its base, or one whose new rows Spark's plan
    proves one per key: the base's rows of a key are all replaced by its one new row (or
    removed), `_net` counting them all."""
    from batchpoint.spark.value_changelog import value_changelog

    old_rows = [("a", 1, None, None), ("a", 2, None, None), ("b", 3, "x", None)] * 2
    new_rows = [("a", 3, None, None), ("c", 4, None, ["t"])]
    old = spark.createDataFrame(old_rows, SCHEMA).repartition(2)
    handles = _write(state_store, old, 0)
    new = spark.createDataFrame(new_rows, SCHEMA)
    changes = value_changelog(new, old, ["account"], WHAT, proven_distinct=proven)
    assert sorted((r.account, r._change, r._net) for r in changes.collect()) == [
        ("a", 1, -3), ("b", -1, -2), ("c", 1, 1),
    ]  # fmt: skip
    handles += _write(state_store, changes, 1)
    assert _bag(_read(spark, state_store, handles)) == _bag(new_rows)


def _plan_nodes(df: Any) -> Counter:
    plan = df._jdf.queryExecution().executedPlan().toString()
    return Counter(re.findall(r"\b(Exchange|Sort|SortAggregate|ObjectHashAggregate)\b", plan))


@pytest.mark.parametrize("seed", [4, 5])
def test_a_state_proven_one_row_per_key_is_compared_by_the_join_of_any_state(
    spark: Any, state_store: ObjectStore, seed: int
) -> None:
    """A state that is not declared a value state, but whose new rows come from an
    aggregation by the key: the join (with no count or check on the new side) gives the
    array comparison's changes, read back the same through a chain."""
    from pyspark.sql import functions as F

    from batchpoint.spark.plan_facts import distinct_by
    from batchpoint.spark.state_changelog import changelog
    from batchpoint.spark.value_changelog import value_changelog

    def aggregated(rows: list[tuple]) -> Any:
        df = spark.createDataFrame(rows, SCHEMA).repartition(3)
        values = [F.first(c).alias(c) for c in ("balance", "note", "tags")]
        return df.groupBy("account").agg(*values)

    versions = _versions(seed, 4)
    frames = [aggregated(v) for v in versions]
    handles = _write(state_store, frames[0], 0)
    for layer in range(1, len(frames)):
        old, new = frames[layer - 1], frames[layer]
        assert distinct_by(new, ["account"])
        joined = value_changelog(new, old, ["account"], WHAT, proven_distinct=True)
        windows = joined._jdf.queryExecution().executedPlan().toString().count("Window ")
        assert windows == 1  # the old side's count; the new side's is proven
        assert _bag(joined.collect()) == _bag(changelog(new, old, ["account"]).collect())
        handles += _write(state_store, joined, layer)
        assert _bag(_read(spark, state_store, handles)) == _bag(versions[layer])


def test_the_check_adds_no_shuffle_or_sort_to_a_plain_keyed_join(spark: Any) -> None:
    from batchpoint.spark.value_changelog import value_changelog

    new = spark.createDataFrame(_versions(7, 1)[0], SCHEMA)
    old = spark.createDataFrame(_versions(8, 1)[0], SCHEMA)
    broadcast = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")  # a real state's size
    try:
        plain = new.join(old, "account", "full_outer")
        joined = value_changelog(new, old, ["account"], WHAT)
        assert _plan_nodes(joined) == _plan_nodes(plain) == Counter(Exchange=2, Sort=2)
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", broadcast)
