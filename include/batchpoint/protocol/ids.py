"""Flink's CheckpointIDCounter, kept in storage: ids only grow and are never reused,
whatever aborts, restores or racing triggers happen, and a lost counter starts again
past every id stored."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from batchpoint import codec
from batchpoint.errors import CorruptRecord
from batchpoint.protocol.cas import read_record, update_record
from batchpoint.protocol.control import ControlUnreadable
from batchpoint.protocol.control_store import ControlStore
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.reads import CheckpointReads
from batchpoint.storage.base import ObjectStore

#: A damaged counter holds nothing the stored checkpoints do not: without it, the next
#: id is found again past every one of them
COUNTER_HINT = "delete it: the next trigger continues past every checkpoint stored"


@dataclass(frozen=True)
class NextCheckpointId(codec.Record):
    KIND = "checkpoint-id-counter"
    VERSION = 1
    next_id: int


class CheckpointIDCounter:
    def __init__(
        self,
        store: ObjectStore,
        layout: PipelineLayout,
        first_unused: Callable[[], int] | None = None,
    ) -> None:
        """`first_unused`: where a lost counter (deleted by hand, a store copied without
        it) starts again, past every id used (`first_unused_id`), so none is reused."""
        self._store = store
        self._key = layout.id_counter
        self._first_unused = first_unused or (lambda: 1)

    def get_and_increment(self) -> int:
        allocated: list[int] = []

        def bump(current: NextCheckpointId | None) -> NextCheckpointId:
            value = current.next_id if current else self._first_unused()
            allocated[:] = [value]
            return NextCheckpointId(value + 1)

        try:
            update_record(
                self._store, self._key, NextCheckpointId.decode, NextCheckpointId.encode, bump
            )
        except CorruptRecord as exc:
            raise CorruptRecord(exc.key, exc.problem, COUNTER_HINT) from None
        return allocated[0]

    def peek(self) -> int:
        """The id the next allocation will return."""
        try:
            current = read_record(self._store, self._key, NextCheckpointId.decode)
        except CorruptRecord as exc:
            raise CorruptRecord(exc.key, exc.problem, COUNTER_HINT) from None
        return current[0].next_id if current else self._first_unused()


def first_unused_id(records: CheckpointReads, control: ControlStore) -> int:
    """One past every id stored: a checkpoint's folder, or the control record's (whose
    collected ids may have no folder left)."""
    known = set(records.folder_ids())
    try:
        found = control.read()
    except ControlUnreadable:  # the folders still say what was used
        found = None
    if found is not None:
        record = found[0]
        known.update(record.retained_ids(), record.collected)
        known.update(p.checkpoint_id for p in record.pending)
        known.update(e.checkpoint_id for e in record.discarded)
        known.update([record.head] if record.head is not None else [])
    return max(known, default=0) + 1
