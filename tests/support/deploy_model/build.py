"""A `Version` built into the pipeline a user would write (batchpoint.runtime.api): the
operators' functions, their states' declarations (uids, defaults, dropped columns,
value state, migrate= functions) and the drop declarations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from batchpoint.runtime.api import OperatorContext, Pipeline, State
from support.deploy_model.version import (
    PIPELINE,
    SOURCE,
    SOURCE_ROOT,
    Column,
    Migration,
    OpV,
    StateV,
    Version,
)

EVENTS = pa.schema(
    [
        pa.field("user", pa.string(), nullable=False),
        pa.field("grp", pa.string(), nullable=False),
        pa.field("amount", pa.int64()),
    ]
)
ARROW = {"int32": pa.int32(), "int64": pa.int64(), "string": pa.string()}
SPARK = {"int32": "int", "int64": "bigint", "string": "string"}
OUTPUT = ("user", "grp", "n", "total")


class MigrationBug(Exception):
    """What a migrate= function that raises raises."""


def arrow_schema(columns: tuple[Column, ...]) -> pa.Schema:
    return pa.schema([pa.field(c.name, ARROW[c.type], nullable=c.nullable) for c in columns])


def build(version: Version) -> Pipeline:
    pipeline = Pipeline(PIPELINE, max_parallelism=16)
    pipeline.source(SOURCE, root=SOURCE_ROOT, schema=EVENTS)
    names = {o.uid: o.name for o in version.ops}
    for op in version.order():
        source = SOURCE if op.input == SOURCE else names[op.input]
        fn = fold(op, source) if op.stateful else passing(op, source)
        pipeline.operator(
            op.name,
            inputs=[source],
            key=list(op.key),
            states={s.name: declaration(s) for s in op.states},
            parallelism=op.parallelism,
            max_parallelism=op.max_parallelism,
            uid=op.uid,
        )(fn)
    for sink in version.sinks:
        pipeline.sink(
            sink.name,
            inputs=[names[sink.input]],
            key=["user"],
            mode=sink.mode,
            table=sink.table,
            uid=sink.uid,
        )
    for op_uid, state_uid in sorted(version.dropped_states):
        pipeline.drop_state(op_uid, state_uid)
    for uid in sorted(version.dropped_operators):
        pipeline.drop_operator(uid)
    for uid in sorted(version.dropped_sinks):
        pipeline.drop_sink(uid)
    return pipeline


def declaration(state: StateV) -> State:
    migrate = migration(state.migrate, state.columns()) if state.migrate else None
    return State(
        arrow_schema(state.columns()),
        uid=state.uid,
        defaults=dict(state.defaults),
        dropped=state.dropped,
        migrate=migrate,
        value=state.value,
    )


def migration(spec: Migration, declared: tuple[Column, ...]) -> Callable[[Any], Any]:
    def migrate(old: Any) -> Any:
        from pyspark.sql import functions as F

        if spec.raises:
            raise MigrationBug("a bug in the migration: it raises")
        out = []
        for c in declared:
            value = F.col(c.name) if c.name in old.columns else F.lit(None)
            fill = spec.fill_of(c.name)
            if fill is not None:
                value = F.coalesce(value.cast(SPARK[c.type]), F.lit(fill))
            out.append(value.cast(SPARK[c.type]).alias(c.name))
        return old.select(*out)

    return migrate


def passing(op: OpV, source: str) -> Callable[[OperatorContext], Any]:
    def clean(ctx: OperatorContext) -> Any:
        from pyspark.sql import functions as F

        rows = ctx.input(source)
        return rows.where(F.col("amount") % op.modulus != 0).select("user", "grp", "amount")

    return clean


def fold(op: OpV, source: str) -> Callable[[OperatorContext], Any]:
    """Every state: per key, n += events and total += amounts of this epoch; grp kept;
    extras carried over (a new key: the column's fill). Output: the touched keys' rows
    of the first state."""

    def aggregate(ctx: OperatorContext) -> Any:
        from pyspark.sql import functions as F

        key = list(op.key)
        rows = ctx.input(source)
        aggs = [F.count("*").alias("_dn"), F.sum("amount").alias("_dt")]
        if "grp" not in key:
            aggs.append(F.first("grp").alias("_grp"))
        fresh = rows.groupBy(*key).agg(*aggs)
        output = None
        for state in op.states:
            joined = (
                ctx.state(state.name)
                .withColumn("_present", F.lit(True))
                .join(fresh, key, "full_outer")
            )
            new = joined.select(*_columns(F, state, key, op.sloppy), F.col("_dn"))
            ctx.set_state(state.name, new.drop("_dn"))
            if output is None:
                touched = new.where(F.col("_dn").isNotNull())
                output = touched.select(
                    "user", "grp", *[F.col(c).cast("bigint").alias(c) for c in ("n", "total")]
                )
        return output

    return aggregate


def _columns(F: Any, state: StateV, key: list[str], sloppy: bool) -> list[Any]:
    out = []
    for c in state.columns():
        if c.name in key:
            value = F.col(c.name)
        elif c.name in ("n", "total"):
            delta = "_dn" if c.name == "n" else "_dt"
            value = F.coalesce(F.col(c.name), F.lit(0)) + F.coalesce(F.col(delta), F.lit(0))
            if sloppy and c.name == "n":
                out.append(value.alias(c.name))  # the bug: not cast to the declared type
                continue
        elif c.name == "grp":
            value = F.coalesce(F.col("grp"), F.col("_grp"))
        else:
            value = F.when(F.col("_present"), F.col(c.name)).otherwise(F.lit(c.fill()))
        out.append(value.cast(SPARK[c.type]).alias(c.name))
    return out
