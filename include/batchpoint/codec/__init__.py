"""The record codec: every stored record, and every JSON value stored inside one, is
declared once as a dataclass, and its JSON form follows from the declaration.

- A field's JSON form comes from its type hint (int, float, str, bool, `X | None`,
  tuples and lists, `Mapping[str, X]`, `Any`, enums by value, classes with a codec),
  plus what the hint cannot say, declared with `codec.field(...)` (spec.py): a time
  stored as ISO-8601 text, another JSON key, omitted when it has a given value, a read
  default for records written before the field existed, a catch-all for unknown keys.
- A `Record` names its KIND and VERSION, and in READS every older version it still
  reads, each with its body's declaration and an upgrade to the next version: the next
  format change is a declaration plus an upgrade, and readers accept every version an
  earlier release wrote (invariant 16).
- Whatever a reader finds wrong is a CorruptRecord naming the record and the field
  (`field 'x' should be int, found 'y'`); a record is never half read.
- The same declarations give the JSON schemas under docs/records/ (schema.py).

This package sits just above `errors` (no other batchpoint import), so that state/,
sources/, protocol/ and quality/ all declare their records with it.
"""

from batchpoint.codec.envelope import canonical, decode, encode, from_iso, to_iso
from batchpoint.codec.record import Record, Upgrade, Value, reading
from batchpoint.codec.spec import Adapter, Invalid, field, time

__all__ = [
    "Adapter",
    "Invalid",
    "Record",
    "Upgrade",
    "Value",
    "canonical",
    "decode",
    "encode",
    "field",
    "from_iso",
    "reading",
    "time",
    "to_iso",
]
