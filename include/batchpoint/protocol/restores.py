"""The restore record: `restores/gen-G.json`, one per explicit restore, written once the
restore's sinks are rewound (protocol/restorer.py) and read by `repair` to prove which
head the restore history leads to (protocol/repair.py)."""

from __future__ import annotations

from dataclasses import dataclass

from batchpoint import codec
from batchpoint.protocol.control import RestoreInFlight


@dataclass(frozen=True)
class RestoreRecord(codec.Record):
    KIND = "restore"
    VERSION = 1

    checkpoint_id: int  # the restore's target
    restore_generation: int  # the generation the restore started
    previous_head: int | None = codec.field(missing=None)
    restored_at: float = codec.time()
    # The gate that passed the target, what the restore passed over and quarantined on
    # the way (RestoreInFlight's); each written only when set.
    gate: str | None = codec.field(default=None, omit=None)
    passed_over: tuple[int, ...] = codec.field(default=(), omit=())
    quarantined: tuple[int, ...] = codec.field(default=(), omit=())

    @classmethod
    def of(cls, r: RestoreInFlight) -> RestoreRecord:
        return cls(r.target, r.generation, r.previous, r.at, r.gate, r.passed_over, r.quarantined)
