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


class IdAlreadyUsed(Exception):
    """The counter handed out an id the control record already names, or one below the
    newest settled id it names (`decider.admissible`): it is behind (restored from an
    older copy of the store, or written by hand), or a newer checkpoint settled first.
    Raised inside the admission CAS, so the id is never admitted; the trigger moves the
    counter past `newest` (`skip_past`) and takes another."""

    def __init__(self, checkpoint_id: int, newest: int) -> None:
        super().__init__(f"checkpoint id {checkpoint_id} is taken (ids up to {newest} are used)")
        self.checkpoint_id = checkpoint_id
        self.newest = newest


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

    def skip_past(self, used: int) -> None:
        """Move a counter that is behind past `used` and every id stored; never back."""

        def bump(current: NextCheckpointId | None) -> NextCheckpointId | None:
            floor = max(used + 1, self._first_unused())
            if current is not None and current.next_id >= floor:
                return None
            return NextCheckpointId(floor)

        try:
            update_record(
                self._store, self._key, NextCheckpointId.decode, NextCheckpointId.encode, bump
            )
        except CorruptRecord as exc:
            raise CorruptRecord(exc.key, exc.problem, COUNTER_HINT) from None

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
        known.update(found[0].known_ids())
    return max(known, default=0) + 1
