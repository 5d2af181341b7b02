"""What a function sets as a state, checked against what the code declares before anything
is written (Flink's state serializers check every value against the declared type).

The columns must be the declared ones; they are taken in the declared order. A column
whose type the declared one safely widens (an int set where the state declares bigint)
is cast; any other type (a bigint where it declares int, a string for a number) fails
the epoch naming the operator, the state, the column and both types: written as it was
set, the checkpoint would record the declared type over files of another, and every
later epoch would read a narrowing that nobody deployed. A collated string (Spark 4's
`collate`) is cast to the plain string the state stores: its bytes are what the key
groups, the files and every later read compare. Nullability cannot be read
from a Spark schema (Spark loses it through most transformations), so the writer
checks it on every row it writes (spark/state_writer.py).

This is done on the driver from the frame's schema alone: no Spark job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from batchpoint.state.evolution import is_widening
from batchpoint.state.schemas import StateNotAsDeclared, canonical_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def conform_state(df: DataFrame, declared: pa.Schema, what: str) -> DataFrame:
    """`df` in the declared schema (itself when it already is), or StateNotAsDeclared.
    `what` names the state: "operator 'o', state 's'"."""
    from pyspark.sql import functions as F

    from batchpoint.spark.compat import from_arrow_type, to_arrow_schema

    got = to_arrow_schema(df.schema, timezone="UTC")
    names = [f.name for f in declared]
    missing = [n for n in names if n not in got.names]
    extra = [n for n in got.names if n not in names]
    if missing or extra:
        said = [f"lacks column(s) {missing}"] if missing else []
        said += [f"has undeclared column(s) {extra}"] if extra else []
        raise StateNotAsDeclared(
            f"{what}: the function set a state that {' and '.join(said)}; "
            f"the state declares {names}"
        )
    same = dict(canonical_schema(declared))
    casts, problems = {}, []
    for field in got:
        want = declared.field(field.name)
        if canonical_schema(pa.schema([field])) == [(field.name, same[field.name])]:
            continue
        if is_widening(field.type, want.type):
            casts[field.name] = from_arrow_type(want.type)
            continue
        problems.append(
            f"column '{field.name}' is set as {_spark_name(field.type)} where the state "
            f"declares {_spark_name(want.type)}"
        )
    for field in df.schema:
        # Arrow has no collations, so a collated string is stored as its bytes: compared
        # under the collation, 'A' and 'a' were one key to Spark's changelog and two to
        # the key groups and the reads, and the next epoch failed on the mix.
        if field.name in names and _collated(field.dataType):
            casts.setdefault(field.name, from_arrow_type(declared.field(field.name).type))
    if problems:
        raise StateNotAsDeclared(
            f"{what}: {'; '.join(problems)}: cast it in the function, or declare the type "
            "it sets (a deploy then migrates the stored rows by the evolution rules)"
        )
    if not casts and got.names == names:
        return df
    return df.select(
        *[F.col(f"`{n}`").cast(casts[n]).alias(n) if n in casts else F.col(f"`{n}`") for n in names]
    )


def _collated(data_type: Any) -> bool:
    """A string type other than Spark's default (byte-wise) collation, at any depth."""
    from pyspark.sql import types as T

    if isinstance(data_type, T.StringType):
        return getattr(data_type, "collation", "UTF8_BINARY") != "UTF8_BINARY"
    if isinstance(data_type, T.ArrayType):
        return _collated(data_type.elementType)
    if isinstance(data_type, T.MapType):
        return _collated(data_type.keyType) or _collated(data_type.valueType)
    if isinstance(data_type, T.StructType):
        return any(_collated(f.dataType) for f in data_type.fields)
    return False


def _spark_name(arrow_type: pa.DataType) -> str:
    """A type as Spark users write it (bigint, int, string); Arrow's name where Spark
    has none."""
    from batchpoint.spark.compat import from_arrow_type

    try:
        return str(from_arrow_type(arrow_type).simpleString())
    except (TypeError, ValueError, NotImplementedError):
        return str(arrow_type)
