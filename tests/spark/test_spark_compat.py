"""batchpoint.spark.compat on this checkout's pyspark: rows land in the partition their id
names (through repartitionById, and through Spark 4.0's stand-in hash keys, whose hash is
Spark's own); Spark and Arrow schemas convert as Spark 4.3 converts them (timestamps in
the zone asked for, a zone-less Arrow timestamp read as TIMESTAMP_NTZ), both ways. On
Spark 4.0 the same functions run in the compatibility job (bench/compat.py,
tests/packaging/test_compat.py)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from batchpoint.spark.compat import (
    from_arrow_schema,
    from_arrow_type,
    repartition_by_hash_keys,
    repartition_by_id,
    spark_hash_int,
    to_arrow_schema,
)

SCHEMA = T.StructType(
    [
        T.StructField("at", T.TimestampType()),
        T.StructField("local", T.TimestampNTZType()),
        T.StructField("amounts", T.ArrayType(T.DoubleType())),
        T.StructField("owner", T.StructType([T.StructField("since", T.TimestampType())])),
    ]
)


def test_timestamps_carry_the_zone_asked_for_and_ntz_none():
    arrow = to_arrow_schema(SCHEMA)
    assert arrow.field("at").type == pa.timestamp("us", tz="UTC")
    assert arrow.field("local").type == pa.timestamp("us")
    assert arrow.field("owner").type.field("since").type == pa.timestamp("us", tz="UTC")
    zoned = to_arrow_schema(SCHEMA, timezone="Europe/Paris")
    assert zoned.field("at").type == pa.timestamp("us", tz="Europe/Paris")


def test_a_schema_survives_the_round_trip():
    assert from_arrow_schema(to_arrow_schema(SCHEMA)) == SCHEMA


@pytest.mark.parametrize(
    ("arrow_type", "spark_type"),
    [
        (pa.timestamp("us"), T.TimestampNTZType()),
        (pa.timestamp("us", tz="UTC"), T.TimestampType()),
        (pa.int64(), T.LongType()),
    ],
)
def test_an_arrow_timestamp_without_a_zone_reads_as_ntz(arrow_type, spark_type):
    assert from_arrow_type(arrow_type) == spark_type
    assert from_arrow_schema(pa.schema([("c", arrow_type)]))["c"].dataType == spark_type


def test_the_hash_is_sparks(spark):
    from pyspark.sql import functions as F

    values = [0, 1, 2, 7, 127, 4096, -1, 2**31 - 1]
    frame = spark.createDataFrame([(v,) for v in values], "v int")
    got = [r.h for r in frame.select(F.hash("v").alias("h")).collect()]
    assert got == [spark_hash_int(v) for v in values]


@pytest.mark.parametrize("partitions", [1, 3, 8])
def test_each_row_lands_in_the_partition_its_id_names(spark, partitions):
    """Both ways: this Spark's own (repartitionById on 4.1 and newer) and 4.0's."""
    from pyspark.sql import functions as F

    rows = [(i % partitions, f"row {i}") for i in range(4 * partitions)]
    frame = spark.createDataFrame(rows, "idx int, payload string")
    for placed in (
        repartition_by_id(frame, partitions, "idx"),
        repartition_by_hash_keys(frame, partitions, "idx"),
    ):
        found = placed.select("idx", F.spark_partition_id().alias("partition")).collect()
        assert {(r.idx, r.partition) for r in found} == {(i, i) for i in range(partitions)}
        assert placed.rdd.getNumPartitions() == partitions


def test_an_arrow_udf_is_made_on_this_spark():
    # (Spark 4.0 has none: there arrow_udf raises a ConfigError naming `needed_by`.)
    from batchpoint.spark.compat import arrow_udf

    assert callable(arrow_udf(lambda a: a, T.IntegerType(), "a test"))
