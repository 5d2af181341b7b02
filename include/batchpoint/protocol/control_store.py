"""Reading and compare-and-swapping the pipeline's control record (protocol/control.py),
and the views of it that name one part: the head (`HeadStore`).

Every write is conditional on the version read (If-Match its etag, or create-if-absent),
so concurrent actors are linearised by storage. A control record of the old layout (a
"head-pointer" v1 record plus `retained/` markers) is read as the record it migrates to
(protocol/migration.py), and the first write of a migrated record drops the markers.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from batchpoint.errors import (
    CheckpointError,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    RecordError,
)
from batchpoint.protocol.control import (
    EMPTY,
    MIGRATED_FROM,
    OLD_LAYOUT,
    ControlRecord,
    ControlUnreadable,
)
from batchpoint.protocol.head import HeadPointer
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.migration import drop_old_markers, migrate
from batchpoint.storage.base import ObjectStore

_MAX_ROUNDS = 200


@dataclass(frozen=True)
class ControlSnapshot:
    """What is stored at the control record's key, damaged or not, with the etag that a
    compare-and-swap on exactly this version needs (`ControlStore.swap`)."""

    record: ControlRecord | None  # None: missing, or unreadable (see `damage`)
    etag: str | None  # None: no object at the key
    damage: ControlUnreadable | None = None

    @property
    def state(self) -> str:
        """ "missing", "unreadable" or "readable"."""
        if self.etag is None:
            return "missing"
        return "unreadable" if self.damage is not None else "readable"


class ControlStore:
    """Reads and compare-and-swaps the control record."""

    def __init__(self, store: ObjectStore, layout: PipelineLayout, clock: Callable[[], float]):
        self._store = store
        self._layout = layout
        self._clock = clock
        self.key = layout.head

    def read(self) -> tuple[ControlRecord, str | None] | None:
        """The record and its etag, or None when there is none (an old layout is read
        as the record it migrates to). Raises ControlUnreadable."""
        found = self.snapshot()
        if found.damage is not None:
            raise found.damage
        if found.record is None:
            return None
        return found.record, found.etag

    def snapshot(self) -> ControlSnapshot:
        """The stored record as it is: missing, unreadable (with why) or readable."""
        try:
            obj = self._store.get(self.key)
        except ObjectNotFound:
            return ControlSnapshot(None, None)
        try:
            if _kind_of(obj.data) == HeadPointer.KIND:
                return ControlSnapshot(
                    migrate(self._store, self._layout, obj.data, self._clock()), obj.etag
                )
            return ControlSnapshot(ControlRecord.decode(self.key, obj.data), obj.etag)
        except RecordError as exc:
            return ControlSnapshot(None, obj.etag, ControlUnreadable(self.key, exc))

    def load(self) -> ControlRecord:
        found = self.read()
        return found[0] if found else EMPTY

    def exists(self) -> bool:
        return self._store.exists(self.key)

    def update(
        self, mutate: Callable[[ControlRecord | None], ControlRecord | None]
    ) -> tuple[ControlRecord | None, bool]:
        """Apply `mutate` (called with None when there is no record) until the write wins.
        Returns (the record in force, whether ours was written). `mutate` may run
        several times and may raise to refuse; it must have no other side effects."""
        for attempt in range(_MAX_ROUNDS):
            found = self.read()
            current, etag = found if found else (None, None)
            new = mutate(current)
            if new is None:
                return current, False
            if self._write(new, current, etag):
                return new, True
            time.sleep(random.uniform(0, min(0.05, 0.001 * (attempt + 1))))
        raise CheckpointError(f"gave up updating '{self.key}' after {_MAX_ROUNDS} attempts")

    def swap(self, new: ControlRecord, read: ControlSnapshot) -> bool:
        """Write `new` only over exactly what `read` saw (If-Match its etag, or create
        when there was nothing): one attempt, False when anything wrote in between."""
        return self._write(new, read.record, read.etag)

    def _write(self, new: ControlRecord, current: ControlRecord | None, etag: str | None) -> bool:
        if MIGRATED_FROM in new.extra:
            new = replace(new, extra={k: v for k, v in new.extra.items() if k != MIGRATED_FROM})
        try:
            if etag is None:
                self._store.create(self.key, new.encode())
            else:
                self._store.replace(self.key, new.encode(), etag)
        except (PreconditionFailed, ObjectAlreadyExists):
            return False
        if current is not None and current.extra.get(MIGRATED_FROM) == OLD_LAYOUT:
            drop_old_markers(self._store, self._layout)
        return True


def _kind_of(data: bytes) -> Any:
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return document.get("kind") if isinstance(document, dict) else None


class HeadStore:
    """A view of the head in the control record (it moves only with the record: the
    settle CAS after a completion, a restore, a repair)."""

    def __init__(
        self, store: ObjectStore, layout: PipelineLayout, control: ControlStore | None = None
    ) -> None:
        self._control = control or ControlStore(store, layout, time.time)

    def get(self) -> HeadPointer:
        return HeadPointer.of(self._control.load())
