"""Flink's CompletedCheckpointStore: which completed checkpoints are retained.

Membership lives in the pipeline's control record (protocol/control.py), next to the
head, so retaining, subsuming and restoring change it in the same conditional write; the
checkpoint's metadata stays in its write-once outcome record. Subsumption moves the
oldest checkpoints beyond `num_retained` into the discarded queue, after which GC may
delete their files. Savepoints and checkpoints marked `retain_forever` are never
subsumed; a savepoint leaves only by explicit disposal. The rule that retains, subsumes
and moves the head after an outcome is `settle_outcome`, the mutation of one CAS.
"""

from __future__ import annotations

import time
from dataclasses import replace

from batchpoint.errors import CheckpointNotFound, ObjectNotFound
from batchpoint.protocol import stopping
from batchpoint.protocol.checkpoint import (
    CheckpointOutcome,
    CheckpointStatus,
    CompletedCheckpoint,
)
from batchpoint.protocol.control import ControlRecord, RetainedEntry
from batchpoint.protocol.control_store import ControlStore
from batchpoint.protocol.head import HeadMoveCause
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.ports import ProgressFn
from batchpoint.protocol.timeline import on_timeline
from batchpoint.protocol.verify import FileProblem, check_handles
from batchpoint.storage.base import ObjectStore


class CompletedCheckpointStore:
    """A view of the retained set in the control record."""

    def __init__(
        self, store: ObjectStore, layout: PipelineLayout, control: ControlStore | None = None
    ) -> None:
        self._store = store
        self._layout = layout
        self._control = control or ControlStore(store, layout, time.time)

    def markers(self) -> list[RetainedEntry]:
        return sorted(self._control.load().retained, key=lambda e: e.checkpoint_id)

    def retained_ids(self) -> list[int]:
        return self._control.load().retained_ids()

    def is_retained(self, checkpoint_id: int) -> bool:
        return self._control.load().retained_entry(checkpoint_id) is not None

    def check_files(
        self,
        completed: CompletedCheckpoint,
        *,
        checksums: bool,
        progress: ProgressFn | None = None,
    ) -> list[FileProblem]:
        """Every durable file of the completed checkpoint exists with its size (and its
        checksum when asked)."""
        return check_handles(
            self._store, completed.durable_handles, checksums=checksums, progress=progress
        )

    def get(self, checkpoint_id: int) -> CompletedCheckpoint:
        """The metadata of a completed checkpoint (retained or not); raises
        CorruptRecord/UnsupportedRecordVersion when its outcome is unreadable."""
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

    def release(self, checkpoint_id: int, now: float | None = None) -> bool:
        """Move one retained checkpoint into GC's queue (explicit disposal); never the
        head nor a pending checkpoint's base. Returns whether it was retained."""
        stamp = time.time() if now is None else now

        def drop(current: ControlRecord | None) -> ControlRecord | None:
            if current is None or current.retained_entry(checkpoint_id) is None:
                return None
            if checkpoint_id in current.protected():
                raise CheckpointNotFound(
                    f"checkpoint {checkpoint_id} is the head or the base of a pending "
                    "checkpoint and cannot be released"
                )
            kept = tuple(e for e in current.retained if e.checkpoint_id != checkpoint_id)
            return replace(current, retained=kept).with_discarded([checkpoint_id], stamp)

        _, written = self._control.update(drop)
        return written


def settle_outcome(
    record: ControlRecord | None,
    outcome: CheckpointOutcome,
    num_retained: int,
    now: float,
) -> ControlRecord | None:
    """The one CAS after an outcome: leave `pending`; COMPLETED joins `retained` (and
    moves the head forward within its generation), subsuming the oldest beyond
    `num_retained` but never the head nor a pending base; ABORTED joins `discarded`; a
    stop-with-savepoint sets or ends the stop (protocol/stopping.py).
    An id that is not pending any more (a restore abandoned it, or this ran already)
    changes nothing: a discarded id never comes back (but see `_queue_unknown_abort`)."""
    if record is None:
        return None
    entry = record.pending_entry(outcome.checkpoint_id)
    if entry is None:
        return _queue_unknown_abort(record, outcome, now)
    pending = tuple(p for p in record.pending if p.checkpoint_id != entry.checkpoint_id)
    new = replace(record, pending=pending)
    completed_at = None if outcome.completed is None else outcome.completed.completed_at
    # A stop-with-savepoint stops (or, aborted, stops stopping) in this same CAS.
    new = stopping.settle_stop(new, entry.checkpoint_id, completed_at)
    if outcome.completed is None:
        return new.with_discarded([entry.checkpoint_id], now)
    p = outcome.pending
    added = RetainedEntry(
        p.checkpoint_id,
        p.type,
        outcome.completed.completed_at,
        bool(p.properties.retain_forever),
    )
    new = replace(new, retained=(*new.retained, added))
    # An imported savepoint is retained but never becomes the head by completing: its
    # state does not continue the timeline, only an explicit restore moves the head to it.
    imported = p.properties.is_imported
    if (
        not imported
        and on_timeline(entry.restore_generation, new.restore_generation)
        and (new.head is None or p.checkpoint_id > new.head)
    ):
        new = replace(new, head=p.checkpoint_id, moved_at=now, cause=HeadMoveCause.COMPLETED)
    subsumable = sorted(e.checkpoint_id for e in new.retained if e.subsumable)
    excess = subsumable[: max(0, len(subsumable) - num_retained)]
    protected = new.protected()
    dropped = [cid for cid in excess if cid not in protected]
    if dropped:
        kept = tuple(e for e in new.retained if e.checkpoint_id not in dropped)
        new = replace(new, retained=kept)
        new = new.with_discarded(dropped, now)
    return new


def _queue_unknown_abort(
    record: ControlRecord, outcome: CheckpointOutcome, now: float
) -> ControlRecord | None:
    """An ABORTED id that no set of the record holds is queued: it was admitted under a
    control record a repair rebuilt before its trigger wrote the pending record, so the
    repair could not know it, and nothing else would ever collect its folder."""
    cid = outcome.checkpoint_id
    known = {e.checkpoint_id for e in record.retained} | set(record.collected)
    if outcome.completed is not None or cid in known:
        return None
    queued = record.with_discarded([cid], now)  # no change if queued or held
    return queued if queued != record else None
