"""A state declared one row per key (`State(..., value=True)`, Flink's ValueState) in real
epochs: its changelogs are keyed joins in the array comparison's format, so a deploy that
declares it (or stops declaring it) continues the chain on the same base, and a function
that breaks the promise fails the epoch by name before anything wrong is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from batchpoint.runtime.api import State
from batchpoint.runtime.task_attempt import OperatorFailed
from batchpoint.spark import value_changelog as value_module
from batchpoint.storage import StoreRef
from support.deploys import SOURCE_ROOT, TOTALS_V1, Deploys, counting, events_of, reference

pytestmark = [pytest.mark.spark]


@pytest.fixture
def deploys(spark: Any, tmp_path: Path) -> Deploys:
    return Deploys(spark, StoreRef.of(tmp_path.as_uri()))


@pytest.fixture
def joins(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The states whose changelog the keyed join wrote (a spy on the real function)."""
    calls: list[str] = []
    real = value_module.value_changelog

    def spy(new: Any, old: Any, key_columns: Any, what: str, **proof: Any) -> Any:
        calls.append(what)
        return real(new, old, key_columns, what, **proof)

    monkeypatch.setattr(value_module, "value_changelog", spy)
    return calls


def _layers(deploys: Deploys, result: Any) -> set[int]:
    completed = result.outcome.completed
    return {
        int(h.meta.get("layer", 0))
        for a in completed.acks
        for h in a.handles
        if h.name == "state-totals"
    }


def _same(stored: pd.DataFrame, expected: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(
        stored[["user", "n", "total"]].astype({"n": "int64"}),
        expected.astype({"n": "int64"}),
        check_dtype=False,
    )


def test_declaring_a_state_a_value_state_continues_its_chain_either_way(
    deploys: Deploys, joins: list[str]
) -> None:
    deploys.deploy(TOTALS_V1)  # any number of rows per key: arrays compared
    deploys.epoch(0)
    assert _layers(deploys, deploys.epoch(1)) == {0, 1} and joins == []

    deploys.deploy(State(TOTALS_V1, value=True))  # now a value state: joins on that base
    assert _layers(deploys, deploys.epoch(2)) == {0, 1, 2} and joins
    joined = len(joins)
    assert _layers(deploys, deploys.epoch(3)) == {0, 1, 2, 3} and len(joins) > joined
    assert set(joins) == {"operator 'aggregate', state 'totals'"}
    _same(deploys.state(), reference(range(4)))
    _same(deploys.state(3), reference(range(3)))  # a restore point inside the mixed chain

    joined = len(joins)
    deploys.deploy(TOTALS_V1)  # and back: arrays compared on the joins' layers
    assert _layers(deploys, deploys.epoch(4)) == {0, 1, 2, 3, 4} and len(joins) == joined
    _same(deploys.state(), reference(range(5)))


def test_a_value_state_with_two_rows_for_a_key_fails_the_epoch_by_name(
    deploys: Deploys, joins: list[str]
) -> None:
    import json

    deploys.deploy(State(TOTALS_V1, value=True))
    deploys.epoch(0)
    # u07 has events in epoch 1 only: a key new to the state, set twice.
    twice = counting(extra=lambda new: new.unionByName(new.where(new.user == "u07")))
    deploys.deploy(State(TOTALS_V1, value=True), fn=twice)
    lines = "".join(json.dumps(e) + "\n" for e in events_of(1))
    deploys.store_ref.open().put(f"{SOURCE_ROOT}/p0/e00001.jsonl", lines.encode())
    deploys.clock.advance(1)
    assert deploys.runner is not None
    with pytest.raises(OperatorFailed) as failed:
        deploys.runner.run_epoch()
    message = str(failed.value)
    print(f"the epoch failed with: {message}")
    assert "operator 'aggregate', state 'totals' is declared a value state" in message
    assert "two or more rows for one key" in message and "u07" not in message
    assert deploys.runner.driver.coordinator.head.get().checkpoint_id == 1

    joined = len(joins)
    deploys.deploy(State(TOTALS_V1, value=True))  # the function fixed: the epoch goes on
    deploys.clock.advance(1)
    assert deploys.runner is not None
    result = deploys.runner.run_epoch()
    assert _layers(deploys, result) == {0, 1} and len(joins) > joined
    _same(deploys.state(), reference(range(2)))


def _summed(ctx: Any) -> None:
    """The restored rows and the epoch's, one per event, summed by the key: a new state
    Spark's plan proves holds one row per key, though none is declared."""
    from pyspark.sql import functions as F

    fresh = ctx.input("events").select(
        "user", F.lit(1).cast("int").alias("n"), F.col("amount").cast("bigint").alias("total")
    )
    merged = ctx.state("totals").unionByName(fresh).groupBy("user")
    ctx.set_state(
        "totals", merged.agg(F.sum("n").cast("int").alias("n"), F.sum("total").alias("total"))
    )


def test_a_state_an_aggregation_by_the_key_sets_is_compared_by_the_join(
    deploys: Deploys, joins: list[str]
) -> None:
    deploys.deploy(TOTALS_V1, fn=_summed)  # not a value state: the plan proves it
    deploys.epoch(0)
    assert _layers(deploys, deploys.epoch(1)) == {0, 1} and joins
    assert _layers(deploys, deploys.epoch(2)) == {0, 1, 2}
    _same(deploys.state(), reference(range(3)))
    _same(deploys.state(2), reference(range(2)))

    joined = len(joins)
    deploys.deploy(TOTALS_V1)  # a function whose rows are not proven: arrays compared
    assert _layers(deploys, deploys.epoch(3)) == {0, 1, 2, 3} and len(joins) == joined
    _same(deploys.state(), reference(range(4)))
