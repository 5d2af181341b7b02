"""Writing a stream with no shuffle of its own when its rows already sit by subtask.

A keyed aggregation (or any plan whose last exchange is by the key) leaves its rows
hash-partitioned by the key columns: partition p of N holds the keys with
``pmod(hash(keys), N) == p``. Format-3 key groups are built on that same hash with their
bits reversed (state.keygroups), so when N divides the parallelism P, and P divides max
parallelism with both powers of two, partition p holds whole subtasks; when N is larger,
it holds one contiguous part of one subtask's range (a unit). The writer then only sorts
each partition and writes each unit's run, as Structured
Streaming updates its state in the aggregation's own stage and Flink routes records to
the subtask owning their key group: no ``repartitionById``.

Nothing here is trusted blindly. The driver only takes this path when Spark's physical
plan says the rows are hash-partitioned by exactly the key columns, as the key hash reads
them; and if a unit's rows were in two partitions anyway, both tasks would write files
covering its range, which `completed_handles`' coverage check refuses: the write is then
done again through ``repartitionById`` (stream_writer.py). Key groups no task held rows
of get empty files from the driver, as a subtask no task ran does.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame

from batchpoint.spark.job_count import is_connect
from batchpoint.spark.plan_facts import scala_items
from batchpoint.spark.state_writer import WriteSpec
from batchpoint.state.format import KEY_GROUP_COLUMN
from batchpoint.state.keygroups import reversed_bits

#: Spark types a key column is hashed as it is (key_groups._hashed_as widens the others,
#: so a frame partitioned by them is not partitioned by the key hash).
_HASHED_AS_IS = frozenset({"long", "string", "binary", "boolean", "date", "decimal"})


def _physical_plan(df: DataFrame) -> Any:
    plan = df._jdf.queryExecution().executedPlan()  # type: ignore[union-attr]
    if plan.getClass().getSimpleName() == "AdaptiveSparkPlanExec":
        # Adaptive execution's initial plan holds the exchanges its stages will run.
        plan = plan.initialPlan()
    return plan


def key_partitions(df: DataFrame, key_columns: Sequence[str]) -> int | None:
    """N when Spark's plan leaves `df`'s rows hash-partitioned into N partitions by
    exactly its key columns, in order, each of a type the key hash reads as it is; None
    when it does not, or cannot be asked (a Connect session: its plans live on the
    server). Two shapes qualify: a plan whose output partitioning says so (an aggregation
    by the key), and a full outer join on the key whose sides are both so partitioned
    and whose key columns come out as the join keys or their coalesce (a changelog's
    comparison of the new state with the base: each key's rows meet in the partition
    its hash names, which Spark does not express for a full outer join)."""
    if is_connect(df.sparkSession):
        return None
    plan = _physical_plan(df)
    partitioning = plan.outputPartitioning()
    if partitioning.getClass().getSimpleName() == "HashPartitioning":
        output = {a.exprId().id(): a for a in scala_items(plan.output())}
        keys = _keyed(partitioning, lambda e: output.get(e.exprId().id()) is not None)
        return int(partitioning.numPartitions()) if keys == list(key_columns) else None
    return _full_outer_join_partitions(plan, key_columns)


def _keyed(partitioning: Any, known: Any) -> list[str] | None:
    """The names of a hash partitioning's attributes, when each is a plain attribute
    `known` accepts, of a type hashed as it is."""
    names = []
    for expression in scala_items(partitioning.expressions()):
        if expression.getClass().getSimpleName() != "AttributeReference":
            return None  # a cast, or floating-point normalisation of a double key
        if not known(expression):
            return None
        if expression.dataType().typeName().split("(")[0] not in _HASHED_AS_IS:
            return None
        names.append(expression.name())
    return names


_PASS_THROUGH = frozenset({"ProjectExec", "FilterExec", "GenerateExec", "SortExec"})
_SHUFFLE_JOINS = frozenset({"SortMergeJoinExec", "ShuffledHashJoinExec"})


def _full_outer_join_partitions(plan: Any, key_columns: Sequence[str]) -> int | None:
    projections: list[Any] = []
    node = plan
    while node.getClass().getSimpleName() in _PASS_THROUGH:
        if node.getClass().getSimpleName() == "ProjectExec":
            projections.append(node.projectList())
        node = node.child()
    if node.getClass().getSimpleName() not in _SHUFFLE_JOINS:
        return None
    if node.joinType().toString() != "FullOuter":
        return None
    sides = []
    for child, keys in ((node.left(), node.leftKeys()), (node.right(), node.rightKeys())):
        partitioning = child.outputPartitioning()
        if partitioning.getClass().getSimpleName() != "HashPartitioning":
            return None
        ids = [k.exprId().id() for k in scala_items(keys) if hasattr(k, "exprId")]
        names = _keyed(partitioning, lambda e, ids=ids: e.exprId().id() in ids)
        if names != list(key_columns) or len(ids) != len(key_columns):
            return None
        sides.append((ids, int(partitioning.numPartitions())))
    (left, n_left), (right, n_right) = sides
    if n_left != n_right:
        return None
    output = {a.name(): a.exprId().id() for a in scala_items(plan.output())}
    for index, name in enumerate(key_columns):
        if name not in output:
            return None
        origin = _origin(output[name], projections)
        if origin not in ({left[index]}, {right[index]}, {left[index], right[index]}):
            return None
    return n_left


def _origin(expr_id: int, projections: list[Any]) -> set[int] | None:
    """The join-side attributes an output attribute is, through the projections from
    the top down: itself, an alias of one, or an alias of coalesce(left, right)."""
    for projection in projections:
        for item in scala_items(projection):
            if item.exprId().id() != expr_id:
                continue
            kind = item.getClass().getSimpleName()
            if kind == "AttributeReference":
                break  # passed through unchanged
            if kind != "Alias":
                return None
            inner = item.child()
            inner_kind = inner.getClass().getSimpleName()
            if inner_kind == "AttributeReference":
                expr_id = inner.exprId().id()
                break
            if inner_kind != "Coalesce":
                return None
            parts = scala_items(inner.children())
            if any(p.getClass().getSimpleName() != "AttributeReference" for p in parts):
                return None
            return {p.exprId().id() for p in parts}
        else:
            return None  # not produced by this projection
    return {expr_id}


def units(df: DataFrame, spec: WriteSpec) -> int | None:
    """How many parts of the key-group space `df`'s Spark partitions hold whole, each
    inside one subtask (a unit: ``max_parallelism / units`` contiguous key groups); None
    when its rows do not sit by subtask. Partition p of N holds the key groups whose top
    log2(N) bits are reverse(p): with N and the parallelism P powers of two, a unit is a
    subtask (N <= P, several per partition) or 1/(N/P) of one (N > P)."""
    parallelism, max_parallelism = spec.parallelism, spec.max_parallelism
    if not reversed_bits(max_parallelism) or parallelism & (parallelism - 1):
        return None
    partitions = key_partitions(df, spec.key_columns)
    if partitions is None or partitions & (partitions - 1) or partitions > max_parallelism:
        return None
    return max(partitions, parallelism)


def runs(
    batch: pa.RecordBatch, stream_column: str, unit_sizes: Sequence[int]
) -> Iterator[tuple[tuple[int, int], pa.RecordBatch]]:
    """The runs of one (stream, unit) in `batch`, in order: rows come sorted by stream
    and key group, and a unit of stream i is `unit_sizes[i]` contiguous key groups."""
    streams = batch.column(stream_column).to_numpy(zero_copy_only=False)
    if len(streams) == 0:
        return
    groups = batch.column(KEY_GROUP_COLUMN).to_numpy(zero_copy_only=False)
    unit = groups // np.asarray(unit_sizes)[streams]
    changed = (np.diff(streams) != 0) | (np.diff(unit) != 0)
    cuts = [0, *(np.flatnonzero(changed) + 1).tolist(), len(streams)]
    for start, end in itertools.pairwise(cuts):
        yield (int(streams[start]), int(unit[start])), batch.slice(start, end - start)
