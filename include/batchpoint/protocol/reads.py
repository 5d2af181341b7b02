"""The read port of a pipeline's checkpoint records (the pending record, the outcome,
acks, declines, restore records and intents): every collaborator that decides reads
through it (the finalizer, GC, the restorer, publish, statistics, repair); no writes here
(the records port, protocol/checkpoint_records.py, adds them)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from batchpoint.errors import CheckpointNotFound, ObjectNotFound, RecordError
from batchpoint.protocol.checkpoint import (
    AckRecord,
    CheckpointOutcome,
    CheckpointStatus,
    DeclineRecord,
    PendingCheckpoint,
)
from batchpoint.protocol.control import ControlUnreadable
from batchpoint.protocol.control_store import ControlStore
from batchpoint.protocol.layout import PipelineLayout, TaskId, parse_checkpoint_dir_name
from batchpoint.protocol.restore_intents import RestoreInDoubt, RestoreIntent
from batchpoint.protocol.restores import RestoreRecord
from batchpoint.storage.base import ObjectStore


@dataclass(frozen=True)
class AckProgress:
    """What an ack sensor needs to know about one checkpoint."""

    checkpoint_id: int
    status: CheckpointStatus | None  # None: no such checkpoint
    acknowledged: tuple[TaskId, ...]
    missing: tuple[TaskId, ...]
    declines: tuple[DeclineRecord, ...]
    outcome: CheckpointOutcome | None
    #: The checkpoint's own deadline (its trigger record's), so a waiter that began
    #: without it (storage did not answer) can still end by it. Not a stored record.
    deadline: float | None = None

    @property
    def all_acknowledged(self) -> bool:
        return self.status is not None and not self.missing


class CheckpointReads:
    """The port: its store, layout and control store stay inside it (a reader asks for
    records, never for keys)."""

    def __init__(self, store: ObjectStore, layout: PipelineLayout, control: ControlStore) -> None:
        self._store = store
        self._layout = layout
        self._control = control

    @property
    def pipeline(self) -> str:
        return self._layout.pipeline

    @property
    def storage_uri(self) -> str:
        """The storage these records live in (what a savepoint says it was taken from)."""
        return self._store.uri

    # == reads ===========================================================================

    def pending_checkpoints(self) -> list[PendingCheckpoint]:
        # an unreadable one is left out: settle aborts its admitted entry at the deadline
        out = [p for _, p in self.pending_records() if isinstance(p, PendingCheckpoint)]
        return sorted(out, key=lambda p: p.checkpoint_id)

    def pending_records(
        self, skip: Callable[[int], bool] = lambda checkpoint_id: False
    ) -> Iterator[tuple[int, PendingCheckpoint | RecordError]]:
        """Each pending record in storage, in listing order, read as it is listed, or
        why it cannot be read; one settled while listing is left out, and so is every
        checkpoint `skip` names (not read at all)."""
        for info in self._store.list(self._layout.active_prefix):
            checkpoint_id = parse_checkpoint_dir_name(info.key.rsplit("/", 1)[-1])
            if checkpoint_id is None or skip(checkpoint_id):
                continue
            try:
                found: PendingCheckpoint | RecordError = PendingCheckpoint.decode(
                    info.key, self._store.get(info.key).data
                )
            except ObjectNotFound:
                continue  # settled while listing
            except RecordError as exc:
                found = exc
            yield checkpoint_id, found

    def get_pending(self, checkpoint_id: int) -> PendingCheckpoint | None:
        key = self._layout.active(checkpoint_id)
        try:
            return PendingCheckpoint.decode(key, self._store.get(key).data)
        except ObjectNotFound:
            return None

    def pending_or_admitted(
        self, checkpoint_id: int, triggered_at: float | None = None
    ) -> PendingCheckpoint | None:
        """The trigger record, or a placeholder for an admitted checkpoint whose record
        is missing or unreadable (its trigger died after the admission CAS, or refused
        it: then `triggered_at` is when)."""
        try:
            pending = self.get_pending(checkpoint_id)
        except RecordError:
            pending = None
        if pending is not None:
            return pending
        with contextlib.suppress(ControlUnreadable):
            entry = self._control.load().pending_entry(checkpoint_id)
            if entry is not None:
                return entry.placeholder(self.pipeline, triggered_at)
        return None

    def get_outcome(self, checkpoint_id: int) -> CheckpointOutcome | None:
        key = self._layout.outcome(checkpoint_id)
        try:
            return CheckpointOutcome.decode(key, self._store.get(key).data)
        except ObjectNotFound:
            return None

    def has_outcome(self, checkpoint_id: int) -> bool:
        """Whether the checkpoint's outcome record exists (readable or not)."""
        return self._store.exists(self._layout.outcome(checkpoint_id))

    def get_checkpoint(self, checkpoint_id: int) -> PendingCheckpoint:
        """The trigger record of a checkpoint, pending or settled."""
        outcome = self.get_outcome(checkpoint_id)
        if outcome is not None:
            return outcome.pending
        pending = self.get_pending(checkpoint_id)
        if pending is not None:
            return pending
        # Settled between the two reads: the outcome is written before the record goes.
        outcome = self.get_outcome(checkpoint_id)
        if outcome is None:
            raise CheckpointNotFound(
                f"pipeline '{self.pipeline}' has no checkpoint {checkpoint_id}"
            )
        return outcome.pending

    def status(self, checkpoint_id: int) -> CheckpointStatus | None:
        outcome = self.get_outcome(checkpoint_id)
        if outcome is not None:
            return outcome.status
        return CheckpointStatus.PENDING if self.get_pending(checkpoint_id) else None

    def acks(self, checkpoint_id: int) -> dict[TaskId, AckRecord]:
        keys = [info.key for info in self._store.list(self._layout.acks_prefix(checkpoint_id))]

        def read(key: str) -> AckRecord | None:
            try:
                return AckRecord.decode(key, self._store.get(key).data)
            except ObjectNotFound:
                return None

        # One GET per ack: in parallel, finalizing 1,000 tasks is not 1,000 round trips.
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(keys)))) as pool:
            found = [a for a in pool.map(read, keys) if a is not None]
        return {ack.task: ack for ack in found}

    def declines(self, checkpoint_id: int) -> list[DeclineRecord]:
        out = []
        for info in self._store.list(self._layout.declines_prefix(checkpoint_id)):
            try:
                out.append(DeclineRecord.decode(info.key, self._store.get(info.key).data))
            except ObjectNotFound:
                continue
        return out

    def progress(self, checkpoint_id: int) -> AckProgress:
        outcome = self.get_outcome(checkpoint_id)
        pending = outcome.pending if outcome else self.get_pending(checkpoint_id)
        if pending is None:
            # Settled between the two reads (as in get_checkpoint): the outcome is written
            # before the record goes, so a second look finds it; only then is it missing.
            outcome = self.get_outcome(checkpoint_id)
            if outcome is None:
                return AckProgress(checkpoint_id, None, (), (), (), None)
            pending = outcome.pending
        acked = self.acks(checkpoint_id)
        return AckProgress(
            checkpoint_id,
            outcome.status if outcome else CheckpointStatus.PENDING,
            tuple(t for t in pending.expected_tasks if t in acked),
            tuple(t for t in pending.expected_tasks if t not in acked),
            tuple(self.declines(checkpoint_id)),
            outcome,
            pending.deadline,
        )

    def checkpoint_ids(self) -> list[int]:
        """Every checkpoint with records in storage (pending, or settled and not pruned)."""
        ids = {p.checkpoint_id for p in self.pending_checkpoints()}
        return sorted(ids.union(self.folder_ids()))

    def folder_ids(self) -> list[int]:
        """The checkpoints with a folder in storage (an outcome, acks or files), in
        listing order."""
        out = []
        for prefix in self._store.list_dirs(self._layout.checkpoints_prefix):
            cid = parse_checkpoint_dir_name(prefix.rstrip("/").rsplit("/", 1)[-1])
            if cid is not None:
                out.append(cid)
        return out

    def restore_records(self) -> Iterator[tuple[int, RestoreRecord | RecordError]]:
        """Each restore generation's record, in listing order, read as it is listed, or
        why it cannot be read (the generation happened; its target is unknown)."""
        for info in self._store.list(self._layout.restores_prefix):
            match = re.search(r"gen-(\d+)\.json$", info.key)
            if match is None:
                continue
            try:
                found: RestoreRecord | RecordError = RestoreRecord.decode(
                    info.key, self._store.get(info.key).data
                )
            except ObjectNotFound:
                continue
            except RecordError as exc:
                found = exc
            yield int(match.group(1)), found

    def restore_intents(self) -> Iterator[tuple[RestoreInDoubt, RecordError | None]]:
        """Each restore intent (generation, target), or why it cannot be read (the
        generation is in its key; the target unknown)."""
        for info in self._store.list(self._layout.restore_intents_prefix):
            match = re.search(r"gen-(\d+)-[^/]+\.json$", info.key)
            if match is None:
                continue
            try:
                intent = RestoreIntent.decode(info.key, self._store.get(info.key).data)
            except ObjectNotFound:
                continue  # settled and deleted as it was listed
            except RecordError as exc:
                yield RestoreInDoubt(int(match.group(1)), None), exc
                continue
            yield RestoreInDoubt(intent.restore_generation, intent.checkpoint_id), None
