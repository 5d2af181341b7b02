"""The records port: the read port (protocol/reads.py), and the create-once writes of a
checkpoint's own records (its pending record, its outcome, each task's ack or decline,
a restore generation's record and intent). Whoever decides writes through it (the
trigger, the ack accounting, the finalizer, the restorer); the store and the layout stay
inside it.

Every write is one storage call on the key the layout gives (plus, for a create that
lost, one read of the winner), so a collaborator's sequence of storage operations is
the one it would issue by hand.
"""

from __future__ import annotations

import contextlib

from batchpoint.errors import ObjectAlreadyExists
from batchpoint.protocol.checkpoint import (
    AckRecord,
    CheckpointOutcome,
    DeclineRecord,
    PendingCheckpoint,
)
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.reads import CheckpointReads
from batchpoint.protocol.restore_intents import RestoreIntent
from batchpoint.protocol.restores import RestoreRecord


class CheckpointRecords(CheckpointReads):
    """Reads, and the writes of one checkpoint's records, by what they write."""

    # -- the pending record: the active marker ------------------------------------------

    def create_pending(self, pending: PendingCheckpoint) -> None:
        """Write a trigger's pending record (create-once: an id is admitted once)."""
        self._store.create(self._layout.active(pending.checkpoint_id), pending.encode())

    def has_pending(self, checkpoint_id: int) -> bool:
        """Whether the pending record (the active marker) is still there, readable or not:
        while it is, the settling steps after an outcome are unfinished."""
        return self._store.exists(self._layout.active(checkpoint_id))

    def delete_pending(self, checkpoint_id: int) -> None:
        """Remove the active marker: the last settling step."""
        self._store.delete(self._layout.active(checkpoint_id))

    # -- the outcome --------------------------------------------------------------------

    def create_outcome(self, outcome: CheckpointOutcome) -> tuple[bool, CheckpointOutcome]:
        """Write the outcome once. Returns whether ours won, and the outcome that holds."""
        key = self._layout.outcome(outcome.checkpoint_id)
        try:
            self._store.create(key, outcome.encode())
            return True, outcome
        except ObjectAlreadyExists:
            return False, CheckpointOutcome.decode(key, self._store.get(key).data)

    # -- acks and declines --------------------------------------------------------------

    def create_ack(self, ack: AckRecord) -> tuple[bool, AckRecord]:
        """Write a task's ack once. Returns whether ours was written, and the ack that
        holds (an earlier one, of this attempt or another, when it was not)."""
        key = self._layout.ack(ack.checkpoint_id, ack.task)
        try:
            self._store.create(key, ack.encode())
            return True, ack
        except ObjectAlreadyExists:
            return False, AckRecord.decode(key, self._store.get(key).data)

    def has_ack(self, checkpoint_id: int, task: TaskId) -> bool:
        return self._store.exists(self._layout.ack(checkpoint_id, task))

    def create_decline(self, decline: DeclineRecord) -> None:
        """Write an attempt's decline once; one it wrote already stands."""
        key = self._layout.decline(decline.checkpoint_id, decline.task, decline.attempt)
        with contextlib.suppress(ObjectAlreadyExists):
            self._store.create(key, decline.encode())

    # -- restores -----------------------------------------------------------------------

    def put_restore(self, record: RestoreRecord) -> None:
        """Write (or write again: a roll-forward may run twice) a restore generation's
        record, which repair reads to prove where the head went."""
        self._store.put(self._layout.restore(record.restore_generation), record.encode())

    def put_restore_intent(self, intent: RestoreIntent, token: str) -> None:
        """Say a restore is about to move the head (protocol/restore_intents.py)."""
        key = self._layout.restore_intent(intent.restore_generation, token)
        self._store.put(key, intent.encode())

    def delete_restore_intent(self, generation: int, token: str) -> None:
        """Withdraw an intent whose compare-and-swap surely did not move the head."""
        self._store.delete(self._layout.restore_intent(generation, token))
