"""The payments pipeline as eight deploys in a row change it (issue 26), for the
evolution test (tests/runtime/test_payments_deploys.py) and, by `module:attr`, for
`batchpoint plan`. Each `Version` is the code of one moment; every version keeps the
sinks' names and the operators' uids, so the reference checks of support/payments
apply to each epoch whatever the operators are called.

    0  build_pipeline's shape, parallelism 1
    1  `balances` renamed `accounts`, uid="balances" kept
    2  state `balances` gains a nullable column `deposits` (int32)
    3  `deposits` widened to int64
    4  a state `maxima` (largest amount per account) added to the operator
    5  `maxima` removed: refused, then declared with drop_state
    6  parallelism 1 -> 2 in the code
    7  a sink `rich` (accounts with a positive balance) added
    8  `balance` becomes a double, which no rule migrates: a `migrate=` function
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from batchpoint.runtime.api import OperatorContext, Pipeline, SinkMode, State
from demo.payments import BALANCE_SCHEMA, SEEN_SCHEMA, SOURCE_ROOT, dedup
from demo.payments_data import ALERT_LIMIT, PAYMENTS_SCHEMA

OUTPUT_COLUMNS = ("account_id", "balance", "event_count", "last_ts")
MAXIMA_SCHEMA = pa.schema(
    [pa.field("account_id", pa.string(), nullable=False), pa.field("max_amount", pa.int64())]
)
Migrate = Callable[[Any], Any]


@dataclass(frozen=True)
class Version:
    operator: str = "balances"  # the balances operator's name (its uid stays "balances")
    deposits: pa.DataType | None = None  # the type of state column `deposits`, if any
    maxima: bool = False  # the state `maxima` declared
    drop_maxima: bool = False  # pipeline.drop_state("balances", "maxima")
    parallelism: int = 1
    rich_sink: bool = False
    balance: pa.DataType = field(default_factory=pa.int64)  # the state's `balance` column
    migrate: Migrate | None = None


def versions(migrate: Migrate | None = None) -> list[Version]:
    """The code of deploys 0..8, each one change on top of the one before; deploy 5 is
    the refused removal (`drop_maxima` False), its allowed form is `allowed(v[5])`."""
    v0 = Version()
    v1 = replace(v0, operator="accounts")
    v2 = replace(v1, deposits=pa.int32())
    v3 = replace(v2, deposits=pa.int64())
    v4 = replace(v3, maxima=True)
    v5 = replace(v4, maxima=False)
    v6 = replace(allowed(v5), parallelism=2)
    v7 = replace(v6, rich_sink=True)
    v8 = replace(v7, balance=pa.float64(), migrate=migrate)
    return [v0, v1, v2, v3, v4, v5, v6, v7, v8]


def allowed(version: Version) -> Version:
    return replace(version, drop_maxima=True)


def balance_schema(version: Version) -> pa.Schema:
    schema = BALANCE_SCHEMA.set(1, pa.field("balance", version.balance, nullable=False))
    if version.deposits is not None:
        schema = schema.append(pa.field("deposits", version.deposits))
    return schema


def balances_of(version: Version) -> Callable[[OperatorContext], Any]:
    """The balances operator of `version`: folds the epoch's events into each account's
    row (and the largest amount into `maxima` when declared); outputs OUTPUT_COLUMNS,
    so the sinks' schemas never change."""

    def balances(ctx: OperatorContext) -> Any:
        from pyspark.sql import functions as F

        events = ctx.input("dedup")
        state = ctx.state("balances")
        aggs = [
            F.sum("amount").alias("balance"),
            F.count("*").alias("event_count"),
            F.max("ts").alias("last_ts"),
        ]
        folds = [F.sum("balance"), F.sum("event_count"), F.max("last_ts")]
        if version.deposits is not None:
            aggs.append(F.sum(F.when(F.col("amount") > 0, 1).otherwise(0)).alias("deposits"))
            folds.append(F.sum("deposits"))  # a row read from before the column: null
        delta = events.groupBy("account_id").agg(*aggs)
        typed = [F.col(f.name).cast(f.dataType).alias(f.name) for f in state.schema.fields]
        merged = (
            state.unionByName(delta.select(*typed))
            .groupBy("account_id")
            .agg(*[f.alias(c.name) for f, c in zip(folds, state.schema.fields[1:], strict=True)])
            .select(*typed)
        )
        ctx.set_state("balances", merged)
        if version.maxima:
            fresh = events.groupBy("account_id").agg(F.max("amount").alias("max_amount"))
            maxima = ctx.state("maxima").unionByName(fresh).groupBy("account_id")
            ctx.set_state("maxima", maxima.agg(F.max("max_amount").alias("max_amount")))
        return merged.select(
            "account_id",
            F.col("balance").cast("long").alias("balance"),
            "event_count",
            "last_ts",
        )

    return balances


def build(version: Version) -> Pipeline:
    """The payments pipeline as `version` declares it."""
    pipeline = Pipeline("payments", max_parallelism=16)
    pipeline.source("events", root=SOURCE_ROOT, schema=PAYMENTS_SCHEMA, key=["event_id"])
    pipeline.operator(
        "dedup",
        inputs=["events"],
        key=["event_id"],
        states={"seen": SEEN_SCHEMA},
        parallelism=version.parallelism,
    )(dedup)
    states: dict[str, Any] = {
        "balances": State(balance_schema(version), migrate=version.migrate),
    }
    if version.maxima:
        states["maxima"] = MAXIMA_SCHEMA
    pipeline.operator(
        version.operator,
        inputs=["dedup"],
        key=["account_id"],
        states=states,
        parallelism=version.parallelism,
        uid="balances",
    )(balances_of(version))
    if version.drop_maxima:
        pipeline.drop_state("balances", "maxima")
    snapshot = {"inputs": [version.operator], "key": ["account_id"], "mode": SinkMode.SNAPSHOT}
    pipeline.sink("balances_table", **snapshot)
    pipeline.sink("alerts", **snapshot, fn=_where("balance", "<", ALERT_LIMIT))
    if version.rich_sink:
        pipeline.sink("rich", **snapshot, fn=_where("balance", ">", 0))
    return pipeline


def _where(column: str, op: str, limit: int) -> Callable[[OperatorContext], Any]:
    def select(ctx: OperatorContext) -> Any:
        rows = ctx.input()
        test = rows[column] < limit if op == "<" else rows[column] > limit
        return rows.where(test).select("account_id", "balance", "last_ts")

    return select


def state_removed() -> Pipeline:
    """Deploy 5 as first written: `maxima` removed without a declaration (refused)."""
    return build(versions()[5])


def state_dropped() -> Pipeline:
    """Deploy 5 with `pipeline.drop_state('balances', 'maxima')`: allowed."""
    return build(allowed(versions()[5]))
