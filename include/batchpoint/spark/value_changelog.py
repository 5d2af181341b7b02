"""The changelog of a value state (Flink's ValueState: at most one row per key), as a
plain full outer join of the new and the old state on the key columns.

The output means what `state_changelog.changelog` gives for such a state: a key whose
row differs (null-safe, every value column) or that is on one side only goes in, with
its new row (`_change` CHANGE_ROW) or one CHANGE_GONE row, `_net` = new presence - old
presence; so the layered read merges it unchanged. There is no array to gather, sort or
explode, only the join's own shuffle and sort of each side.

The one-row promise is checked, not trusted: each side counts its rows per key in a
window over the join's partitioning and ordering (no shuffle, no sort of its own: the
plan has the Exchange and Sort of a plain join and nothing more), and a second new row
for a key fails the write (`raise_error`) before a wrong changelog exists. The old side
may hold several rows of a key when the state was declared a value state since its base
was written: the key's first row stands for them, counted whole in `_net`, and the key
goes in, so its new row replaces them all.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from batchpoint.state.format import CHANGE_COLUMN, CHANGE_GONE, CHANGE_ROW, NET_COLUMN

_ROW, _COUNT, _RANK = "__bp_row", "__bp_count", "__bp_rank"


def duplicate_key_message(what: str) -> str:
    """The error of a value state holding two rows for a key: names the state, never the
    key or its values (they are the user's data)."""
    return (
        f"{what} is declared a value state (State(..., value=True): at most one row per "
        "key) but the function set two or more rows for one key; aggregate them to one "
        "row per key, or declare the state without value=True"
    )


def _side(df: DataFrame, keys: list[str], values: list[str], side: str) -> DataFrame:
    """Each key's first row (its values as one struct) and how many rows it has. The
    window is partitioned and ordered by the keys alone, what the join needs anyway."""
    ordered = Window.partitionBy(*keys).orderBy(*keys)
    whole = ordered.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    row = [F.struct(*values).alias(f"{_ROW}{side}")] if values else []
    return df.select(
        *keys,
        *row,
        F.count(F.lit(1)).over(whole).alias(f"{_COUNT}{side}"),
        F.row_number().over(ordered).alias(f"{_RANK}{side}"),
    )


def _checked(new_side: DataFrame, what: str) -> DataFrame:
    fail = F.raise_error(F.lit(duplicate_key_message(what)))
    return new_side.where(F.when(F.col(f"{_COUNT}_new") > 1, fail).otherwise(F.lit(True)))


def value_changelog(
    new: DataFrame,
    old: DataFrame,
    key_columns: Sequence[str],
    what: str,
    *,
    proven_distinct: bool = False,
) -> DataFrame:
    """The changes that turn `old` into `new`, a value state (`what` names it in the
    error of a duplicated key), in `new`'s column order plus `_change` and `_net`.
    `proven_distinct`: Spark's plan proves `new` has one row per key (plan_facts), so
    its side needs no count and no check."""
    keys = list(key_columns)
    values = [name for name in new.columns if name not in keys]
    old_side = _side(old, keys, values, "_old").where(F.col(f"{_RANK}_old") == 1)
    if proven_distinct:
        row = [F.struct(*values).alias(f"{_ROW}_new")] if values else []
        new_side = new.select(*keys, *row, F.lit(1).cast(T.LongType()).alias(f"{_COUNT}_new"))
    else:
        new_side = _checked(_side(new, keys, values, "_new"), what)
    joined = new_side.join(old_side, on=keys, how="full_outer")
    in_new = F.col(f"{_COUNT}_new").isNotNull()
    new_rows = F.when(in_new, F.lit(1)).otherwise(F.lit(0))
    old_rows = F.coalesce(F.col(f"{_COUNT}_old"), F.lit(0))
    same: Column = in_new & (old_rows == 1)
    if values:
        same = same & F.col(f"{_ROW}_new").eqNullSafe(F.col(f"{_ROW}_old"))
    columns = {v: F.col(f"{_ROW}_new").getField(v).alias(v) for v in values}
    return joined.where(~same).select(
        *(columns.get(name, F.col(name)) for name in new.columns),
        F.when(in_new, F.lit(CHANGE_ROW))
        .otherwise(F.lit(CHANGE_GONE))
        .cast(T.ByteType())
        .alias(CHANGE_COLUMN),
        (new_rows - old_rows).cast(T.IntegerType()).alias(NET_COLUMN),
    )
