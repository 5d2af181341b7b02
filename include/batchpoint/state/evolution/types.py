"""Which type changes carry every stored value over unchanged (widening), and whether a
declared default fits its column.

A widening is a cast that cannot fail and cannot change a value: every value of the old
type is a value of the new one. Anything else (narrowing, a change of kind, a timestamp
unit or zone, a nested type) would either fail on some rows or change what they mean,
which is for a migrate= function to decide, not for a rule.
"""

from __future__ import annotations

import datetime
import decimal
import math
from typing import Any

import pyarrow as pa
import pyarrow.types as pt

_OFFSET_WIDENINGS = frozenset(
    {
        (pa.string(), pa.large_string()),
        (pa.binary(), pa.large_binary()),
    }
)


def is_widening(old: pa.DataType, new: pa.DataType) -> bool:
    """int8 -> int16 -> int32 -> int64; an unsigned int to a wider unsigned int or a
    strictly wider signed one; float32 -> float64; decimal(p, s) -> decimal(p', s) with
    p' >= p (any decimal width); string -> large_string; binary -> large_binary."""
    if old == new:
        return False
    if pt.is_integer(old) and pt.is_integer(new):
        wider = new.bit_width > old.bit_width
        return wider and (pt.is_signed_integer(new) or pt.is_unsigned_integer(old))
    if pt.is_float32(old):
        return pt.is_float64(new)
    if pt.is_decimal(old) and pt.is_decimal(new):
        return new.scale == old.scale and new.precision >= old.precision
    return (old, new) in _OFFSET_WIDENINGS


def is_narrowing(old: pa.DataType, new: pa.DataType) -> bool:
    """The reverse of a widening: some stored values may not fit."""
    return is_widening(new, old) and not is_widening(old, new)


def is_nested(arrow_type: pa.DataType) -> bool:
    return pt.is_nested(arrow_type)


def default_problem(value: Any, field: pa.Field) -> str | None:
    """Why `value` cannot be what stored rows read in `field`, or None when it can.

    pyarrow converts some values silently where a default would then differ from what
    the code says (1.5 into an int64 column reads 1, [1.5] into a list of them [1]; 1e40
    into float32 reads inf; a microsecond into a millisecond timestamp is cut), so every
    integer, date, time and duration in it, at any depth, must come back equal and every
    finite float finite. A float may round (0.1 in float32), and a naive time into a
    zoned column means UTC, as pyarrow reads it.
    """
    if value is None:
        return None if field.nullable else f"null does not fit the non-nullable {field.type}"
    try:
        stored = pa.scalar(value, type=field.type).as_py()
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as error:
        return f"{value!r} is not a {field.type} ({error})"
    if (null := _misplaced_null(stored, field.type)) is not None:
        return f"{value!r} is not a {field.type} ({null})"
    if (problem := _changed(value, stored, field.type)) is None:
        return None
    if problem == "overflow":
        return f"{value!r} is out of the range of {field.type}"
    return f"{value!r} is not a {field.type} (it would read {stored!r})"


def _changed(value: Any, stored: Any, arrow_type: pa.DataType) -> str | None:
    """ "overflow" or "changed" where `stored` (what pyarrow made of `value` as an
    `arrow_type`) differs from it; None where it does not, or where `value` is of a
    kind this does not compare (pyarrow accepted it, as before)."""
    if value is None or stored is None:
        return None if value is None and stored is None else "changed"
    if pt.is_dictionary(arrow_type):
        return _changed(value, stored, arrow_type.value_type)
    if pt.is_struct(arrow_type):
        return _first(_struct_pairs(value, stored, arrow_type))
    if pt.is_map(arrow_type):
        pairs = list(value.items()) if isinstance(value, dict) else value
        if not isinstance(pairs, list | tuple) or len(pairs) != len(stored):
            return None
        kinds = (arrow_type.key_type, arrow_type.item_type)
        return _first(
            (part, back, kind)
            for pair, stored_pair in zip(pairs, stored, strict=True)
            for part, back, kind in zip(pair, stored_pair, kinds, strict=False)
        )
    if _is_list_type(arrow_type):
        if not isinstance(value, list | tuple) or len(value) != len(stored):
            return None
        element = arrow_type.value_type
        return _first((v, s, element) for v, s in zip(value, stored, strict=True))
    return _leaf_changed(value, stored, arrow_type)


def _misplaced_null(stored: Any, arrow_type: pa.DataType) -> str | None:
    """The first null at a depth that takes none: pyarrow builds the scalar all the
    same, and the filled rows would break the schema the code declares."""
    children: list[tuple[Any, pa.Field]] = []
    if pt.is_struct(arrow_type) and isinstance(stored, dict):
        fields = [arrow_type.field(i) for i in range(arrow_type.num_fields)]
        children = [(stored.get(f.name), f) for f in fields]
    elif pt.is_map(arrow_type) and isinstance(stored, list):
        children = [(pair[1], arrow_type.item_field) for pair in stored]
    elif _is_list_type(arrow_type) and isinstance(stored, list):
        children = [(item, arrow_type.value_field) for item in stored]
    for child, field in children:
        if child is None and not field.nullable:
            return f"null does not fit the non-nullable '{field.name}' ({field.type})"
        if child is not None and (problem := _misplaced_null(child, field.type)) is not None:
            return problem
    return None


def _is_list_type(arrow_type: pa.DataType) -> bool:
    return (
        pt.is_list(arrow_type) or pt.is_large_list(arrow_type) or pt.is_fixed_size_list(arrow_type)
    )


def _struct_pairs(value: Any, stored: dict, arrow_type: pa.StructType) -> list[tuple]:
    fields = [arrow_type.field(i) for i in range(arrow_type.num_fields)]
    if isinstance(value, dict):
        return [(value.get(f.name), stored.get(f.name), f.type) for f in fields]
    if isinstance(value, tuple) and len(value) == len(fields):
        return [(v, stored.get(f.name), f.type) for v, f in zip(value, fields, strict=True)]
    return []


def _first(parts: Any) -> str | None:
    return next((p for v, s, t in parts if (p := _changed(v, s, t)) is not None), None)


def _leaf_changed(value: Any, stored: Any, arrow_type: pa.DataType) -> str | None:
    if pt.is_floating(arrow_type):
        return "overflow" if _overflows(value, stored) else None
    if pt.is_integer(arrow_type):
        return None if value == stored else "changed"
    if isinstance(value, bool) or not isinstance(value, _EXACT):
        return None
    if isinstance(value, datetime.date) and isinstance(stored, datetime.datetime):
        if not isinstance(value, datetime.datetime):
            value = datetime.datetime.combine(value, datetime.time())
        value = _as_stored_zone(value, stored)
    elif isinstance(value, datetime.datetime) and isinstance(stored, datetime.date):
        value = value.date() if value.timetz().replace(tzinfo=None) == datetime.time() else value
    elif not isinstance(value, type(stored)):
        return None  # pyarrow's own reading of another kind: an int as a count of units
    return None if value == stored else "changed"


#: Python values a default compares to what pyarrow stored for it.
_EXACT = (int, decimal.Decimal, datetime.date, datetime.time, datetime.timedelta)


def _as_stored_zone(value: datetime.datetime, stored: datetime.datetime) -> datetime.datetime:
    """pyarrow reads a naive time into a zoned column as UTC, and an aware one into a
    naive column as its UTC time."""
    if value.tzinfo is None and stored.tzinfo is not None:
        return value.replace(tzinfo=datetime.UTC)
    if value.tzinfo is not None and stored.tzinfo is None:
        return value.astimezone(datetime.UTC).replace(tzinfo=None)
    return value


def _overflows(value: Any, stored: Any) -> bool:
    try:
        return math.isinf(stored) and not math.isinf(float(value))
    except (TypeError, ValueError, OverflowError):
        return True
