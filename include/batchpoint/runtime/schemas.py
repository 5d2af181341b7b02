"""Schemas in the authoring API: a pyarrow schema, a Spark StructType, or a Spark DDL
string ("account_id STRING NOT NULL, balance BIGINT"), all turned into the pyarrow
schema the runtime keeps. DDL is parsed here, without a JVM: declaring a pipeline must
not start Spark (the DAG processor imports it)."""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from batchpoint.errors import PipelineSpecError

_SIMPLE = {
    "string": pa.string(),
    "varchar": pa.string(),
    "char": pa.string(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "double": pa.float64(),
    "float": pa.float32(),
    "real": pa.float32(),
    "boolean": pa.bool_(),
    "bool": pa.bool_(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "binary": pa.binary(),
}
_FIELD = re.compile(
    r"^\s*`?(?P<name>[A-Za-z_][A-Za-z0-9_]*)`?\s*:?\s+(?P<type>[A-Za-z_]+)"
    r"(?:\((?P<args>[0-9,\s]+)\))?(?P<not_null>\s+NOT\s+NULL)?\s*$",
    re.IGNORECASE,
)


def _split_fields(ddl: str) -> list[str]:
    """Commas at depth 0 only (DECIMAL(10,2) keeps its comma)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(ddl):
        depth += {"(": 1, "<": 1, ")": -1, ">": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(ddl[start:i])
            start = i + 1
    out.append(ddl[start:])
    return [f for f in out if f.strip()]


def _from_ddl(ddl: str, what: str) -> pa.Schema:
    fields = []
    for text in _split_fields(ddl):
        match = _FIELD.match(text)
        if match is None:
            raise PipelineSpecError(
                f"{what}: cannot read {text.strip()!r} of the DDL schema (give NAME TYPE "
                "[NOT NULL] with a simple type, or a StructType / pyarrow schema for nested "
                "types)"
            )
        kind = match["type"].lower()
        if kind == "decimal":
            args = [int(a) for a in (match["args"] or "10,0").split(",")]
            arrow = pa.decimal128(args[0], args[1] if len(args) > 1 else 0)
        elif kind in _SIMPLE:
            arrow = _SIMPLE[kind]
        else:
            raise PipelineSpecError(
                f"{what}: type {match['type']!r} of column {match['name']!r} is not a simple "
                f"Spark type ({', '.join(sorted(_SIMPLE))}, decimal(p,s)); use a StructType"
            )
        fields.append(pa.field(match["name"], arrow, nullable=not match["not_null"]))
    if not fields:
        raise PipelineSpecError(f"{what}: the DDL schema names no column")
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise PipelineSpecError(f"{what}: the DDL schema names a column twice ({names})")
    return pa.schema(fields)


def arrow_schema(schema: Any, what: str) -> pa.Schema:
    """`schema` (pyarrow, Spark StructType or DDL string) as a pyarrow schema."""
    if isinstance(schema, pa.Schema):
        return schema
    if isinstance(schema, str):
        return _from_ddl(schema, what)
    if type(schema).__name__ == "StructType":  # pyspark's, without importing pyspark here
        from batchpoint.spark.compat import to_arrow_schema

        return to_arrow_schema(schema, timezone="UTC")
    raise PipelineSpecError(
        f"{what}: a schema is a pyarrow.Schema, a Spark StructType or a DDL string, "
        f"not {type(schema).__name__}"
    )
