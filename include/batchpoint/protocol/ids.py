"""Flink's CheckpointIDCounter, kept in storage: ids only grow and are never reused,
whatever aborts, restores or racing triggers happen."""

from __future__ import annotations

from dataclasses import dataclass

from batchpoint import codec
from batchpoint.protocol.cas import read_record, update_record
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.storage.base import ObjectStore


@dataclass(frozen=True)
class NextCheckpointId(codec.Record):
    KIND = "checkpoint-id-counter"
    VERSION = 1
    next_id: int


class CheckpointIDCounter:
    def __init__(self, store: ObjectStore, layout: PipelineLayout) -> None:
        self._store = store
        self._key = layout.id_counter

    def get_and_increment(self) -> int:
        allocated: list[int] = []

        def bump(current: NextCheckpointId | None) -> NextCheckpointId:
            value = current.next_id if current else 1
            allocated[:] = [value]
            return NextCheckpointId(value + 1)

        update_record(
            self._store, self._key, NextCheckpointId.decode, NextCheckpointId.encode, bump
        )
        return allocated[0]

    def peek(self) -> int:
        """The id the next allocation will return."""
        current = read_record(self._store, self._key, NextCheckpointId.decode)
        return current[0].next_id if current else 1
