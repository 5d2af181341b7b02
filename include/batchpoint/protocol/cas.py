"""Read-modify-write of one small record with compare-and-swap: the only way batchpoint
changes a mutable record, so concurrent coordinators never lose an update."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from batchpoint.errors import (
    CheckpointError,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
)
from batchpoint.storage.base import ObjectStore

T = TypeVar("T")

_MAX_ROUNDS = 200


def read_record(
    store: ObjectStore, key: str, decode: Callable[[str, bytes], T]
) -> tuple[T, str] | None:
    try:
        obj = store.get(key)
    except ObjectNotFound:
        return None
    return decode(key, obj.data), obj.etag


def update_record(
    store: ObjectStore,
    key: str,
    decode: Callable[[str, bytes], T],
    encode: Callable[[T], bytes],
    mutate: Callable[[T | None], T | None],
) -> T | None:
    """Apply `mutate` to the current value (None when absent) until the write wins.

    `mutate` returns the new value, or None to leave the record as it is; it may be
    called several times, so it must not have side effects.
    """
    for attempt in range(_MAX_ROUNDS):
        current = read_record(store, key, decode)
        value, etag = current if current else (None, None)
        new = mutate(value)
        if new is None:
            return value
        try:
            if etag is None:
                store.create(key, encode(new))
            else:
                store.replace(key, encode(new), etag)
            return new
        except (PreconditionFailed, ObjectAlreadyExists):
            # Lost a race: back off a little so racing writers spread out, then re-read.
            time.sleep(random.uniform(0, min(0.05, 0.001 * (attempt + 1))))
    raise CheckpointError(f"gave up updating '{key}' after {_MAX_ROUNDS} contended attempts")
