"""State schema evolution through the runtime (issue 26): a deploy that changes a
state's schema reads the base's rows by the rules, with no user code, inside the
executors; a migrate= function runs once; a change the rules refuse fails the epoch
before any Spark job, naming the state, the column and both types. Every epoch counts
its events exactly once against a pandas reference."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from batchpoint.errors import TriggerRefused
from batchpoint.protocol.checkpoint import CheckpointFailureReason
from batchpoint.runtime.api import OperatorContext, State
from batchpoint.storage import StoreRef
from support.deploys import TOTALS_V1, Deploys, counting, reference

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _layers(run: Deploys) -> set[int]:
    assert run.runner is not None
    coordinator = run.runner.driver.coordinator
    head = coordinator.completed.get(coordinator.head.get().checkpoint_id)
    return {int(h.meta.get("layer", 0)) for h in head.handles if h.name == "state-totals"}


def _counts(run: Deploys, upto: int) -> None:
    got = run.state()
    expected = reference(range(upto + 1))
    pd.testing.assert_frame_equal(
        got[["user", "n", "total"]], expected, check_dtype=False, check_exact=True
    )


def test_an_added_nullable_column_reads_null_on_both_stores(spark, table_store: StoreRef) -> None:
    """The issue's reproduction: before, the epoch after the deploy failed with "does
    not have the requested schema" until the pipeline was FAILED."""
    run = Deploys(spark, table_store)
    run.deploy()
    run.epoch(0)
    run.epoch(1)
    with_note = TOTALS_V1.append(pa.field("note", pa.string()))
    run.deploy(with_note)
    run.epoch(2)
    restored = run.states_seen[-1]
    assert list(restored.columns) == ["user", "n", "total", "note"]
    assert len(restored) > 0 and restored["note"].isna().all()
    _counts(run, 2)
    assert run.state()["note"].isna().all()


def test_deploys_migrate_stored_state_by_the_rules_and_migrate_runs_once(spark, tmp_path) -> None:
    run = Deploys(spark, StoreRef.of((tmp_path / "store").as_uri()))
    run.deploy()
    for n in range(3):
        run.epoch(n)
    assert _layers(run) != {0}, "the base of the first deploy should be a changelog chain"

    # Deploy 1: a nullable column and one with a declared default.
    added = TOTALS_V1.append(pa.field("note", pa.string())).append(
        pa.field("tier", pa.int32(), nullable=False)
    )
    run.deploy(State(added, defaults={"tier": 1}))
    run.epoch(3)
    restored = run.states_seen[-1]
    assert restored["note"].isna().all() and (restored["tier"] == 1).all()
    assert len(restored) == len(reference(range(3)))
    _counts(run, 3)

    # Deploy 2: widen n (int -> bigint), reorder, and drop `note`, marked dropped.
    reordered = pa.schema(
        [
            pa.field("total", pa.int64()),
            pa.field("user", pa.string()),
            pa.field("tier", pa.int32(), nullable=False),
            pa.field("n", pa.int64()),
        ]
    )
    run.deploy(State(reordered, defaults={"tier": 1}, dropped=("note",)))
    run.epoch(4)
    restored = run.states_seen[-1]
    assert list(restored.columns) == ["total", "user", "tier", "n"]
    assert str(restored["n"].dtype) == "int64"
    _counts(run, 4)

    # Deploy 3: total becomes a double, which no rule does: migrate= runs, once.
    calls: list[int] = []

    def to_double(old):
        from pyspark.sql import functions as F

        calls.append(len(old.columns))
        return old.withColumn("total", F.col("total").cast("double"))

    doubled = reordered.set(0, pa.field("total", pa.float64()))
    run.deploy(State(doubled, migrate=to_double))
    run.epoch(5)
    assert calls == [4]
    assert str(run.states_seen[-1]["total"].dtype) == "float64"
    run.epoch(6)
    assert calls == [4], "migrate= ran again although the base has the declared schema"
    _counts(run, 6)

    # Deploy 4: narrowing n back to int is refused at trigger by the deploy plan, before
    # any Spark job, by name (the reader's own guard is the second line of defence).
    narrowed = doubled.set(3, pa.field("n", pa.int32()))
    run.deploy(narrowed)
    tracker = spark.sparkContext.statusTracker()
    jobs = set(tracker.getJobIdsForGroup())
    seen = len(run.states_seen)
    with pytest.raises(TriggerRefused) as failed:
        run.epoch(7)
    assert failed.value.reason is CheckpointFailureReason.INCOMPATIBLE_DEPLOY
    message = str(failed.value)
    assert "operator 'aggregate', state 'totals': column 'n'" in message
    assert "from int64 to int32" in message
    assert "does not have the requested schema" not in message
    assert len(run.states_seen) == seen, "the operator ran"
    assert set(tracker.getJobIdsForGroup()) == jobs, "a Spark job ran for a refused deploy"

    # The code put back, the pipeline goes on from the same state, exactly once.
    run.deploy(doubled, fn=counting())
    run.epoch(8)
    got = run.state()
    expected = reference(range(9))  # 7's file too: the refused epoch read nothing
    pd.testing.assert_frame_equal(got[["user", "n", "total"]], expected, check_dtype=False)


BY_ID = pa.schema(
    [
        pa.field("id", pa.int32(), nullable=False),
        pa.field("n", pa.int32()),
        pa.field("total", pa.int64()),
    ]
)


def by_id(ctx: OperatorContext) -> Any:
    """The count and sum keyed by an integer id (the user's number), of the id type the
    code declares."""
    from pyspark.sql import functions as F

    state = ctx.state("totals")
    id_type = state.schema["id"].dataType
    fresh = (
        ctx.input("events")
        .groupBy(F.substring("user", 2, 2).cast(id_type).alias("id"))
        .agg(F.count("*").alias("dn"), F.sum("amount").alias("dt"))
    )
    joined = state.join(fresh, "id", "full_outer")
    n = F.coalesce(F.col("n"), F.lit(0)) + F.coalesce(F.col("dn"), F.lit(0))
    total = F.coalesce(F.col("total"), F.lit(0)) + F.coalesce(F.col("dt"), F.lit(0))
    ctx.set_state(
        "totals", joined.select("id", n.cast("int").alias("n"), total.cast("bigint").alias("total"))
    )
    return None


def _by_id_counts(run: Deploys, upto: int) -> None:
    expected = reference(range(upto + 1))
    expected.insert(0, "id", expected.pop("user").str[1:].astype("int64"))
    got = run.state_by("id")
    pd.testing.assert_frame_equal(
        got[["id", "n", "total"]], expected, check_dtype=False, check_exact=True
    )


def test_an_integer_key_widened_keeps_every_row_in_its_key_group(spark, tmp_path) -> None:
    """An id outgrowing int: the key column int -> bigint is migrated by the rules
    (integers hash as bigint in every format, so no stored row changes key group). The
    first epoch rewrites every row; the next ones layer changelogs over bigint rows, and
    a rescale after it reads each subtask's key groups: exactly once throughout."""
    run = Deploys(spark, StoreRef.of((tmp_path / "store").as_uri()))
    run.deploy(BY_ID, fn=by_id, key=("id",))
    for n in range(3):
        run.epoch(n)
    assert _layers(run) != {0}, "the base of the deploy should be a changelog chain"
    _by_id_counts(run, 2)

    wider = BY_ID.set(0, pa.field("id", pa.int64(), nullable=False))
    run.deploy(wider, fn=by_id, key=("id",))
    assert run.runner is not None
    plan = run.runner.driver.plan()
    (state,) = [e for e in plan.entries if e.kind == "state"]
    assert plan.deployable and state.verdict.value == "migrated", plan.render()
    assert state.detail == "widened"
    run.epoch(3)
    restored = run.states_seen[-1]
    assert str(restored["id"].dtype) == "int64" and len(restored) == len(reference(range(3)))
    assert _layers(run) == {0}, "a migrated state is rewritten in full"
    _by_id_counts(run, 3)
    run.epoch(4)
    assert _layers(run) != {0}, "a changelog over the rewritten rows"
    _by_id_counts(run, 4)

    run.deploy(wider, fn=by_id, key=("id",), parallelism=3)
    run.epoch(5)
    _by_id_counts(run, 5)
