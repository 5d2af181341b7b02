"""Key groups, as in Flink's KeyGroupRangeAssignment.

A key hashes to one of `max_parallelism` key groups; subtask i of an operator with
parallelism p owns a contiguous range of them. The hash must be the same in every
process, machine and Python version (Python's hash() is salted per process).

Two hashes exist, told apart by the state format version of the files:

- XXHASH64 (format 2, what is written today): Spark SQL's ``xxhash64`` of the key
  columns, integral columns widened to bigint and floats to double first so that a key
  hashes alike whatever integer or float type carries it, then ``pmod`` by max
  parallelism. Spark computes it in the JVM; ``state.xxhash64`` is the same function
  in Python for the few places that place a key by hand.
- BLAKE2B (format 1): blake2b of a canonical JSON encoding, computed per row by a
  Python UDF; kept so that checkpoints written with it still restore and verify.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from batchpoint import codec
from batchpoint.errors import PipelineSpecError
from batchpoint.state.xxhash64 import spark_xxhash64

#: Flink's upper bound for max parallelism (2^15).
UPPER_BOUND_MAX_PARALLELISM = 1 << 15


@dataclass(frozen=True, order=True)
class KeyGroupRange(codec.Value):
    """Inclusive range [start, end] of key groups; empty when end < start. Stored as
    `[start, end]`."""

    LAYOUT = "array"

    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start + 1)

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def intersection(self, other: KeyGroupRange) -> KeyGroupRange:
        return KeyGroupRange(max(self.start, other.start), min(self.end, other.end))

    def overlaps(self, other: KeyGroupRange) -> bool:
        return self.intersection(other).size > 0

    def __str__(self) -> str:
        return f"[{self.start}, {self.end}]"


def canonical_key_bytes(key: Any) -> bytes:
    """A byte encoding of a key (a scalar or a tuple of scalars) that does not depend on
    the process: ints and their float equivalents differ on purpose, as in SQL."""
    parts = list(key) if isinstance(key, tuple | list) else [key]
    normalised = []
    for part in parts:
        if part is None:
            raise ValueError("a key column is null")
        if hasattr(part, "item") and not isinstance(part, str | bytes):  # numpy scalars
            part = part.item()
        if isinstance(part, bytes):
            normalised.append(["b", part.hex()])
        elif isinstance(part, bool):
            normalised.append(["o", part])
        elif isinstance(part, int):
            normalised.append(["i", str(part)])
        elif isinstance(part, float):
            normalised.append(["f", repr(part)])
        else:
            normalised.append(["s", str(part)])
    return json.dumps(normalised, separators=(",", ":")).encode()


class KeyHash(enum.Enum):
    """How a key becomes a key group; which one a file used follows from its format."""

    BLAKE2B = 1  # format 1: a Python function per row
    XXHASH64 = 2  # format 2: Spark SQL, in the JVM


def key_hash(key: Any) -> int:
    """The format-1 hash (BLAKE2B)."""
    return int.from_bytes(hashlib.blake2b(canonical_key_bytes(key), digest_size=8).digest(), "big")


def _xxhash_part(part: Any) -> tuple[str, object]:
    """A Python key value as the Spark column it was hashed as (see KeyHash.XXHASH64)."""
    if part is None:
        raise ValueError("a key column is null")
    if hasattr(part, "item") and not isinstance(part, str | bytes):  # numpy scalars
        part = part.item()
    if isinstance(part, bool):
        return "int", int(part)
    if isinstance(part, int):
        return "long", part
    if isinstance(part, float):
        return "double", part
    if isinstance(part, str | bytes | bytearray):
        return "bytes", part
    if isinstance(part, datetime.datetime):
        raise ValueError("timestamps cannot be key columns")
    if isinstance(part, datetime.date):
        return "int", (part - datetime.date(1970, 1, 1)).days
    if isinstance(part, decimal.Decimal):
        # Spark hashes a decimal by its unscaled value at the column's declared scale,
        # which a Python Decimal does not carry.
        raise ValueError("decimal keys are placed by Spark only: give the column's key group")
    raise ValueError(f"a key column of type {type(part).__name__} has no key hash")


def assign_to_key_group(
    key: Any, max_parallelism: int, key_hash_kind: KeyHash = KeyHash.XXHASH64
) -> int:
    """The key group of `key` (a scalar or a tuple of scalars, in key-column order)."""
    if key_hash_kind is KeyHash.BLAKE2B:
        return key_hash(key) % max_parallelism
    parts = list(key) if isinstance(key, tuple | list) else [key]
    # Python's % with a positive modulus is Spark's pmod of the signed hash.
    return spark_xxhash64([_xxhash_part(p) for p in parts]) % max_parallelism


def check_parallelism(parallelism: int, max_parallelism: int, what: str) -> None:
    if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise PipelineSpecError(
            f"{what}: max_parallelism {max_parallelism} must be in 1..{UPPER_BOUND_MAX_PARALLELISM}"
        )
    if not 1 <= parallelism <= max_parallelism:
        raise PipelineSpecError(
            f"{what}: parallelism {parallelism} must be in 1..max_parallelism ({max_parallelism})"
        )


def key_group_range_for_subtask(
    max_parallelism: int, parallelism: int, subtask: int
) -> KeyGroupRange:
    """Flink's computeKeyGroupRangeForOperatorIndex."""
    check_parallelism(parallelism, max_parallelism, "key group assignment")
    if not 0 <= subtask < parallelism:
        raise ValueError(f"subtask {subtask} out of range for parallelism {parallelism}")
    start = (subtask * max_parallelism + parallelism - 1) // parallelism
    end = ((subtask + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)


def subtask_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """Flink's computeOperatorIndexForKeyGroup: the inverse of the range assignment."""
    return key_group * parallelism // max_parallelism


def subtask_for_key(
    key: Any, max_parallelism: int, parallelism: int, key_hash_kind: KeyHash = KeyHash.XXHASH64
) -> int:
    return subtask_for_key_group(
        max_parallelism, parallelism, assign_to_key_group(key, max_parallelism, key_hash_kind)
    )
