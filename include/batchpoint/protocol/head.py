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
from typing import Protocol

from batchpoint import codec


class HeadMoveCause(enum.StrEnum):
    """Why the head last moved (the control record's `cause`)."""

    COMPLETED = "completed"
    RESTORE = "restore"


class HeadFields(Protocol):
    """What the head is read from (the control record; named by its shape, so that
    control.py, which stores the causes, and this module do not import each other)."""

    head: int | None
    restore_generation: int
    moved_at: float
    cause: HeadMoveCause


@dataclass(frozen=True)
class HeadPointer(codec.Record):
    """The head as callers see it; stored only by the old layout (a "head-pointer" v1
    record at the control record's key), which the control record migrates from."""

    KIND = "head-pointer"
    VERSION = 1

    checkpoint_id: int | None = codec.field(missing=None)
    restore_generation: int = codec.field()
    moved_at: float = codec.time()
    cause: HeadMoveCause = codec.field(missing=HeadMoveCause.COMPLETED)

    @classmethod
    def of(cls, control: HeadFields) -> HeadPointer:
        return cls(control.head, control.restore_generation, control.moved_at, control.cause)


EMPTY_HEAD = HeadPointer(None, 0, 0.0, HeadMoveCause.COMPLETED)
