"""Spark SQL's ``hash`` (Murmur3 x86 32-bit, seed 42) in plain Python.

Spark's hash partitioning (``HashPartitioning``: a groupBy's or a join's shuffle) places a
row by ``pmod(hash(keys), partitions)``. Format-3 key groups are built on the same hash so
that a frame a keyed aggregation already partitioned holds whole subtasks (see
``keygroups.KeyHash.MURMUR3``). This is that function for Python code that must agree with
Spark without a session: tests, and tools that place a key by hand. Pure Python: for a few
keys, not for rows.
"""

from __future__ import annotations

import math
import struct

_MASK = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593

#: The seed Spark's hash starts from; each column's hash seeds the next.
SPARK_SEED = 42


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def _mix_k1(k1: int) -> int:
    k1 = (k1 * _C1) & _MASK
    return (_rotl(k1, 15) * _C2) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 = _rotl(h1 ^ k1, 13)
    return (h1 * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    return h1 ^ (h1 >> 16)


def _hash_int(value: int, seed: int) -> int:
    return _fmix(_mix_h1(seed, _mix_k1(value & _MASK)), 4)


def _hash_long(value: int, seed: int) -> int:
    h1 = _mix_h1(seed, _mix_k1(value & _MASK))
    h1 = _mix_h1(h1, _mix_k1((value >> 32) & _MASK))
    return _fmix(h1, 8)


def _hash_bytes(data: bytes, seed: int) -> int:
    """Spark's ``hashUnsafeBytes``: whole little-endian ints, then each trailing byte
    (as a signed byte) mixed on its own, which differs from reference Murmur3 on purpose
    (Spark keeps it for compatibility)."""
    aligned = len(data) - len(data) % 4
    h1 = seed
    for (word,) in struct.iter_unpack("<i", data[:aligned]):
        h1 = _mix_h1(h1, _mix_k1(word & _MASK))
    for byte in struct.unpack(f"{len(data) - aligned}b", data[aligned:]):
        h1 = _mix_h1(h1, _mix_k1(byte & _MASK))
    return _fmix(h1, len(data))


def _signed(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


def double_bytes(value: object) -> bytes:
    """A double's 8 bytes as Spark hashes them: -0.0 as 0.0 and every NaN as Java's one
    NaN (Double.doubleToLongBits), since Spark compares them as equal keys."""
    number = float(value)  # type: ignore[arg-type]
    if math.isnan(number):
        return struct.pack("<q", 0x7FF8000000000000)
    return struct.pack("<d", number + 0.0)


def spark_hash(parts: list[tuple[str, object]], seed: int = SPARK_SEED) -> int:
    """Spark SQL's ``hash(c1, c2, ...)`` (signed), for columns given as (kind, value):
    "int" (Spark's int, boolean, date), "long", "double" (its IEEE bits as a long),
    "bytes" (strings as UTF-8, binary). A null column leaves the hash unchanged, as in
    Spark."""
    acc = seed
    for kind, value in parts:
        if value is None:
            continue
        if kind == "int":
            acc = _hash_int(int(value), acc)  # type: ignore[call-overload]
        elif kind == "long":
            acc = _hash_long(int(value), acc)  # type: ignore[call-overload]
        elif kind == "double":
            acc = _hash_long(struct.unpack("<q", double_bytes(value))[0], acc)
        elif kind == "bytes":
            data = value.encode() if isinstance(value, str) else bytes(value)  # type: ignore[arg-type]
            acc = _hash_bytes(data, acc)
        else:
            raise ValueError(f"unknown column kind {kind!r}")
    return _signed(acc)
