"""The `payments` demo pipeline, declared with the authoring API.

    events (source, 4 partitions of JSON lines)
      -> dedup     keyed by event_id,   state `seen`: every event id counted so far
      -> balances  keyed by account_id, state `balances`: balance, event_count, last_ts
      -> sinks     `balances_table` (the published balances) and `alerts` (accounts whose
                   balance is below the limit), both republished whole each epoch

Sink names differ from the operator's because every node's tasks share one namespace.
The expected results come from `payments_reference`, which reads all input with pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from batchpoint.quality.suites import declare_quality
from batchpoint.runtime.api import OperatorContext, Pipeline, SinkMode, State
from demo.payments_data import ALERT_LIMIT, PAYMENTS_SCHEMA
from demo.payments_quality import payments_quality

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SOURCE_ROOT = "sources/payments"

SEEN_SCHEMA = pa.schema([pa.field("event_id", pa.string(), nullable=False)])
BALANCE_SCHEMA = pa.schema(
    [
        pa.field("account_id", pa.string(), nullable=False),
        pa.field("balance", pa.int64(), nullable=False),
        pa.field("event_count", pa.int64(), nullable=False),
        pa.field("last_ts", pa.int64(), nullable=False),
    ]
)


def dedup(ctx: OperatorContext) -> DataFrame:
    """Pass on each event id once, ever: re-deliveries within the epoch and of events
    seen in earlier epochs are dropped."""
    seen = ctx.state("seen")
    fresh = ctx.input("events").dropDuplicates(["event_id"]).join(seen, "event_id", "left_anti")
    ctx.set_state("seen", seen.unionByName(fresh.select("event_id")))
    return fresh


def balances(ctx: OperatorContext) -> DataFrame:
    """Fold this epoch's new events into each account's balance."""
    from pyspark.sql import functions as F

    delta = (
        ctx.input("dedup")
        .groupBy("account_id")
        .agg(
            F.sum("amount").alias("balance"),
            F.count("*").alias("event_count"),
            F.max("ts").alias("last_ts"),
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
        )
    )
    ctx.set_state("balances", merged)
    return merged


def build_pipeline(
    *,
    source_root: str = SOURCE_ROOT,
    parallelism: int = 2,
    alert_limit: int = ALERT_LIMIT,
    max_parallelism: int = 128,
    balances_table: str | None = None,
    table_format: str = "iceberg",
    source_options: dict[str, str] | None = None,
) -> Pipeline:
    """Publish the balances as the table `balances_table` ("namespace.table", Iceberg or
    Delta: `table_format`) too; `source_root` may be a URI of its own (`source_options`)."""
    pipeline = Pipeline("payments", max_parallelism=max_parallelism)
    pipeline.source(
        "events",
        root=source_root,
        schema=PAYMENTS_SCHEMA,
        key=["event_id"],
        storage_options=source_options,
    )
    pipeline.operator(
        "dedup",
        inputs=["events"],
        key=["event_id"],
        states={"seen": SEEN_SCHEMA},
        parallelism=parallelism,
    )(dedup)
    pipeline.operator(
        "balances",
        inputs=["dedup"],
        key=["account_id"],
        # One row per account (the function groups by it): a value state's changelog is a
        # keyed join, not a comparison of each account's rows gathered into an array.
        states={"balances": State(BALANCE_SCHEMA, value=True)},
        parallelism=parallelism,
    )(balances)
    pipeline.sink(
        "balances_table",
        inputs=["balances"],
        key=["account_id"],
        mode=SinkMode.SNAPSHOT,
        parallelism=1,
        table=balances_table,
        table_format=table_format,
    )

    def alerts(ctx: OperatorContext) -> DataFrame:
        rows = ctx.input("balances")
        return rows.where(rows.balance < alert_limit).select("account_id", "balance", "last_ts")

    pipeline.sink(
        "alerts",
        inputs=["balances"],
        key=["account_id"],
        mode=SinkMode.SNAPSHOT,
        parallelism=1,
        fn=alerts,
    )
    # Suites load lazily: declaring them imports neither Spark nor Great Expectations.
    return declare_quality(pipeline, payments_quality())


#: What `spark_jobs/run_operator.py --pipeline demo.payments:pipeline` loads.
pipeline = build_pipeline()

#: The same with the balances published as the Iceberg table `payments.balances` (the
#: demo's; its catalog: BATCHPOINT_TABLE_CATALOG, see batchpoint.tables.catalog).
BALANCES_TABLE = "payments.balances"
table_pipeline = build_pipeline(balances_table=BALANCES_TABLE)
#: The same as a Delta table (`run.py --table-format delta`): <root>/delta/payments/balances.
delta_table_pipeline = build_pipeline(balances_table=BALANCES_TABLE, table_format="delta")
