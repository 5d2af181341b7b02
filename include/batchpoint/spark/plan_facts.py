"""What Spark's optimizer proves about a DataFrame without running it: that it holds no
rows, the very rows of another, or at most one row per key (`distinct_by`, classic
sessions only: a changelog then compares by a keyed join, spark/value_changelog). An
operator whose epoch has nothing to do (inputs empty, its function leaving the state as
it was) acks by reference on these facts, and a wrong "one row per key" would lose the
changes of a key's other rows, so they must never be guessed: anything the optimized
plans do not show is "not proven".

On a classic session the facts are read from the optimized plans themselves. Over
Connect the plans live on the server, and the client asks it: "no rows" when the
optimized plan the server prints (one explain request) is an empty local relation and
nothing else, printed in full; "the same rows" when the server finds the two analyzed
plans the same (`sameSemantics`), which is stricter than comparing optimized ones: an
operator that unions its state with nothing new (payments' dedup) is proven idle on a
classic session only, and runs its jobs over Connect. A sink or an operator whose
inputs are empty and whose states are returned as they came is idle on both."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from batchpoint.spark.job_count import is_connect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: What Spark prints in place of what it leaves out of a long plan
#: (spark.sql.debug.maxToStringFields, spark.sql.maxPlanStringLength).
_TRUNCATED = ("more fields", "more characters", "Truncated plan")


def _optimized(df: DataFrame):
    return df._jdf.queryExecution().optimizedPlan()  # type: ignore[union-attr]


def _optimized_text(df: DataFrame) -> str | None:
    """The server's optimized logical plan of a Connect DataFrame, as it prints it;
    None when the text is not the whole plan."""
    text = df._explain_string(mode="extended")  # type: ignore[attr-defined]
    _, found, rest = text.partition("== Optimized Logical Plan ==\n")
    if not found:
        return None
    plan = rest.split("\n\n== Physical Plan ==", 1)[0].strip()
    if not plan or any(marker in plan for marker in _TRUNCATED):
        return None
    return plan


def provably_empty(df: DataFrame) -> bool:
    """Whether the optimized plan is an empty local relation (what Spark's empty-
    relation propagation leaves of a plan over inputs known to be empty)."""
    if is_connect(df.sparkSession):
        plan = _optimized_text(df)
        return plan is not None and "\n" not in plan and plan.startswith("LocalRelation <empty>")
    plan = _optimized(df)
    return plan.getClass().getSimpleName() == "LocalRelation" and plan.data().isEmpty()


def same_rows(new: DataFrame, old: DataFrame) -> bool:
    """Whether `new` is `old`, or their plans give the same result (over Connect: their
    analyzed plans, see the module)."""
    if new is old:
        return True
    if is_connect(new.sparkSession):
        return bool(new.sameSemantics(old))
    return bool(_optimized(new).sameResult(_optimized(old)))


def distinct_by(df: DataFrame, key_columns: Sequence[str]) -> bool:
    """Whether Spark's optimizer proves `df` holds at most one row per value of
    `key_columns` (a plan whose last step groups by those columns, or some of them).
    Not proven over Connect: the client sees no plan."""
    if is_connect(df.sparkSession):
        return False
    plan = _optimized(df)
    output = [(a.name(), a.exprId().id()) for a in scala_items(plan.output())]
    names = [name for name, _ in output]
    if any(names.count(name) != 1 for name in key_columns):
        return False  # a key column missing, or two columns of its name: nothing to prove
    ids = {exprid for name, exprid in output if name in key_columns}
    for expressions in scala_items(plan.distinctKeys()):
        attributes = [
            e.exprId().id()
            for e in scala_items(expressions)
            if e.getClass().getSimpleName() == "AttributeReference"
        ]
        if attributes and len(attributes) == expressions.size() and set(attributes) <= ids:
            return True
    return False


def scala_items(scala_iterable: Any) -> list[Any]:
    """A Scala collection's items (a Seq, a Set: any Iterable), read through py4j."""
    iterator = scala_iterable.iterator()
    out = []
    while iterator.hasNext():
        out.append(iterator.next())
    return out
