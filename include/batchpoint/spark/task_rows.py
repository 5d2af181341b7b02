"""A small driver-made table whose row i is the input of Spark task i: what a read plans
(one file per task, or a run of source splits). Made from `range(n)` in n slices, which puts
exactly row i in partition i with no shuffle (a `repartitionById` of local rows costs a
shuffle stage, and under adaptive execution a Spark job of its own, per read). The rows
ride in the plan as literals, so it works alike in classic and Connect sessions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def task_rows(spark: SparkSession, rows: Sequence[tuple[Any, ...]], ddl: str) -> DataFrame:
    """`rows` as a DataFrame of columns `ddl` ("name type, ..."; int, bigint or string),
    row i alone in partition i. The first column must be the row's index (0..n-1)."""
    if not rows:
        return spark.createDataFrame([], ddl)
    names = [part.split()[0] for part in ddl.split(",")]
    types = [part.split()[1].lower() for part in ddl.split(",")]
    if any(row[0] != i for i, row in enumerate(rows)):
        raise ValueError("task rows must be numbered 0..n-1 in order")
    if unknown := [kind for kind in types if kind not in _LITERAL_TYPES]:
        raise ValueError(f"task rows: column type {unknown[0]!r} is not int, bigint or string")
    # One SQL expression per column, parsed by Spark in one call: built of Column
    # literals, a read of a few files cost 40 ms of py4j calls on the driver per read.
    columns = [f"CAST(id AS INT) AS `{names[0]}`"]
    for c, (name, kind) in enumerate(zip(names[1:], types[1:], strict=True), 1):
        values = ", ".join(_literal(row[c], kind) for row in rows)
        columns.append(f"array({values})[CAST(id AS INT)] AS `{name}`")
    return spark.range(0, len(rows), 1, len(rows)).selectExpr(*columns)


_LITERAL_TYPES = ("int", "bigint", "string")


def _literal(value: Any, kind: str) -> str:
    """A SQL literal of `value` as `kind` (one of _LITERAL_TYPES). A string goes as the
    hex of its UTF-8 bytes, so that no quote, backslash or parser setting (escaped string
    literals) can change it."""
    if value is None:
        return f"CAST(NULL AS {kind.upper()})"
    if kind == "string":
        return f"CAST(unhex('{str(value).encode().hex()}') AS STRING)"
    return f"CAST({int(value)} AS {kind.upper()})"


def task_slots(spark: SparkSession) -> int | None:
    """How many tasks Spark runs at once: a classic session's default parallelism (its
    cores), or over Connect `spark.default.parallelism` where the server sets it; None
    where it is not known."""
    from batchpoint.spark.job_count import is_connect

    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    value = spark.conf.get("spark.default.parallelism", None)
    try:
        return max(1, int(value)) if value is not None else None
    except ValueError:  # a server's value Spark itself would refuse
        return None
