"""The Spark versions batchpoint runs on (4.0 to 4.3), in one place: what 4.1 added or
changed that batchpoint uses.

- `repartition_by_id`, row with id i into partition i: 4.1 and newer have
  `DataFrame.repartitionById`; on 4.0 the rows are hash-partitioned by a stand-in key
  per id, an integer chosen so that Spark's hash partitioning (Murmur3 with seed 42,
  modulo the partition count) sends it to partition i: the same placement, one shuffle
  as well.
- `arrow_udf`: 4.1 and newer only. What needs one (the key groups of state format 1,
  hashed with BLAKE2B in Python) is refused on 4.0 with an error that says so.
- Spark to Arrow schemas: 4.1 and newer take the time zone of timestamps (`timezone`);
  4.0 only says whether they are in UTC (`timestamp_utc`), which is how 4.0 itself
  exchanges Arrow batches with its Python workers, so on 4.0 every zone is UTC.
- Arrow to Spark schemas: 4.1 and newer read a timestamp without a zone as TIMESTAMP_NTZ
  by default, 4.0 as TIMESTAMP: the argument is always given, so both read it as 4.3.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyspark
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas import types as arrow_types

from batchpoint.errors import ConfigError
from batchpoint.state.murmur3 import SPARK_SEED, spark_hash

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType, StructType

#: Whether this pyspark's to_arrow_schema takes a time zone (4.1 and newer).
_TAKES_TIME_ZONE = "timezone" in inspect.signature(arrow_types.to_arrow_schema).parameters
#: Whether DataFrames have repartitionById (4.1 and newer; classic and Connect alike).
_HAS_REPARTITION_BY_ID = hasattr(DataFrame, "repartitionById")


def arrow_udf(function: Callable[..., Any], return_type: DataType, needed_by: str) -> Any:
    """pyspark's arrow_udf of `function` (4.1 and newer); `needed_by` says what asks for
    it, in the error on 4.0."""
    try:
        from pyspark.sql.functions import arrow_udf as make_udf
    except ImportError:
        raise ConfigError(
            f"{needed_by} needs Spark 4.1 or newer (pyspark.sql.functions.arrow_udf); "
            f"this is pyspark {pyspark.__version__}"
        ) from None
    return make_udf(function, return_type)


def repartition_by_id(frame: DataFrame, partitions: int, id_column: str) -> DataFrame:
    """`frame` with each row in the partition its `id_column` names (0..partitions-1)."""
    if _HAS_REPARTITION_BY_ID:
        return frame.repartitionById(partitions, id_column)
    return repartition_by_hash_keys(frame, partitions, id_column)


def repartition_by_hash_keys(frame: DataFrame, partitions: int, id_column: str) -> DataFrame:
    """repartition_by_id on Spark 4.0: hash-partitioned by each id's stand-in key."""
    keys = F.array(*(F.lit(k).cast("int") for k in partition_keys(partitions)))
    return frame.repartition(partitions, F.element_at(keys, F.col(id_column) + 1))


@functools.lru_cache(maxsize=64)
def partition_keys(partitions: int) -> tuple[int, ...]:
    """For each partition i, the smallest integer that Spark's hash partitioning into
    `partitions` sends to i."""
    keys: dict[int, int] = {}
    candidate = 0
    while len(keys) < partitions:
        keys.setdefault(spark_hash_int(candidate) % partitions, candidate)
        candidate += 1
    return tuple(keys[i] for i in range(partitions))


def spark_hash_int(value: int, seed: int = SPARK_SEED) -> int:
    """Spark's Murmur3 hash of an INT (`hash(CAST(value AS INT))` in SQL), signed."""
    return spark_hash([("int", value)], seed)


def to_arrow_schema(schema: StructType, timezone: str = "UTC") -> pa.Schema:
    """Spark's Arrow schema for `schema`, timestamps with the time zone `timezone`."""
    if _TAKES_TIME_ZONE:
        return arrow_types.to_arrow_schema(schema, timezone=timezone)
    return arrow_types.to_arrow_schema(schema, timestamp_utc=True)  # type: ignore[call-arg]


def from_arrow_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of an Arrow schema; a timestamp without a zone is TIMESTAMP_NTZ."""
    return arrow_types.from_arrow_schema(schema, prefer_timestamp_ntz=True)


def from_arrow_type(arrow_type: pa.DataType) -> DataType:
    """The Spark type of an Arrow type; a timestamp without a zone is TIMESTAMP_NTZ."""
    return arrow_types.from_arrow_type(arrow_type, prefer_timestamp_ntz=True)
