"""A one-operator pipeline over the payments input whose output says which Spark
settings its session runs with: how a test sees that a `--conf` given to spark-submit
(BATCHPOINT_SPARK_SUBMIT_ARGS) reached the job's session rather than a default."""

from __future__ import annotations

from typing import TYPE_CHECKING

from batchpoint.runtime.api import OperatorContext, Pipeline, SinkMode
from demo.payments import SOURCE_ROOT
from demo.payments_data import PAYMENTS_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: The settings the probe reports, one column each (dots become underscores).
PROBED = ("spark.sql.shuffle.partitions", "spark.batchpoint.probe")


def probe(ctx: OperatorContext) -> DataFrame:
    from pyspark.sql import functions as F

    events = ctx.input("events")
    conf = events.sparkSession.conf
    out = events.groupBy("account_id").count()
    for key in PROBED:
        out = out.withColumn(key.replace(".", "_"), F.lit(conf.get(key, "unset")))
    return out


def build_pipeline() -> Pipeline:
    pipeline = Pipeline("confprobe", max_parallelism=8)
    pipeline.source("events", root=SOURCE_ROOT, schema=PAYMENTS_SCHEMA, key=["event_id"])
    pipeline.operator("probe", inputs=["events"], key=["account_id"], parallelism=1)(probe)
    pipeline.sink(
        "probe_table", inputs=["probe"], key=["account_id"], mode=SinkMode.SNAPSHOT, parallelism=1
    )
    return pipeline


pipeline = build_pipeline()
