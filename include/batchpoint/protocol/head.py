"""The pointer to the newest completed checkpoint: it moves only forward, within one
restore generation; only an explicit restore moves it elsewhere (and starts a new
generation, so finalizers of the abandoned timeline can never move it again)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from batchpoint.errors import CorruptRecord
from batchpoint.protocol import records
from batchpoint.protocol.cas import read_record, update_record
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.records import from_iso, to_iso
from batchpoint.storage.base import ObjectStore


class HeadMoveCause(enum.StrEnum):
    COMPLETED = "completed"
    RESTORE = "restore"


@dataclass(frozen=True)
class HeadPointer:
    KIND = "head-pointer"
    VERSION = 1

    checkpoint_id: int | None
    restore_generation: int
    moved_at: float
    cause: HeadMoveCause

    def encode(self) -> bytes:
        return records.encode(
            self.KIND,
            self.VERSION,
            {
                "checkpoint_id": self.checkpoint_id,
                "restore_generation": self.restore_generation,
                "moved_at": to_iso(self.moved_at),
                "cause": self.cause.value,
            },
        )

    @classmethod
    def decode(cls, key: str, data: bytes) -> HeadPointer:
        _, body = records.decode(key, data, cls.KIND, (cls.VERSION,))
        cid = body.get("checkpoint_id")
        if cid is not None and not isinstance(cid, int):
            raise CorruptRecord(key, f"bad checkpoint_id {cid!r}")
        return cls(
            cid,
            records.field(key, body, "restore_generation", int),
            from_iso(key, body.get("moved_at")),
            HeadMoveCause(body.get("cause", "completed")),
        )


EMPTY_HEAD = HeadPointer(None, 0, 0.0, HeadMoveCause.COMPLETED)


class HeadStore:
    def __init__(self, store: ObjectStore, layout: PipelineLayout) -> None:
        self._store = store
        self._key = layout.head

    def get(self) -> HeadPointer:
        current = read_record(self._store, self._key, HeadPointer.decode)
        return current[0] if current else EMPTY_HEAD

    def advance(self, checkpoint_id: int, generation: int, now: float) -> bool:
        """Move forward to `checkpoint_id` if it is newer and of the current generation."""

        def move(current: HeadPointer | None) -> HeadPointer | None:
            head = current or EMPTY_HEAD
            if head.restore_generation != generation:
                return None
            if head.checkpoint_id is not None and head.checkpoint_id >= checkpoint_id:
                return None
            return HeadPointer(checkpoint_id, generation, now, HeadMoveCause.COMPLETED)

        result = update_record(self._store, self._key, HeadPointer.decode, HeadPointer.encode, move)
        return result is not None and result.checkpoint_id == checkpoint_id

    def restore_to(self, checkpoint_id: int, now: float) -> HeadPointer:
        """The one backward move: always starts a new restore generation."""

        def move(current: HeadPointer | None) -> HeadPointer:
            generation = (current or EMPTY_HEAD).restore_generation + 1
            return HeadPointer(checkpoint_id, generation, now, HeadMoveCause.RESTORE)

        result = update_record(self._store, self._key, HeadPointer.decode, HeadPointer.encode, move)
        assert result is not None
        return result
