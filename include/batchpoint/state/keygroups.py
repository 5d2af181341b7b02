"""Key groups, as in Flink's KeyGroupRangeAssignment.

A key hashes to one of `max_parallelism` key groups; subtask i of an operator with
parallelism p owns a contiguous range of them. The hash must be the same in every
process, machine and Python version (Python's hash() is salted per process).

Three hashes exist, told apart by the state format version of the files:

- MURMUR3 (format 3, what is written today): Spark SQL's ``hash`` (Murmur3, the hash of
  Spark's own ``HashPartitioning``) of the key columns, widened as in format 2, ``pmod``
  by max parallelism, then, when max parallelism is a power of two, its bits reversed.
  The reversal is what lets a frame that a keyed aggregation already hash-partitioned
  into N partitions be written with no second shuffle: with N dividing the parallelism
  and both powers of two, partition p holds exactly the keys of subtask
  ``reverse(p)``'s contiguous key-group ranges (spark/aligned_writes.py).
- XXHASH64 (format 2): Spark SQL's ``xxhash64`` of the key
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
from batchpoint.state.murmur3 import spark_hash
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
    MURMUR3 = 3  # format 3: Spark SQL's hash, as its hash partitioning places rows


def key_hash(key: Any) -> int:
    """The format-1 hash (BLAKE2B)."""
    return int.from_bytes(hashlib.blake2b(canonical_key_bytes(key), digest_size=8).digest(), "big")


def _xxhash_part(part: Any) -> tuple[str, object]:
    """A Python key value as the Spark column it was hashed as (KeyHash.XXHASH64 and
    MURMUR3 widen alike)."""
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


def reversed_bits(max_parallelism: int) -> int:
    """How many low bits format 3 reverses: log2 of max parallelism when it is a power of
    two, else 0 (the key group is then the plain pmod)."""
    if max_parallelism & (max_parallelism - 1):
        return 0
    return max_parallelism.bit_length() - 1


def spread(slot: int, max_parallelism: int) -> int:
    """Format 3's key group of hash slot `slot` (``pmod(hash, max_parallelism)``)."""
    bits = reversed_bits(max_parallelism)
    return int(f"{slot:0{bits}b}"[::-1], 2) if bits else slot


def assign_to_key_group(
    key: Any, max_parallelism: int, key_hash_kind: KeyHash = KeyHash.MURMUR3
) -> int:
    """The key group of `key` (a scalar or a tuple of scalars, in key-column order)."""
    if key_hash_kind is KeyHash.BLAKE2B:
        return key_hash(key) % max_parallelism
    parts = [_xxhash_part(p) for p in (list(key) if isinstance(key, tuple | list) else [key])]
    # Python's % with a positive modulus is Spark's pmod of the signed hash.
    if key_hash_kind is KeyHash.XXHASH64:
        return spark_xxhash64(parts) % max_parallelism
    return spread(spark_hash(parts) % max_parallelism, max_parallelism)


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
    key: Any, max_parallelism: int, parallelism: int, key_hash_kind: KeyHash = KeyHash.MURMUR3
) -> int:
    return subtask_for_key_group(
        max_parallelism, parallelism, assign_to_key_group(key, max_parallelism, key_hash_kind)
    )
