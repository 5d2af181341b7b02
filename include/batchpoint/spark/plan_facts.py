"""What Spark's optimizer proves about a DataFrame without running it: that it holds no
rows, or the very rows of another. An operator whose epoch has nothing to do (inputs
empty, its function leaving the state as it was) acks by reference on these facts, so
they must never be guessed: anything the optimized plans do not show is "not proven".
Over Connect the plans live on the server and nothing is proven (the epoch runs its
jobs as usual)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from batchpoint.spark.job_count import is_connect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def _optimized(df: DataFrame):
    return df._jdf.queryExecution().optimizedPlan()  # type: ignore[union-attr]


def provably_empty(df: DataFrame) -> bool:
    """Whether the optimized plan is an empty local relation (what Spark's empty-
    relation propagation leaves of a plan over inputs known to be empty)."""
    if is_connect(df.sparkSession):
        return False
    plan = _optimized(df)
    return plan.getClass().getSimpleName() == "LocalRelation" and plan.data().isEmpty()


def same_rows(new: DataFrame, old: DataFrame) -> bool:
    """Whether `new` is `old`, or their optimized plans give the same result."""
    if new is old:
        return True
    if is_connect(new.sparkSession):
        return False
    return bool(_optimized(new).sameResult(_optimized(old)))
