"""XXH64, and Spark SQL's ``xxhash64`` built on it, in plain Python.

Key groups are computed by Spark (``pmod(xxhash64(keys), max_parallelism)``, in the
JVM). This is the same function for Python code that must agree with it without a
Spark session: tests, and tools that place a key by hand. It is slow (pure Python) and
meant for a few keys, not for rows.
"""

from __future__ import annotations

import struct

from batchpoint.state.murmur3 import double_bytes

_MASK = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5

#: The seed Spark's xxhash64 starts from; each column's hash seeds the next.
SPARK_SEED = 42


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (64 - bits))) & _MASK


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _MASK
    return (_rotl(acc, 31) * _P1) & _MASK


def _merge(acc: int, value: int) -> int:
    acc ^= _round(0, value)
    return (acc * _P1 + _P4) & _MASK


def xxh64(data: bytes, seed: int = 0) -> int:
    """The reference XXH64 of `data` (unsigned 64-bit)."""
    seed &= _MASK
    length = len(data)
    offset = 0
    if length >= 32:
        v1 = (seed + _P1 + _P2) & _MASK
        v2 = (seed + _P2) & _MASK
        v3 = seed
        v4 = (seed - _P1) & _MASK
        while offset + 32 <= length:
            a, b, c, d = struct.unpack_from("<4Q", data, offset)
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
            offset += 32
        acc = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _MASK
        for v in (v1, v2, v3, v4):
            acc = _merge(acc, v)
    else:
        acc = (seed + _P5) & _MASK
    acc = (acc + length) & _MASK
    while offset + 8 <= length:
        (lane,) = struct.unpack_from("<Q", data, offset)
        acc ^= _round(0, lane)
        acc = (_rotl(acc, 27) * _P1 + _P4) & _MASK
        offset += 8
    if offset + 4 <= length:
        (lane,) = struct.unpack_from("<I", data, offset)
        acc ^= (lane * _P1) & _MASK
        acc = (_rotl(acc, 23) * _P2 + _P3) & _MASK
        offset += 4
    while offset < length:
        acc ^= (data[offset] * _P5) & _MASK
        acc = (_rotl(acc, 11) * _P1) & _MASK
        offset += 1
    acc ^= acc >> 33
    acc = (acc * _P2) & _MASK
    acc ^= acc >> 29
    acc = (acc * _P3) & _MASK
    acc ^= acc >> 32
    return acc


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def spark_xxhash64(parts: list[tuple[str, object]]) -> int:
    """Spark SQL's ``xxhash64(c1, c2, ...)`` (signed), for columns given as (kind, value):
    "int" (Spark's int, boolean, date: 4 bytes), "long" (8 bytes), "double" (its IEEE
    bits as a long), "bytes" (strings as UTF-8, binary). A null column leaves the hash
    unchanged, as in Spark."""
    acc = SPARK_SEED
    for kind, value in parts:
        if value is None:
            continue
        if kind == "int":
            data = struct.pack("<i", int(value))  # type: ignore[call-overload]
        elif kind == "long":
            data = struct.pack("<q", int(value))  # type: ignore[call-overload]
        elif kind == "double":
            data = double_bytes(value)
        elif kind == "bytes":
            data = value.encode() if isinstance(value, str) else bytes(value)  # type: ignore[arg-type]
        else:
            raise ValueError(f"unknown column kind {kind!r}")
        acc = _signed(xxh64(data, acc))
    return acc
