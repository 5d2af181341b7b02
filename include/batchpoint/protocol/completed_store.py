"""Flink's CompletedCheckpointStore: which completed checkpoints are retained.

Membership is one small marker per checkpoint under `retained/`; the checkpoint's
metadata stays in its write-once outcome record. Subsumption removes markers of the
oldest checkpoints beyond `num_retained`, after which GC may delete their files.
Savepoints and checkpoints marked `retain_forever` are never subsumed.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from batchpoint.errors import CheckpointNotFound, ObjectAlreadyExists, ObjectNotFound
from batchpoint.protocol import records
from batchpoint.protocol.checkpoint import (
    CheckpointOutcome,
    CheckpointStatus,
    CheckpointType,
    CompletedCheckpoint,
)
from batchpoint.protocol.layout import PipelineLayout, parse_checkpoint_dir_name
from batchpoint.protocol.records import from_iso, to_iso
from batchpoint.storage.base import ObjectStore


@dataclass(frozen=True)
class RetainedMarker:
    KIND = "retained-checkpoint"
    VERSION = 1

    checkpoint_id: int
    type: CheckpointType
    completed_at: float
    retain_forever: bool

    @property
    def subsumable(self) -> bool:
        return self.type is CheckpointType.CHECKPOINT and not self.retain_forever

    def encode(self) -> bytes:
        return records.encode(
            self.KIND,
            self.VERSION,
            {
                "checkpoint_id": self.checkpoint_id,
                "type": self.type.value,
                "completed_at": to_iso(self.completed_at),
                "retain_forever": self.retain_forever,
            },
        )

    @classmethod
    def decode(cls, key: str, data: bytes) -> RetainedMarker:
        _, body = records.decode(key, data, cls.KIND, (cls.VERSION,))
        return cls(
            records.field(key, body, "checkpoint_id", int),
            CheckpointType(body.get("type", "checkpoint")),
            from_iso(key, body.get("completed_at")),
            bool(body.get("retain_forever", False)),
        )


class CompletedCheckpointStore:
    def __init__(self, store: ObjectStore, layout: PipelineLayout) -> None:
        self._store = store
        self._layout = layout

    def add(self, completed: CompletedCheckpoint) -> None:
        pending = completed.pending
        marker = RetainedMarker(
            completed.checkpoint_id,
            pending.type,
            completed.completed_at,
            bool(pending.properties.get("retain_forever", False)),
        )
        # A repeated finalize finds the same marker already there.
        with contextlib.suppress(ObjectAlreadyExists):
            self._store.create(self._layout.retained(completed.checkpoint_id), marker.encode())

    def markers(self) -> list[RetainedMarker]:
        out = []
        for info in self._store.list(self._layout.retained_prefix):
            if parse_checkpoint_dir_name(info.key.rsplit("/", 1)[-1]) is None:
                continue
            try:
                data = self._store.get(info.key).data
            except ObjectNotFound:
                continue  # subsumed while listing
            out.append(RetainedMarker.decode(info.key, data))
        return sorted(out, key=lambda m: m.checkpoint_id)

    def retained_ids(self) -> list[int]:
        return [m.checkpoint_id for m in self.markers()]

    def is_retained(self, checkpoint_id: int) -> bool:
        return self._store.exists(self._layout.retained(checkpoint_id))

    def get(self, checkpoint_id: int) -> CompletedCheckpoint:
        key = self._layout.outcome(checkpoint_id)
        try:
            outcome = CheckpointOutcome.decode(key, self._store.get(key).data)
        except ObjectNotFound:
            raise CheckpointNotFound(
                f"checkpoint {checkpoint_id} of pipeline '{self._layout.pipeline}' has no outcome"
            ) from None
        if outcome.status is not CheckpointStatus.COMPLETED or outcome.completed is None:
            raise CheckpointNotFound(
                f"checkpoint {checkpoint_id} of pipeline '{self._layout.pipeline}' did not "
                f"complete ({outcome.status.value}: {outcome.message or '-'})"
            )
        return outcome.completed

    def latest(self) -> CompletedCheckpoint | None:
        ids = self.retained_ids()
        return self.get(ids[-1]) if ids else None

    def subsume(self, num_retained: int, protected: set[int]) -> list[int]:
        """Drop the oldest subsumable checkpoints beyond `num_retained`; never one in
        `protected` (the head, and anything a caller is restoring)."""
        subsumable = [m.checkpoint_id for m in self.markers() if m.subsumable]
        excess = subsumable[: max(0, len(subsumable) - num_retained)]
        dropped = [cid for cid in excess if cid not in protected]
        for cid in dropped:
            self._store.delete(self._layout.retained(cid))
        return dropped

    def release(self, checkpoint_id: int) -> None:
        """Remove one checkpoint or savepoint from the store (explicit disposal)."""
        self._store.delete(self._layout.retained(checkpoint_id))
