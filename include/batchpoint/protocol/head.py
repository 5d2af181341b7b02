"""The pointer to the newest completed checkpoint: it moves only forward, within one
restore generation; only an explicit restore moves it elsewhere (and starts a new
generation, so finalizers of the abandoned timeline can never move it again).

The pointer lives in the pipeline's control record (protocol/control.py), together with
the retained set, so both change in one conditional write; `HeadStore`
(protocol/control_store.py) is a view of it. `HeadPointer` also reads the old
"head-pointer" v1 record, which the control record migrates from (protocol/migration.py).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from batchpoint.errors import CorruptRecord
from batchpoint.protocol import records
from batchpoint.protocol.records import from_iso, to_iso

if TYPE_CHECKING:
    # The record the pointer is read from: control.py may name the causes without a circle.
    from batchpoint.protocol.control import ControlRecord


class HeadMoveCause(enum.StrEnum):
    COMPLETED = "completed"
    RESTORE = "restore"


@dataclass(frozen=True)
class HeadPointer(records.VersionedRecord):
    KIND = "head-pointer"
    VERSION = 1

    checkpoint_id: int | None
    restore_generation: int
    moved_at: float
    cause: HeadMoveCause

    def to_body(self) -> dict[str, Any]:
        return {
            "checkpoint_id": self.checkpoint_id,
            "restore_generation": self.restore_generation,
            "moved_at": to_iso(self.moved_at),
            "cause": self.cause.value,
        }

    @classmethod
    def from_body(cls, key: str, body: dict[str, Any]) -> HeadPointer:
        cid = body.get("checkpoint_id")
        if cid is not None and not isinstance(cid, int):
            raise CorruptRecord(key, f"bad checkpoint_id {cid!r}")
        try:
            cause = HeadMoveCause(body.get("cause", "completed"))
        except ValueError:
            raise CorruptRecord(key, f"unknown head move cause {body.get('cause')!r}") from None
        return cls(
            cid,
            records.field(key, body, "restore_generation", int),
            from_iso(key, body.get("moved_at")),
            cause,
        )

    @classmethod
    def of(cls, control: ControlRecord) -> HeadPointer:
        try:
            cause = HeadMoveCause(control.cause)
        except ValueError:
            cause = HeadMoveCause.COMPLETED
        return cls(control.head, control.restore_generation, control.moved_at, cause)


EMPTY_HEAD = HeadPointer(None, 0, 0.0, HeadMoveCause.COMPLETED)
