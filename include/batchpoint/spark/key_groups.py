"""Flink's key-group assignment as Spark columns.

``_key_group`` is Spark SQL's ``pmod(hash(keys), max_parallelism)``, its bits reversed
when max parallelism is a power of two (KeyHash.MURMUR3, format 3; see state.keygroups):
computed in the JVM, with no Python worker round trip per row. Format 2's
``pmod(xxhash64(keys), max_parallelism)`` and format 1's hash (a Python function per row)
stay for checks on old checkpoints. The subtask follows from the key group by plain
integer arithmetic in SQL.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from batchpoint.state.format import RESERVED_COLUMNS, StateError
from batchpoint.state.keygroups import KeyHash, assign_to_key_group, reversed_bits

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


_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
NULL_KEY_MESSAGE = (
    "cannot assign a key group: a key column is null (keyed state needs non-null keys)"
)


def _key_groups_of(arrays: Sequence[pa.Array], max_parallelism: int) -> pa.Array:
    columns = [a.to_pylist() for a in arrays]
    keys: Iterable[Any] = columns[0] if len(columns) == 1 else zip(*columns, strict=True)
    try:
        return pa.array(
            [assign_to_key_group(k, max_parallelism, KeyHash.BLAKE2B) for k in keys], pa.int32()
        )
    except ValueError as exc:
        raise StateError(
            f"cannot assign a key group: {exc} (keyed state needs non-null keys)"
        ) from None


def _key_group_function(max_parallelism: int) -> Callable[..., pa.Array]:
    # Type hints (not a functionType) are how pyspark 4.1+ wants Arrow UDFs declared.
    def key_groups(*arrays: pa.Array) -> pa.Array:
        return _key_groups_of(arrays, max_parallelism)

    return key_groups


def _hashed_as(field: T.StructField) -> Column:
    """The key column as KeyHash.XXHASH64 hashes it: integers as bigint and floats as
    double, so the same key value lands in the same key group whichever of those types
    an operator, a channel or a sink gives it."""
    column = F.col(f"`{field.name}`")
    if isinstance(field.dataType, _INTEGRAL):
        return column.cast(T.LongType())
    if isinstance(field.dataType, T.FloatType):
        return column.cast(T.DoubleType())
    return column


def key_group_column(
    key_columns: Sequence[str],
    max_parallelism: int,
    schema: T.StructType,
    key_hash: KeyHash = KeyHash.MURMUR3,
) -> Column:
    """`_key_group` of rows with `schema` (the DataFrame's), as files of the format that
    uses `key_hash` store it; `keygroups.assign_to_key_group` gives the same groups. A
    null key fails the Spark job: keyed state has no key group for it."""
    if key_hash is KeyHash.BLAKE2B:
        from batchpoint.spark.compat import arrow_udf

        function = _key_group_function(max_parallelism)
        udf = arrow_udf(function, T.IntegerType(), "state format 1 (BLAKE2B key groups)")
        return udf(*[F.col(c) for c in key_columns])
    fields = {f.name: f for f in schema.fields}
    missing = [c for c in key_columns if c not in fields]
    if missing:
        raise StateError(
            f"key columns {missing} are not in the rows (columns: {', '.join(fields)})"
        )
    any_null = F.lit(False)
    for name in key_columns:
        any_null = any_null | F.col(f"`{name}`").isNull()
    columns = [_hashed_as(fields[c]) for c in key_columns]
    if key_hash is KeyHash.XXHASH64:
        hashed = F.xxhash64(*columns)
        group = F.pmod(hashed, F.lit(max_parallelism).cast(T.LongType())).cast(T.IntegerType())
    else:
        group = _reversed(F.pmod(F.hash(*columns), F.lit(max_parallelism)), max_parallelism)
    return F.when(any_null, F.raise_error(F.lit(NULL_KEY_MESSAGE))).otherwise(group)


def _reversed(slot: Column, max_parallelism: int) -> Column:
    """keygroups.spread in SQL: bit i of the slot becomes bit (b - 1 - i)."""
    bits = reversed_bits(max_parallelism)
    if not bits:
        return slot.cast(T.IntegerType())
    moved = [
        F.shiftleft(F.shiftright(slot, i).bitwiseAND(F.lit(1)), bits - 1 - i) for i in range(bits)
    ]
    return functools.reduce(lambda a, b: a.bitwiseOR(b), moved).cast(T.IntegerType())


def subtask_column(key_group: str, max_parallelism: int, parallelism: int) -> Column:
    """keygroups.subtask_for_key_group as a Spark expression: exact integer arithmetic
    (DIV on non-negative bigints is floor division)."""
    return F.expr(
        f"CAST((CAST(`{key_group}` AS BIGINT) * {parallelism}) DIV {max_parallelism} AS INT)"
    )


def check_key_columns(
    schema: T.StructType,
    key_columns: Sequence[str],
    state: str,
    allowed: frozenset[str] = frozenset(),
) -> None:
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
    reserved = sorted((RESERVED_COLUMNS - allowed) & set(fields))
    if reserved:
        raise StateError(f"state '{state}': column names {reserved} are reserved by batchpoint")
