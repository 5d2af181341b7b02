"""The next version of the `payments` pipeline, for the demo's deploy that keeps state
(issue 26): the operator `balances` is called `accounts` now, its identity kept with
`uid="balances"`, and its state `balances` gains a nullable column `deposits` (the
deposits counted since this deploy; rows stored before it read null). The operator's
output and both sinks (their names, uids and the table, Iceberg or Delta) stay as they were.

    batchpoint plan --pipeline-ref demo.payments_v2:table_pipeline
    BATCHPOINT_PIPELINE_REF=demo.payments_v2:table_pipeline
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pyarrow as pa

from batchpoint.quality.suites import PipelineQuality, declare_quality, quality_of
from batchpoint.runtime.api import OperatorContext, Pipeline, State
from demo import payments
from demo.payments_data import ALERT_LIMIT
from demo.payments_reference import BALANCE_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

OPERATOR = "accounts"
BALANCE_SCHEMA = payments.BALANCE_SCHEMA.append(pa.field("deposits", pa.int64()))
TABLE_REF = "demo.payments_v2:table_pipeline"


def accounts(ctx: OperatorContext) -> DataFrame:
    """payments.balances, and per account the deposits (amount > 0) it has folded."""
    from pyspark.sql import functions as F

    delta = (
        ctx.input("dedup")
        .groupBy("account_id")
        .agg(
            F.sum("amount").alias("balance"),
            F.count("*").alias("event_count"),
            F.max("ts").alias("last_ts"),
            F.sum(F.when(F.col("amount") > 0, 1).otherwise(0)).alias("deposits"),
        )
    )
    merged = (
        ctx.state("balances")
        .unionByName(delta)
        .groupBy("account_id")
        .agg(
            F.sum("balance").alias("balance"),
            F.sum("event_count").alias("event_count"),
            F.max("last_ts").alias("last_ts"),
            F.sum("deposits").alias("deposits"),  # null while only stored rows count
        )
    )
    ctx.set_state("balances", merged)
    return merged.select(*BALANCE_COLUMNS)  # the published table keeps its schema


def alerts(ctx: OperatorContext) -> DataFrame:
    rows = ctx.input(OPERATOR)
    return rows.where(rows.balance < ALERT_LIMIT).select("account_id", "balance", "last_ts")


def build_pipeline(**options: object) -> Pipeline:
    """payments.build_pipeline(**options) as version 2 declares it."""
    pipeline = payments.build_pipeline(**options)  # type: ignore[arg-type]
    old = pipeline.operators.pop("balances")
    pipeline.operator(
        OPERATOR,
        inputs=old.inputs,
        key=old.key_columns,
        states={"balances": State(BALANCE_SCHEMA, value=True)},
        parallelism=old.parallelism,
        uid="balances",
    )(accounts)
    for name, sink in pipeline.sinks.items():
        fn = alerts if name == "alerts" else sink.fn
        pipeline.sinks[name] = dataclasses.replace(sink, inputs=(OPERATOR,), fn=fn)
    return declare_quality(pipeline, _renamed(quality_of(pipeline)))


def _renamed(quality: PipelineQuality) -> PipelineQuality:
    """The quality declarations name operators: the balances suites follow the rename."""
    states = tuple(
        dataclasses.replace(s, operator=OPERATOR) if s.operator == "balances" else s
        for s in quality.states
    )
    return dataclasses.replace(quality, states=states)


pipeline = build_pipeline()
table_pipeline = build_pipeline(balances_table=payments.BALANCES_TABLE)
#: The same with the balances a Delta table (`demo.run --table-format delta`).
delta_table_pipeline = build_pipeline(balances_table=payments.BALANCES_TABLE, table_format="delta")
