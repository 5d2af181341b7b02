"""Buggy versions of the payments `balances` operator: what a bad deploy ships."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from batchpoint.runtime.api import OperatorContext, Pipeline
from demo import payments
from demo.payments_buggy import with_balances

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

Change = Callable[["DataFrame"], "DataFrame"]


def doubled_amounts(df: DataFrame) -> DataFrame:
    """Plausible, and wrong: only a recomputation from the source can tell."""
    from pyspark.sql import functions as F

    return df.withColumn("balance", F.col("balance") * 2)


def negative_counts(df: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return df.withColumn("event_count", -F.col("event_count"))


def buggy_balances(change: Change) -> Callable[[OperatorContext], Any]:
    def balances(ctx: OperatorContext) -> DataFrame:
        payments.balances(ctx)
        bad = change(ctx.new_state("balances"))
        ctx.set_state("balances", bad)
        return bad

    return balances


def deploy(pipeline: Pipeline, fn: Callable[[OperatorContext], Any]) -> None:
    """Swap the code of `balances`, as a deploy of a new version would."""
    with_balances(pipeline, fn)


def deploy_fixed(pipeline: Pipeline) -> None:
    deploy(pipeline, payments.balances)
