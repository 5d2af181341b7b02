"""The pipeline's control record: every decision that concerns more than one checkpoint
goes through this one small compare-and-swap record, so concurrent actors (a scheduled
run, a savepoint run, a restore, `gc` from a terminal, a late retry) are linearised by
storage and no safety rule depends on timing.

pipelines/<p>/head.json, kind "pipeline-control":
  head                newest completed checkpoint of the current timeline (or null)
  restore_generation  bumped by every restore; a decision of an older one is stale
  retained            the CompletedCheckpointStore's members
  pending             admitted checkpoints (admission is the CAS that adds them)
  discarded           GC's work queue: ids whose files may go, with when they came in
  collected           ids whose data GC removed and whose records it may prune
  restore             the last restore; `sinks_rewound` false while it is in flight
  findings            damage a migration or repair met (`ControlFinding`); a held id is
                      kept out of every set, so never queued for GC, until it is judged

The old layout (a "head-pointer" v1 record plus one `retained/` marker per checkpoint)
is read once and migrated by the next write (protocol/migration.py).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from batchpoint.errors import (
    CheckpointError,
    CorruptRecord,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    RecordError,
)
from batchpoint.protocol import records
from batchpoint.protocol.checkpoint import (
    IMPORTED_FROM_PROPERTY,
    CheckpointOutcome,
    CheckpointType,
    PendingCheckpoint,
)
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.records import from_iso, to_iso
from batchpoint.storage.base import ObjectStore

#: How many collected ids the record remembers for history pruning.
COLLECTED_CAP = 1000
#: In `extra` of a record read from the old layout, until its first write.
MIGRATED_FROM = "migrated_from"
OLD_LAYOUT = "head-pointer/1"
_MAX_ROUNDS = 200


@dataclass(frozen=True)
class RetainedEntry:
    checkpoint_id: int
    type: CheckpointType
    completed_at: float
    retain_forever: bool = False
    # A restore in CLAIM mode took ownership of it: subsumed and collected like any
    # checkpoint once newer ones complete, even a savepoint (Flink's RestoreMode.CLAIM).
    claimed: bool = False

    @property
    def subsumable(self) -> bool:
        if self.claimed:
            return True
        return self.type is CheckpointType.CHECKPOINT and not self.retain_forever

    def to_json(self) -> dict[str, Any]:
        body = {
            "id": self.checkpoint_id,
            "type": self.type.value,
            "completed_at": to_iso(self.completed_at),
            "retain_forever": self.retain_forever,
        }
        if self.claimed:
            body["claimed"] = True
        return body

    @classmethod
    def from_json(cls, key: str, body: Mapping[str, Any]) -> RetainedEntry:
        return cls(
            records.field(key, body, "id", int),
            _type(key, body.get("type")),
            from_iso(key, body.get("completed_at")),
            bool(body.get("retain_forever", False)),
            bool(body.get("claimed", False)),
        )


@dataclass(frozen=True)
class PendingEntry:
    checkpoint_id: int
    type: CheckpointType
    base: int | None
    restore_generation: int
    deadline: float

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.checkpoint_id,
            "type": self.type.value,
            "base": self.base,
            "restore_generation": self.restore_generation,
            "deadline": to_iso(self.deadline),
        }

    @classmethod
    def from_json(cls, key: str, body: Mapping[str, Any]) -> PendingEntry:
        base = body.get("base")
        if base is not None and not isinstance(base, int):
            raise CorruptRecord(key, f"bad pending base {base!r}")
        return cls(
            records.field(key, body, "id", int),
            _type(key, body.get("type")),
            base,
            records.field(key, body, "restore_generation", int),
            from_iso(key, body.get("deadline")),
        )

    def placeholder(self, pipeline: str) -> PendingCheckpoint:
        """A trigger record for an admitted checkpoint whose own record is missing or
        unreadable (its trigger died after the admission): enough to write its outcome."""
        return PendingCheckpoint(
            pipeline=pipeline,
            checkpoint_id=self.checkpoint_id,
            type=self.type,
            base_checkpoint_id=self.base,
            restore_generation=self.restore_generation,
            barrier={},
            base_barrier={},
            expected_tasks=(),
            trigger_time=self.deadline,
            deadline=self.deadline,
        )


@dataclass(frozen=True)
class DiscardedEntry:
    checkpoint_id: int
    at: float

    def to_json(self) -> dict[str, Any]:
        return {"id": self.checkpoint_id, "at": to_iso(self.at)}

    @classmethod
    def from_json(cls, key: str, body: Mapping[str, Any]) -> DiscardedEntry:
        return cls(records.field(key, body, "id", int), from_iso(key, body.get("at")))


@dataclass(frozen=True)
class RestoreInFlight:
    generation: int
    target: int
    previous: int | None
    aborted: tuple[int, ...] = ()  # the pending checkpoints the restore abandoned
    sinks_rewound: bool = False
    at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "target": self.target,
            "previous": self.previous,
            "aborted": list(self.aborted),
            "sinks_rewound": self.sinks_rewound,
            "at": to_iso(self.at),
        }

    @classmethod
    def from_json(cls, key: str, body: Mapping[str, Any]) -> RestoreInFlight:
        return cls(
            records.field(key, body, "generation", int),
            records.field(key, body, "target", int),
            body.get("previous"),
            tuple(records.field(key, body, "aborted", list)),
            bool(body.get("sinks_rewound", False)),
            from_iso(key, body.get("at")),
        )


@dataclass(frozen=True)
class ControlFinding:
    """Damage a migration or a repair met about one checkpoint, kept in the record so
    every GC pass reports it (`ops.maintenance.gc`). `hold`: the records cannot say
    whether the checkpoint is retained (its marker and outcome are both unreadable, or
    contradict each other), so it is in no set and never queued for GC until a repair
    can judge it; without `hold` it is a note that goes when the id is queued."""

    checkpoint_id: int
    problem: str
    at: float
    hold: bool = False

    @property
    def message(self) -> str:
        kept = " (kept, never collected, until `batchpoint repair` can judge it)"
        return self.problem + (kept if self.hold else "")

    def __str__(self) -> str:
        return f"checkpoint {self.checkpoint_id}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.checkpoint_id,
            "problem": self.problem,
            "at": to_iso(self.at),
            "hold": self.hold,
        }

    @classmethod
    def from_json(cls, key: str, body: Mapping[str, Any]) -> ControlFinding:
        return cls(
            records.field(key, body, "id", int),
            records.field(key, body, "problem", str),
            from_iso(key, body.get("at")),
            bool(body.get("hold", False)),
        )


@dataclass(frozen=True)
class ControlRecord(records.VersionedRecord):
    KIND = "pipeline-control"
    VERSION = 1

    head: int | None = None
    restore_generation: int = 0
    retained: tuple[RetainedEntry, ...] = ()
    pending: tuple[PendingEntry, ...] = ()
    discarded: tuple[DiscardedEntry, ...] = ()
    collected: tuple[int, ...] = ()
    restore: RestoreInFlight | None = None
    moved_at: float = 0.0
    cause: str = "completed"
    findings: tuple[ControlFinding, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    # -- queries --------------------------------------------------------------------------

    def retained_ids(self) -> list[int]:
        return sorted(e.checkpoint_id for e in self.retained)

    def retained_entry(self, checkpoint_id: int) -> RetainedEntry | None:
        return next((e for e in self.retained if e.checkpoint_id == checkpoint_id), None)

    def pending_entry(self, checkpoint_id: int) -> PendingEntry | None:
        return next((e for e in self.pending if e.checkpoint_id == checkpoint_id), None)

    def is_discarded(self, checkpoint_id: int) -> bool:
        return any(e.checkpoint_id == checkpoint_id for e in self.discarded)

    def current_pending(self) -> list[PendingEntry]:
        """Admitted checkpoints of the current timeline, oldest first."""
        return sorted(
            (p for p in self.pending if p.restore_generation == self.restore_generation),
            key=lambda p: p.checkpoint_id,
        )

    def protected(self) -> set[int]:
        """What subsumption and disposal never drop: the head and every base a pending
        checkpoint reads from (a trigger's base is never garbage)."""
        out = {p.base for p in self.pending if p.base is not None}
        if self.head is not None:
            out.add(self.head)
        return out

    def held_ids(self) -> set[int]:
        """Checkpoints kept out of every set because their records cannot be judged."""
        return {f.checkpoint_id for f in self.findings if f.hold}

    def with_discarded(self, ids: list[int], now: float) -> ControlRecord:
        """Queue `ids` for GC, except what is retained, pending or held; the notes about
        a queued id go with it."""
        known = {e.checkpoint_id for e in self.discarded}
        keep = {e.checkpoint_id for e in self.retained} | {p.checkpoint_id for p in self.pending}
        keep |= self.held_ids()
        added = tuple(
            DiscardedEntry(cid, now) for cid in dict.fromkeys(ids) if cid not in known | keep
        )
        gone = {e.checkpoint_id for e in added}
        findings = tuple(f for f in self.findings if f.checkpoint_id not in gone)
        return replace(self, discarded=self.discarded + added, findings=findings)

    # -- format ---------------------------------------------------------------------------

    def to_body(self) -> dict[str, Any]:
        return {
            **self.extra,
            "head": self.head,
            "restore_generation": self.restore_generation,
            "retained": [e.to_json() for e in sorted(self.retained, key=_id)],
            "pending": [e.to_json() for e in sorted(self.pending, key=_id)],
            "discarded": [e.to_json() for e in self.discarded],
            "collected": list(self.collected[-COLLECTED_CAP:]),
            "restore": self.restore.to_json() if self.restore else None,
            "moved_at": to_iso(self.moved_at),
            "cause": self.cause,
            "findings": [f.to_json() for f in self.findings],
        }

    @classmethod
    def from_body(cls, key: str, body: dict[str, Any]) -> ControlRecord:
        body = dict(body)
        head = body.pop("head", None)
        if head is not None and not isinstance(head, int):
            raise CorruptRecord(key, f"bad head {head!r}")
        restore = body.pop("restore", None)

        def entries(name: str, parse: Callable[[str, Mapping[str, Any]], Any]) -> tuple:
            items = body.pop(name, [])
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise CorruptRecord(key, f"field '{name}' should be a list of objects")
            return tuple(parse(key, i) for i in items)

        collected = body.pop("collected", [])
        if not isinstance(collected, list) or not all(isinstance(i, int) for i in collected):
            raise CorruptRecord(key, "field 'collected' should be a list of ids")
        return cls(
            head=head,
            restore_generation=records.field(key, body, "restore_generation", int),
            retained=entries("retained", RetainedEntry.from_json),
            pending=entries("pending", PendingEntry.from_json),
            discarded=entries("discarded", DiscardedEntry.from_json),
            collected=tuple(collected),
            restore=RestoreInFlight.from_json(key, restore) if isinstance(restore, dict) else None,
            moved_at=from_iso(key, body.pop("moved_at", "1970-01-01T00:00:00Z")),
            cause=str(body.pop("cause", "completed")),
            findings=entries("findings", ControlFinding.from_json),
            extra={k: v for k, v in body.items() if k != "restore_generation"},
        )


EMPTY = ControlRecord()


def _id(entry: RetainedEntry | PendingEntry) -> int:
    return entry.checkpoint_id


def _type(key: str, value: Any) -> CheckpointType:
    try:
        return CheckpointType(value or "checkpoint")
    except ValueError:
        raise CorruptRecord(key, f"unknown checkpoint type {value!r}") from None


class ControlUnreadable(CheckpointError):
    """The control record exists but cannot be read: nothing may decide until it is
    repaired. The message names the key and the repair command."""

    def __init__(self, key: str, cause: RecordError) -> None:
        self.key = key
        self.cause = cause
        problem = cause.summary if isinstance(cause, CorruptRecord) else str(cause)
        super().__init__(
            f"the pipeline's control record {key} is unreadable ({problem}); "
            "run `batchpoint repair` to rebuild it from the checkpoint records"
        )


@dataclass(frozen=True)
class ControlSnapshot:
    """What is stored at the control record's key, damaged or not, with the etag that a
    compare-and-swap on exactly this version needs (`ControlStore.swap`)."""

    record: ControlRecord | None  # None: missing, or unreadable (see `damage`)
    etag: str | None  # None: no object at the key
    damage: ControlUnreadable | None = None

    @property
    def state(self) -> str:
        """ "missing", "unreadable" or "readable"."""
        if self.etag is None:
            return "missing"
        return "unreadable" if self.damage is not None else "readable"


class ControlStore:
    """Reads and compare-and-swaps the control record."""

    def __init__(self, store: ObjectStore, layout: PipelineLayout, clock: Callable[[], float]):
        self._store = store
        self._layout = layout
        self._clock = clock
        self.key = layout.head

    def read(self) -> tuple[ControlRecord, str | None] | None:
        """The record and its etag, or None when there is none (an old layout is read
        as the record it migrates to). Raises ControlUnreadable."""
        found = self.snapshot()
        if found.damage is not None:
            raise found.damage
        if found.record is None:
            return None
        return found.record, found.etag

    def snapshot(self) -> ControlSnapshot:
        """The stored record as it is: missing, unreadable (with why) or readable."""
        try:
            obj = self._store.get(self.key)
        except ObjectNotFound:
            return ControlSnapshot(None, None)
        try:
            if _kind_of(obj.data) == "head-pointer":
                from batchpoint.protocol.migration import migrate  # the old layout's reader

                return ControlSnapshot(
                    migrate(self._store, self._layout, obj.data, self._clock()), obj.etag
                )
            return ControlSnapshot(ControlRecord.decode(self.key, obj.data), obj.etag)
        except RecordError as exc:
            return ControlSnapshot(None, obj.etag, ControlUnreadable(self.key, exc))

    def load(self) -> ControlRecord:
        found = self.read()
        return found[0] if found else EMPTY

    def exists(self) -> bool:
        return self._store.exists(self.key)

    def update(
        self, mutate: Callable[[ControlRecord | None], ControlRecord | None]
    ) -> tuple[ControlRecord | None, bool]:
        """Apply `mutate` (called with None when there is no record) until the write wins.
        Returns (the record in force, whether ours was written). `mutate` may run
        several times and may raise to refuse; it must have no other side effects."""
        for attempt in range(_MAX_ROUNDS):
            found = self.read()
            current, etag = found if found else (None, None)
            new = mutate(current)
            if new is None:
                return current, False
            if self._write(new, current, etag):
                return new, True
            time.sleep(random.uniform(0, min(0.05, 0.001 * (attempt + 1))))
        raise CheckpointError(f"gave up updating '{self.key}' after {_MAX_ROUNDS} attempts")

    def swap(self, new: ControlRecord, read: ControlSnapshot) -> bool:
        """Write `new` only over exactly what `read` saw (If-Match its etag, or create
        when there was nothing): one attempt, False when anything wrote in between."""
        return self._write(new, read.record, read.etag)

    def _write(self, new: ControlRecord, current: ControlRecord | None, etag: str | None) -> bool:
        if MIGRATED_FROM in new.extra:
            new = replace(new, extra={k: v for k, v in new.extra.items() if k != MIGRATED_FROM})
        try:
            if etag is None:
                self._store.create(self.key, new.encode())
            else:
                self._store.replace(self.key, new.encode(), etag)
        except (PreconditionFailed, ObjectAlreadyExists):
            return False
        if current is not None and current.extra.get(MIGRATED_FROM) == OLD_LAYOUT:
            from batchpoint.protocol.migration import drop_old_markers

            drop_old_markers(self._store, self._layout)
        return True


def _kind_of(data: bytes) -> Any:
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return document.get("kind") if isinstance(document, dict) else None


def settle_outcome(
    record: ControlRecord | None,
    outcome: CheckpointOutcome,
    num_retained: int,
    now: float,
) -> ControlRecord | None:
    """The one CAS after an outcome: leave `pending`; COMPLETED joins `retained` (and
    moves the head forward within its generation), subsuming the oldest beyond
    `num_retained` but never the head nor a pending base; ABORTED joins `discarded`.
    An id that is not pending any more (a restore abandoned it, or this ran already)
    changes nothing: a discarded id never comes back."""
    if record is None:
        return None
    entry = record.pending_entry(outcome.checkpoint_id)
    if entry is None:
        return None
    pending = tuple(p for p in record.pending if p.checkpoint_id != entry.checkpoint_id)
    new = replace(record, pending=pending)
    if outcome.completed is None:
        return new.with_discarded([entry.checkpoint_id], now)
    p = outcome.pending
    added = RetainedEntry(
        p.checkpoint_id,
        p.type,
        outcome.completed.completed_at,
        bool(p.properties.get("retain_forever", False)),
    )
    new = replace(new, retained=(*new.retained, added))
    # An imported savepoint is retained but never becomes the head by completing: its
    # state does not continue the timeline, only an explicit restore moves the head to it.
    imported = IMPORTED_FROM_PROPERTY in p.properties
    if (
        not imported
        and entry.restore_generation == new.restore_generation
        and (new.head is None or p.checkpoint_id > new.head)
    ):
        new = replace(new, head=p.checkpoint_id, moved_at=now, cause="completed")
    subsumable = sorted(e.checkpoint_id for e in new.retained if e.subsumable)
    excess = subsumable[: max(0, len(subsumable) - num_retained)]
    protected = new.protected()
    dropped = [cid for cid in excess if cid not in protected]
    if dropped:
        kept = tuple(e for e in new.retained if e.checkpoint_id not in dropped)
        new = replace(new, retained=kept)
        new = new.with_discarded(dropped, now)
    return new
