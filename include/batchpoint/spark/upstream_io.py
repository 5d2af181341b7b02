"""An upstream pipeline's sink read as this epoch's input (sources/upstream.py decides
which files; this module turns them into rows with their row kind).

A snapshot sink publishes its whole content each checkpoint, so its changes are the
difference of two contents as multisets of rows: what is only in the old content was
removed, what is only in the new one was added. A removed row whose key was also added
is the old side of an update (-U), an added one the new side (+U); the rest are
deletions (-D) and insertions (+I). Keys compare null-safely, as the sink stores them.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from batchpoint.protocol.sink_manifest import SinkMode
from batchpoint.sources.upstream import ROW_KIND_COLUMN, RowKind, UpstreamRead
from batchpoint.spark.keyed_io import FileSourceDecl, empty, read_source
from batchpoint.storage import StoreRef

_MATCH = "_bp_upstream_match"


def changes_schema(schema: pa.Schema) -> pa.Schema:
    """The declared columns and the row kind."""
    return schema.append(pa.field(ROW_KIND_COLUMN, pa.string(), nullable=False))


def read_upstream(
    spark: SparkSession, store_ref: StoreRef, source: FileSourceDecl, read: UpstreamRead
) -> DataFrame:
    """The rows an epoch reads of an upstream sink, each with its row kind."""
    if read.unchanged or not read.splits:
        return empty(spark, changes_schema(source.schema))
    after = read_source(spark, store_ref, source, read.after)
    if read.mode is SinkMode.APPEND:
        return after.withColumn(ROW_KIND_COLUMN, F.lit(RowKind.INSERT.value))
    before = read_source(spark, store_ref, source, read.before)
    return changelog(before, after, read.key_columns)


def changelog(before: DataFrame, after: DataFrame, keys: Sequence[str]) -> DataFrame:
    """The changes that turn `before` into `after`, keyed by `keys`."""
    removed = before.exceptAll(after)
    added = after.exceptAll(before)
    old = _kinds(removed, added, keys, RowKind.UPDATE_BEFORE, RowKind.DELETE)
    new = _kinds(added, removed, keys, RowKind.UPDATE_AFTER, RowKind.INSERT)
    return old.unionByName(new)


def _kinds(
    rows: DataFrame, other: DataFrame, keys: Sequence[str], matched: RowKind, alone: RowKind
) -> DataFrame:
    """`rows` with kind `matched` where `other` has a row of the same key, else `alone`."""
    if not keys:
        return rows.withColumn(ROW_KIND_COLUMN, F.lit(alone.value))
    aliases = [f"_bp_upstream_key{i}" for i in range(len(keys))]
    other_keys = (
        other.select(*[F.col(k).alias(a) for k, a in zip(keys, aliases, strict=True)])
        .distinct()
        .withColumn(_MATCH, F.lit(True))
    )
    on: Column = functools.reduce(
        operator.and_,
        [F.col(k).eqNullSafe(F.col(a)) for k, a in zip(keys, aliases, strict=True)],
    )
    kind = F.when(F.col(_MATCH).isNotNull(), F.lit(matched.value)).otherwise(F.lit(alone.value))
    joined = rows.join(other_keys, on=on, how="left")
    return joined.select(*[F.col(c) for c in rows.columns], kind.alias(ROW_KIND_COLUMN))
