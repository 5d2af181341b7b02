"""Functions that race each other in separate processes (see the `process_pool`
fixture). Kept apart from the test modules so that a worker imports only this and the
store it is handed, not pytest."""

from __future__ import annotations

import pickle
import time

from batchpoint.errors import ObjectAlreadyExists, PreconditionFailed
from batchpoint.storage.base import ObjectStore


def sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.time()))


def create(blob: bytes, key: str, tag: str, start_at: float) -> str | None:
    """Try to create `key` with `tag` as content; return the tag if this one won."""
    store: ObjectStore = pickle.loads(blob)
    sleep_until(start_at)
    try:
        store.create(key, tag.encode())
        return tag
    except ObjectAlreadyExists:
        return None


def increment(blob: bytes, key: str, times: int, start_at: float) -> list[int]:
    """Increment a counter `times` times by compare-and-swap; return the values this
    process wrote (each one a claim 'I moved the counter to this value')."""
    store: ObjectStore = pickle.loads(blob)
    sleep_until(start_at)
    written: list[int] = []
    while len(written) < times:
        current = store.get(key)
        value = int(current.data) + 1
        try:
            store.replace(key, str(value).encode(), current.etag)
        except PreconditionFailed:
            continue
        written.append(value)
    return written
