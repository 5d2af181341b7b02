"""Which type changes carry every stored value over unchanged (widening), and whether a
declared default fits its column.

A widening is a cast that cannot fail and cannot change a value: every value of the old
type is a value of the new one. Anything else (narrowing, a change of kind, a timestamp
unit or zone, a nested type) would either fail on some rows or change what they mean,
which is for a migrate= function to decide, not for a rule.
"""

from __future__ import annotations

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
    the code says (1.5 into an int64 column reads 1; 1e40 into float32 reads inf), so
    integers must come back equal and finite floats must stay finite.
    """
    if value is None:
        return None if field.nullable else f"null does not fit the non-nullable {field.type}"
    try:
        stored = pa.scalar(value, type=field.type).as_py()
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as error:
        return f"{value!r} is not a {field.type} ({error})"
    if pt.is_integer(field.type) and stored != value:
        return f"{value!r} is not a {field.type} (it would read {stored!r})"
    if pt.is_floating(field.type) and _overflows(value, stored):
        return f"{value!r} is out of the range of {field.type}"
    return None


def _overflows(value: Any, stored: Any) -> bool:
    try:
        return math.isinf(stored) and not math.isinf(float(value))
    except (TypeError, ValueError, OverflowError):
        return True
