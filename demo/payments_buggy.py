"""A bad deploy of the `payments` pipeline, for the demo's quality-gated restore.

Version 2 of `balances` "fixes" amounts that it wrongly believes arrive in halves: it
doubles every balance it writes. The state stays plausible (keys present and unique,
counts positive), so the JSON suites pass and checkpoints complete while auditing is
off; only the gate's recomputed sample of balances from the source sees it.

    BATCHPOINT_PIPELINE_REF=demo.payments_buggy:pipeline
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from batchpoint.runtime.api import OperatorContext, Pipeline
from demo import payments

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

REF = "demo.payments_buggy:pipeline"


def doubled_balances(ctx: OperatorContext) -> DataFrame:
    from pyspark.sql import functions as F

    payments.balances(ctx)
    bad = ctx.new_state("balances").withColumn("balance", F.col("balance") * 2)
    ctx.set_state("balances", bad)
    return bad


def with_balances(pipeline: Pipeline, fn: Callable[[OperatorContext], Any]) -> Pipeline:
    """`pipeline` with another version of the `balances` code, as a deploy ships it."""
    pipeline.operators["balances"] = dataclasses.replace(pipeline.operators["balances"], fn=fn)
    return pipeline


pipeline = with_balances(payments.build_pipeline(), doubled_balances)

#: The bad deploy of the demo's variant, whose balances are the Iceberg table too.
TABLE_REF = "demo.payments_buggy:table_pipeline"
table_pipeline = with_balances(
    payments.build_pipeline(balances_table=payments.BALANCES_TABLE), doubled_balances
)
#: The same with the balances a Delta table (`demo.run --table-format delta`).
delta_table_pipeline = with_balances(
    payments.build_pipeline(balances_table=payments.BALANCES_TABLE, table_format="delta"),
    doubled_balances,
)
