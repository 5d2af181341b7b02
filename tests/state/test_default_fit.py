"""Whether a declared default fits its column (`default_problem`), held against what
pyarrow reads back, over generated nested types: a default pyarrow stores exactly is
never refused, and one it would change somewhere inside (an integer leaf given a
fraction, a millisecond time given a microsecond, a date given a time of day, a float32
leaf given a value beyond its range) is always refused, at any depth."""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from batchpoint.state.evolution.types import default_problem

ZONES = st.sampled_from([None, datetime.UTC, datetime.timezone(datetime.timedelta(hours=2))])


def _to_ms(value: Any) -> Any:
    if isinstance(value, datetime.timedelta):
        return value - datetime.timedelta(microseconds=value.microseconds % 1000)
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


INSTANTS = st.datetimes(
    datetime.datetime(1970, 1, 2), datetime.datetime(2100, 1, 1), timezones=ZONES
).map(_to_ms)
LEAVES: dict[pa.DataType, st.SearchStrategy[Any]] = {
    pa.int8(): st.integers(-128, 127),
    pa.int64(): st.integers(-(2**50), 2**50),
    pa.float32(): st.floats(width=32, allow_nan=False),
    pa.float64(): st.floats(allow_nan=False),
    # pyarrow also takes a count of the unit.
    pa.timestamp("ms"): st.one_of(INSTANTS, st.integers(0, 10**12)),
    pa.timestamp("ms", tz="UTC"): st.one_of(INSTANTS, st.integers(0, 10**12)),
    pa.time32("ms"): st.times().map(_to_ms),
    pa.duration("ms"): st.timedeltas(
        datetime.timedelta(days=-(10**5)), datetime.timedelta(days=10**5)
    ).map(_to_ms),
    pa.date32(): st.dates(datetime.date(1900, 1, 1), datetime.date(2200, 1, 1)),
    pa.string(): st.text(max_size=4),
    pa.decimal128(9, 2): st.decimals("-9999999.99", "9999999.99", places=2),
    pa.bool_(): st.booleans(),
}
MICRO = datetime.timedelta(microseconds=1)
#: A value of each leaf kind that pyarrow stores as something else, from an exact one.
BLURS: dict[pa.DataType, Callable[[Any], Any]] = {
    pa.int8(): lambda v: v + 0.5 if v < 127 else v - 0.5,
    pa.int64(): lambda v: v + 0.5,
    pa.float32(): lambda v: 1e40,
    pa.timestamp("ms"): lambda v: _instant(v) + MICRO,
    pa.timestamp("ms", tz="UTC"): lambda v: _instant(v) + MICRO,
    pa.time32("ms"): lambda v: v.replace(microsecond=v.microsecond + 1),
    pa.duration("ms"): lambda v: v + MICRO,
    pa.date32(): lambda v: datetime.datetime.combine(v, datetime.time(5)),
}


def _instant(value: Any) -> datetime.datetime:
    """A timestamp default as a datetime (a count of milliseconds read as pyarrow does)."""
    if isinstance(value, int):
        return datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=value)
    return value


def _types() -> st.SearchStrategy[pa.DataType]:
    def nest(inner: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
        names = st.sampled_from(["a", "b", "c"])
        field = st.builds(pa.field, names, inner, st.booleans())
        return st.one_of(
            st.builds(pa.list_, inner),
            st.builds(pa.large_list, inner),
            st.lists(field, min_size=1, max_size=3, unique_by=lambda f: f.name).map(pa.struct),
            st.builds(pa.map_, st.just(pa.string()), inner),
        )

    return st.recursive(st.sampled_from(list(LEAVES)), nest, max_leaves=5)


def _value(data: st.DataObject, t: pa.DataType) -> tuple[Any, Any]:
    """An exact value of `t`, and the same value with one leaf blurred (None when no
    leaf of it can be)."""
    if t in LEAVES:
        value = data.draw(LEAVES[t])
        return value, BLURS[t](value) if t in BLURS else None
    if pa.types.is_struct(t):
        fields = [t.field(i) for i in range(t.num_fields)]
        parts = [
            (None, None) if f.nullable and data.draw(st.booleans()) else _value(data, f.type)
            for f in fields
        ]
        return _named(data, [f.name for f in fields], parts)
    if pa.types.is_map(t):
        keys = data.draw(st.lists(st.text(max_size=3), max_size=3, unique=True))
        return _named(data, keys, [_value(data, t.item_type) for _ in keys])
    size = data.draw(st.integers(0, 3))
    return _blur_one(data, [_value(data, t.value_type) for _ in range(size)])


def _named(data: st.DataObject, names: list[str], parts: list[tuple[Any, Any]]) -> tuple:
    value, blurred = _blur_one(data, parts)
    named = dict(zip(names, value, strict=True))
    return named, None if blurred is None else dict(zip(names, blurred, strict=True))


def _blur_one(data: st.DataObject, parts: list[tuple[Any, Any]]) -> tuple[list, list | None]:
    exact = [value for value, _ in parts]
    blurrable = [i for i, (_, blurred) in enumerate(parts) if blurred is not None]
    if not blurrable:
        return exact, None
    i = data.draw(st.sampled_from(blurrable))
    return exact, [*exact[:i], parts[i][1], *exact[i + 1 :]]


def _reads_as_other(value: Any, t: pa.DataType) -> bool:
    try:
        return pa.scalar(value, t).as_py() != value
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return True


@settings(max_examples=300, deadline=None)
@given(_types(), st.data())
def test_an_exact_default_fits_and_one_blurred_anywhere_inside_is_refused(
    t: pa.DataType, data: st.DataObject
) -> None:
    value, blurred = _value(data, t)
    column = pa.field("x", t, nullable=False)
    assert default_problem(value, column) is None
    if blurred is not None:
        # The reference: pyarrow would store something else than the default says.
        assert _reads_as_other(blurred, t)
        assert default_problem(blurred, column) is not None


def test_the_refusal_names_what_the_column_would_read() -> None:
    cases = [
        ([1.5], pa.list_(pa.int64()), "it would read [1]"),
        ({"a": [2.5]}, pa.struct([("a", pa.list_(pa.int8()))]), "it would read {'a': [2]}"),
        ([1e40], pa.list_(pa.float32()), "is out of the range of"),
        (datetime.time(1, 2, 3, 456789), pa.time32("ms"), "456000"),
        (decimal.Decimal("1.234"), pa.decimal128(5, 2), "is not a decimal128"),
    ]
    for value, t, why in cases:
        problem = default_problem(value, pa.field("x", t))
        assert problem is not None and why in problem, (value, t, problem)


def _holding(inner: pa.DataType, nullable: bool, kind: str) -> pa.DataType:
    child = pa.field("item" if kind != "struct" else "a", inner, nullable)
    if kind == "struct":
        return pa.struct([child])
    if kind == "map":
        return pa.map_(pa.string(), child)
    return pa.large_list(child) if kind == "large_list" else pa.list_(child)


def _with_null(kind: str, inner: Any) -> Any:
    return {"struct": {"a": inner}, "map": {"k": inner}}.get(kind, [inner])


def test_a_null_fits_only_where_the_nested_field_takes_one() -> None:
    """pyarrow builds a null into a non-nullable nested field without a word: the
    default would fill rows that break the declared schema (found by a reviewer:
    {'a': None} into struct<a: int32 not null> was 'migrated')."""
    kinds = ["struct", "list", "large_list", "map"]
    for outer in kinds:
        for inner_kind in kinds:
            for outer_nullable in (True, False):
                for inner_nullable in (True, False):
                    inner_t = _holding(pa.int32(), inner_nullable, inner_kind)
                    t = _holding(inner_t, outer_nullable, outer)
                    column = pa.field("x", t, nullable=False)
                    at_outer = _with_null(outer, None)
                    at_inner = _with_null(outer, _with_null(inner_kind, None))
                    case = (t, at_outer, at_inner)
                    assert (default_problem(at_outer, column) is None) == outer_nullable, case
                    assert (default_problem(at_inner, column) is None) == inner_nullable, case
