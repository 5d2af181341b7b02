"""What changed in a keyed state between its base and this epoch, as a DataFrame that
`write_keyed_state(..., layer=n)` writes as a changelog.

A state may hold several rows per key, so keys are compared whole: each key's rows on
either side are gathered into a sorted array, and a key whose array differs goes into
the changelog with all of its new rows (`_change` CHANGE_ROW), or with one CHANGE_GONE
row if it has none left. `_net`, the change in the key's row count, rides on its first
row. Arrays compare as Spark's equality does, nulls included (so a float that only
turned 0.0 into -0.0, or one NaN into another, is unchanged and keeps its older bits in
a layered read), and an unchanged key costs a shuffle and no write. Map columns
cannot be compared in Spark: such states are snapshotted in full.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from batchpoint.state.format import CHANGE_COLUMN, CHANGE_GONE, CHANGE_ROW, NET_COLUMN

_ROWS, _COUNT, _POS, _ROW = "__bp_rows", "__bp_count", "__bp_pos", "__bp_row"


def comparable(data_type: T.DataType) -> bool:
    """Spark compares and sorts every type but maps (at any depth)."""
    if isinstance(data_type, T.MapType):
        return False
    if isinstance(data_type, T.ArrayType):
        return comparable(data_type.elementType)
    if isinstance(data_type, T.StructType):
        return all(comparable(f.dataType) for f in data_type.fields)
    return True


def _per_key(df: DataFrame, keys: list[str], values: list[str], side: str) -> DataFrame:
    gathered = [F.count(F.lit(1)).alias(f"{_COUNT}{side}")]
    if values:
        rows = F.sort_array(F.collect_list(F.struct(*values)))
        gathered.append(rows.alias(f"{_ROWS}{side}"))
    return df.groupBy(*keys).agg(*gathered)


def changelog(new: DataFrame, old: DataFrame, key_columns: Sequence[str]) -> DataFrame:
    """The changes that turn `old` into `new` (both keyed by `key_columns`, the same
    columns), in `new`'s column order plus `_change` and `_net`."""
    keys = list(key_columns)
    values = [name for name in new.columns if name not in keys]
    joined = _per_key(new, keys, values, "_new").join(
        _per_key(old, keys, values, "_old"), on=keys, how="full_outer"
    )
    new_count, old_count = F.col(f"{_COUNT}_new"), F.col(f"{_COUNT}_old")
    same = new_count.eqNullSafe(old_count)
    if values:
        same = same & F.col(f"{_ROWS}_new").eqNullSafe(F.col(f"{_ROWS}_old"))
    changed = joined.where(~same)
    net = (F.coalesce(new_count, F.lit(0)) - F.coalesce(old_count, F.lit(0))).cast(T.IntegerType())
    if values:
        # A key with no rows left keeps one row (a null struct) for its CHANGE_GONE mark.
        exploded = changed.select(
            *keys, new_count, net.alias(NET_COLUMN),
            F.posexplode_outer(F.col(f"{_ROWS}_new")).alias(_POS, _ROW),
        )  # fmt: skip
        columns = {v: F.col(_ROW).getField(v).alias(v) for v in values}
    else:
        # A key-only state: a key's rows are copies of the key, `count` of them.
        copies = F.array_repeat(F.lit(True), new_count.cast(T.IntegerType()))
        exploded = changed.select(
            *keys, new_count, net.alias(NET_COLUMN),
            F.posexplode_outer(F.when(new_count.isNotNull(), copies)).alias(_POS, _ROW),
        )  # fmt: skip
        columns = {}
    first = F.coalesce(F.col(_POS), F.lit(0)) == 0
    return exploded.select(
        *(columns.get(name, F.col(name)) for name in new.columns),
        F.when(new_count.isNull(), F.lit(CHANGE_GONE))
        .otherwise(F.lit(CHANGE_ROW))
        .cast(T.ByteType())
        .alias(CHANGE_COLUMN),
        F.when(first, F.col(NET_COLUMN))
        .otherwise(F.lit(0))
        .cast(T.IntegerType())
        .alias(NET_COLUMN),
    )


def no_changes(state: DataFrame) -> DataFrame:
    """An empty changelog of `state`: the function left the state as it was."""
    return state.limit(0).select(
        "*",
        F.lit(CHANGE_ROW).cast(T.ByteType()).alias(CHANGE_COLUMN),
        F.lit(0).cast(T.IntegerType()).alias(NET_COLUMN),
    )
