"""Flink's key-group assignment as Spark columns.

``_key_group`` is computed in Python by an Arrow UDF with batchpoint's stable key hash
(Spark's own hash would differ from the one restores and the rest of batchpoint use);
the subtask follows from the key group by plain integer arithmetic in SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from batchpoint.state.format import RESERVED_COLUMNS, StateError
from batchpoint.state.keygroups import assign_to_key_group

#: Spark types whose Arrow -> Python values have a stable canonical encoding.
KEY_TYPES = (
    T.ByteType,
    T.ShortType,
    T.IntegerType,
    T.LongType,
    T.StringType,
    T.BinaryType,
    T.BooleanType,
    T.DateType,
    T.DecimalType,
    T.FloatType,
    T.DoubleType,
)


def _key_groups_of(arrays: Sequence[pa.Array], max_parallelism: int) -> pa.Array:
    columns = [a.to_pylist() for a in arrays]
    keys: Iterable[Any] = columns[0] if len(columns) == 1 else zip(*columns, strict=True)
    try:
        return pa.array([assign_to_key_group(k, max_parallelism) for k in keys], pa.int32())
    except ValueError as exc:
        raise StateError(
            f"cannot assign a key group: {exc} (keyed state needs non-null keys)"
        ) from None


def _key_group_function(max_parallelism: int) -> Callable[..., pa.Array]:
    # Type hints (not a functionType) are how pyspark 4.1+ wants Arrow UDFs declared.
    def key_groups(*arrays: pa.Array) -> pa.Array:
        return _key_groups_of(arrays, max_parallelism)

    return key_groups


def key_group_column(key_columns: Sequence[str], max_parallelism: int) -> Column:
    """`_key_group` as a Spark column, computed with batchpoint's stable key hash (the one
    `keygroups.assign_to_key_group` uses), not Spark's."""
    from pyspark.sql.functions import arrow_udf

    udf = arrow_udf(_key_group_function(max_parallelism), T.IntegerType())
    return udf(*[F.col(c) for c in key_columns])


def subtask_column(key_group: str, max_parallelism: int, parallelism: int) -> Column:
    """keygroups.subtask_for_key_group as a Spark expression: exact integer arithmetic
    (DIV on non-negative bigints is floor division)."""
    return F.expr(
        f"CAST((CAST(`{key_group}` AS BIGINT) * {parallelism}) DIV {max_parallelism} AS INT)"
    )


def check_key_columns(schema: T.StructType, key_columns: Sequence[str], state: str) -> None:
    if not key_columns:
        raise StateError(f"state '{state}': give at least one key column")
    fields = {f.name: f for f in schema.fields}
    for name in key_columns:
        if name not in fields:
            raise StateError(
                f"state '{state}': key column '{name}' is not in the state "
                f"(columns: {', '.join(fields)})"
            )
        if not isinstance(fields[name].dataType, KEY_TYPES):
            raise StateError(
                f"state '{state}': key column '{name}' has type "
                f"{fields[name].dataType.simpleString()}, which has no stable key hash: "
                "cast it to string, bigint or date"
            )
    reserved = sorted(RESERVED_COLUMNS & set(fields))
    if reserved:
        raise StateError(f"state '{state}': column names {reserved} are reserved by batchpoint")
