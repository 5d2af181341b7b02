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

This module holds the record; `ControlStore` (protocol/control_store.py) reads and
compare-and-swaps it, and reads the old layout (a "head-pointer" v1 record plus one
`retained/` marker per checkpoint) as the record it migrates to (protocol/migration.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from batchpoint.errors import (
    CheckpointError,
    CorruptRecord,
    RecordError,
)
from batchpoint.protocol import records
from batchpoint.protocol.checkpoint import (
    CheckpointType,
    PendingCheckpoint,
)
from batchpoint.protocol.records import from_iso, to_iso
from batchpoint.protocol.timeline import on_timeline

#: How many collected ids the record remembers for history pruning.
COLLECTED_CAP = 1000
#: In `extra` of a record read from the old layout, until its first write.
MIGRATED_FROM = "migrated_from"
OLD_LAYOUT = "head-pointer/1"


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
            (p for p in self.pending if on_timeline(p.restore_generation, self.restore_generation)),
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
