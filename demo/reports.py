"""The `reports` demo pipeline: it reads what `payments` publishes, not the raw events.

    balances (a pipeline source: payments' `balances_table` sink, read exactly once; a
              snapshot sink, so each epoch brings its changes, `_row_kind` +I, -U, +U, -D)
      -> buckets  keyed by bucket (accounts in blocks of BUCKET_SIZE), state `buckets`:
                  the bucket's total balance and its number of accounts
      -> sink     `bucket_totals`, republished whole each epoch

The reference (`expected_buckets`) is pandas over what payments published as of the
payments checkpoint a reports checkpoint read up to: after a cascade restore the two
pipelines must agree again, on the restored timeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from batchpoint.runtime.api import OperatorContext, Pipeline, SinkMode, State
from demo.payments import BALANCE_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Accounts `acct-000000` .. `acct-000049` are bucket 0, and so on.
BUCKET_SIZE = 50
BUCKET_SCHEMA = pa.schema(
    [
        pa.field("bucket", pa.int64(), nullable=False),
        pa.field("total", pa.int64(), nullable=False),
        pa.field("accounts", pa.int64(), nullable=False),
    ]
)
BUCKET_COLUMNS = ("bucket", "total", "accounts")


def buckets(ctx: OperatorContext) -> DataFrame:
    """Fold payments' balance changes into each bucket: an insert or an update's new row
    counts in, a deletion or an update's old row counts out."""
    from pyspark.sql import functions as F

    sign = F.when(F.col("_row_kind").isin("+I", "+U"), 1).otherwise(-1)
    number = F.substring("account_id", 6, 6).cast("long")
    delta = (
        ctx.input("balances")
        .withColumn("bucket", F.floor(number / BUCKET_SIZE).cast("long"))
        .groupBy("bucket")
        .agg(
            F.sum(sign * F.col("balance")).cast("long").alias("total"),
            F.sum(sign).cast("long").alias("accounts"),
        )
    )
    merged = (
        ctx.state("buckets")
        .unionByName(delta)
        .groupBy("bucket")
        .agg(F.sum("total").alias("total"), F.sum("accounts").alias("accounts"))
        .where(F.col("accounts") != 0)
    )
    ctx.set_state("buckets", merged)
    return merged


def build_pipeline() -> Pipeline:
    pipeline = Pipeline("reports", max_parallelism=16)
    pipeline.source(
        "balances",
        upstream="payments",
        sink="balances_table",
        schema=BALANCE_SCHEMA,
        key=["account_id"],
    )
    pipeline.operator(
        "buckets",
        inputs=["balances"],
        key=["bucket"],
        states={"buckets": State(BUCKET_SCHEMA, value=True)},
        parallelism=1,
    )(buckets)
    pipeline.sink(
        "bucket_totals", inputs=["buckets"], key=["bucket"], mode=SinkMode.SNAPSHOT, parallelism=1
    )
    return pipeline


#: What the demo deploys beside payments (BATCHPOINT_PIPELINE_REF).
pipeline = build_pipeline()


def expected_buckets(balances: Any) -> Any:
    """The reference: payments' published balances (a pandas frame) into buckets."""
    frame = balances.assign(bucket=balances["account_id"].str[5:].astype("int64") // BUCKET_SIZE)
    out = frame.groupby("bucket", as_index=False).agg(
        total=("balance", "sum"), accounts=("account_id", "count")
    )
    return out.astype("int64").sort_values("bucket", ignore_index=True)
