"""The pipeline's control record: every decision that concerns more than one checkpoint
goes through this one small compare-and-swap record, so concurrent actors (a scheduled
run, a savepoint run, a restore, `gc` from a terminal, a late retry) are linearised by
storage and no safety rule depends on timing.

pipelines/<p>/head.json, kind "pipeline-control":
  head                newest completed checkpoint of the current timeline (or null)
  restore_generation  bumped by every restore; a decision of an older one is stale
  retained            the CompletedCheckpointStore's members
  pending             admitted checkpoints (admission is the CAS that adds them); an
                      import's entry is marked `imported`: it is never a base
  discarded           GC's work queue: ids whose files may go, with when they came in
  collected           ids whose data GC removed and whose records it may prune
  restore             the last restore; `sinks_rewound` false while it is in flight
  findings            damage a migration or repair met (`ControlFinding`); a held id is
                      kept out of every set, so never queued for GC, until it is judged
  stopping            a stop-with-savepoint in flight: the savepoint and the periodic
                      checkpoints its admission abandoned (version 2)
  stopped             the savepoint that stopped the pipeline, and when; triggers refuse
                      until `batchpoint resume` or a restore clears it (version 2)

This module holds the record; `ControlStore` (protocol/control_store.py) reads and
compare-and-swaps it, and reads the old layout (a "head-pointer" v1 record plus one
`retained/` marker per checkpoint) as the record it migrates to (protocol/migration.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from batchpoint import codec
from batchpoint.errors import CheckpointError, CorruptRecord, RecordError, UnsupportedRecordVersion
from batchpoint.protocol.checkpoint import CheckpointType, PendingCheckpoint
from batchpoint.protocol.head import HeadMoveCause
from batchpoint.protocol.timeline import on_timeline

#: How many collected ids the record remembers for history pruning.
COLLECTED_CAP = 1000
#: In `extra` of a record read from the old layout, until its first write.
MIGRATED_FROM = "migrated_from"
OLD_LAYOUT = "head-pointer/1"


@dataclass(frozen=True)
class RetainedEntry(codec.Value):
    checkpoint_id: int = codec.field(key="id")
    type: CheckpointType = codec.field(missing=CheckpointType.CHECKPOINT)  # none: a checkpoint
    completed_at: float = codec.time()
    retain_forever: bool = False
    # A restore in CLAIM mode took ownership of it: subsumed and collected like any
    # checkpoint once newer ones complete, even a savepoint (Flink's RestoreMode.CLAIM).
    claimed: bool = codec.field(default=False, omit=False)

    @property
    def subsumable(self) -> bool:
        if self.claimed:
            return True
        return self.type is CheckpointType.CHECKPOINT and not self.retain_forever


@dataclass(frozen=True)
class PendingEntry(codec.Value):
    checkpoint_id: int = codec.field(key="id")
    type: CheckpointType = codec.field(missing=CheckpointType.CHECKPOINT)  # none: a checkpoint
    base: int | None = codec.field(missing=None)
    restore_generation: int = codec.field()
    deadline: float = codec.time()
    # A savepoint folder being imported: its state does not continue the timeline, so
    # no trigger builds on it (`decider.base_of`). Written only when set; an import an
    # older release admitted reads as False, and the finalize of a checkpoint built on
    # it still refuses it (`settlement.unrestored_import`).
    imported: bool = codec.field(default=False, omit=False)
    # The scheduler run that triggered it: a retry of that run finds its own admission
    # when its first try died before the pending record (`ops.runs.trigger_for_run`).
    # Written only when set; an older release's entry names no run.
    run_id: str | None = codec.field(default=None, omit=None)

    @classmethod
    def of(cls, pending: PendingCheckpoint) -> PendingEntry:
        """The entry of an admitted checkpoint, rebuilt from its pending record."""
        return cls(
            pending.checkpoint_id,
            pending.type,
            pending.base_checkpoint_id,
            pending.restore_generation,
            pending.deadline,
            imported=pending.properties.is_imported,
            run_id=pending.properties.scheduler_run_id,
        )

    def placeholder(self, pipeline: str, triggered_at: float | None = None) -> PendingCheckpoint:
        """A trigger record for an admitted checkpoint whose own record is missing or
        unreadable (its trigger died after the admission, or aborted it before writing
        one): enough to write its outcome. Its trigger time is `triggered_at` when the
        trigger itself aborts; otherwise no record holds it, and the deadline stands in
        for it (`known_trigger_time` reads that as unknown)."""
        return PendingCheckpoint(
            pipeline=pipeline,
            checkpoint_id=self.checkpoint_id,
            type=self.type,
            base_checkpoint_id=self.base,
            restore_generation=self.restore_generation,
            barrier={},
            base_barrier={},
            expected_tasks=(),
            trigger_time=self.deadline if triggered_at is None else triggered_at,
            deadline=self.deadline,
        )


def known_trigger_time(pending: PendingCheckpoint) -> float | None:
    """When the checkpoint was triggered; None for a placeholder that never knew (its
    trigger time is its deadline, which a real trigger never has: a timeout is > 0)."""
    return None if pending.trigger_time >= pending.deadline else pending.trigger_time


@dataclass(frozen=True)
class DiscardedEntry(codec.Value):
    checkpoint_id: int = codec.field(key="id")
    at: float = codec.time()


@dataclass(frozen=True)
class RestoreInFlight(codec.Value):
    generation: int
    target: int
    previous: int | None = codec.field(missing=None)
    aborted: tuple[int, ...] = codec.field(default=(), required=True)  # the abandoned pending
    sinks_rewound: bool = False
    at: float = codec.time(default=0.0, required=True)
    # The restore allowed state of its target that the code leaves unrestored (issue
    # 26): the first trigger on the target honours it. Written only when set.
    allow_non_restored_state: bool = codec.field(default=False, omit=False)
    # The gate that passed the target before the head moved (its name, "quality gate"),
    # None when none judged it: the UI shows whether a restore was gated. Written only
    # when set, so an ungated restore's record is what it was before the field.
    gate: str | None = codec.field(default=None, omit=None)
    # What the restore's check passed over on its way to the target (newest first) and
    # which of those it quarantined (failed by the gate, or found damaged): the record
    # says what the gate did, not only that it ran. Written only when there are some.
    passed_over: tuple[int, ...] = codec.field(default=(), omit=())
    quarantined: tuple[int, ...] = codec.field(default=(), omit=())


@dataclass(frozen=True)
class TargetChoice:
    """How a restore's target was chosen, recorded with the restore (RestoreInFlight,
    the restore record): the gate that passed it (None: ungated), the candidates passed
    over on the way, newest first, and which of those the choosing quarantined."""

    gate: str | None = None
    passed_over: tuple[int, ...] = ()
    quarantined: tuple[int, ...] = ()


@dataclass(frozen=True)
class ControlFinding(codec.Value):
    """Damage a migration or a repair met about one checkpoint, kept in the record so
    every GC pass reports it (`ops.maintenance.gc`). `hold`: the records cannot say
    whether the checkpoint is retained (its marker and outcome are both unreadable, or
    contradict each other), so it is in no set and never queued for GC until a repair
    can judge it; without `hold` it is a note that goes when the id is queued."""

    checkpoint_id: int = codec.field(key="id")
    problem: str = codec.field()
    at: float = codec.time()
    hold: bool = False

    @property
    def message(self) -> str:
        kept = " (kept, never collected, until `batchpoint repair` can judge it)"
        return self.problem + (kept if self.hold else "")

    def __str__(self) -> str:
        return f"checkpoint {self.checkpoint_id}: {self.message}"


@dataclass(frozen=True)
class StopInFlight(codec.Value):
    """A stop-with-savepoint admitted and not settled: triggers refuse meanwhile, and the
    savepoint's finalize gives each abandoned checkpoint an outcome before its own."""

    savepoint: int
    at: float = codec.time()
    abandoned: tuple[int, ...] = codec.field(default=(), required=True)


@dataclass(frozen=True)
class CascadeFence(codec.Value):
    """A cascade restore (protocol/cascade.py) holds the pipeline: triggers refuse
    (reason CASCADE) until the cascade that set it ends and lifts it."""

    cascade: str  # the cascade's id
    root: str  # the pipeline whose restore the cascade follows
    at: float = codec.time(default=0.0)


@dataclass(frozen=True)
class Stopped(codec.Value):
    """The pipeline stopped with `savepoint` (completed at `at`): no trigger until a
    resume or a restore."""

    savepoint: int
    at: float = codec.time()


def _by_id(entries: tuple[RetainedEntry | PendingEntry, ...]) -> list:
    return sorted(entries, key=lambda e: e.checkpoint_id)


def _newest_collected(ids: tuple[int, ...]) -> tuple[int, ...]:
    return ids[-COLLECTED_CAP:]


@dataclass(frozen=True)
class ControlV1(codec.Value):
    """Version 1, before stop-with-savepoint stopped: it has no `stopping`/`stopped`, so
    it reads as a pipeline that is not stopped. Version 2 exists so that a release that
    does not know `stopped` refuses the record ("upgrade batchpoint") instead of
    triggering past a stop."""

    head: int | None = None
    restore_generation: int = codec.field(default=0, required=True)
    retained: tuple[RetainedEntry, ...] = codec.field(default=(), prepare=_by_id)
    pending: tuple[PendingEntry, ...] = codec.field(default=(), prepare=_by_id)
    discarded: tuple[DiscardedEntry, ...] = ()
    collected: tuple[int, ...] = codec.field(default=(), prepare=_newest_collected)
    restore: RestoreInFlight | None = None
    moved_at: float = codec.time(default=0.0)
    cause: HeadMoveCause = HeadMoveCause.COMPLETED
    findings: tuple[ControlFinding, ...] = ()
    extra: Mapping[str, Any] = codec.field(extra=True, default_factory=dict, compare=False)


def _control_from_v1(old: ControlV1) -> ControlRecord:
    fields = {f.name: getattr(old, f.name) for f in dataclasses.fields(ControlV1)}
    return ControlRecord(**fields)


@dataclass(frozen=True)
class ControlRecord(codec.Record):
    KIND = "pipeline-control"
    VERSION = 2
    READS = {1: codec.Upgrade(ControlV1, _control_from_v1)}

    head: int | None = None
    restore_generation: int = codec.field(default=0, required=True)
    retained: tuple[RetainedEntry, ...] = codec.field(default=(), prepare=_by_id)
    pending: tuple[PendingEntry, ...] = codec.field(default=(), prepare=_by_id)
    discarded: tuple[DiscardedEntry, ...] = ()
    collected: tuple[int, ...] = codec.field(default=(), prepare=_newest_collected)
    restore: RestoreInFlight | None = None
    moved_at: float = codec.time(default=0.0)
    cause: HeadMoveCause = HeadMoveCause.COMPLETED
    findings: tuple[ControlFinding, ...] = ()
    stopping: StopInFlight | None = codec.field(default=None, omit=None)
    stopped: Stopped | None = codec.field(default=None, omit=None)
    cascade: CascadeFence | None = codec.field(default=None, omit=None)
    # Bumped after every quarantine mark (protocol/quarantine.py), so that a restore or
    # repair that read this record before the mark loses its compare-and-swap, and
    # reads the mark when it reads again.
    quarantine_marks: int = codec.field(default=0, omit=0)
    # What a newer writer added, kept through our writes.
    extra: Mapping[str, Any] = codec.field(extra=True, default_factory=dict, compare=False)

    # -- queries --------------------------------------------------------------------------

    def retained_ids(self) -> list[int]:
        return sorted(e.checkpoint_id for e in self.retained)

    def known_ids(self) -> set[int]:
        """Every checkpoint id this record names: none of them may be handed out again."""
        known = {*self.retained_ids(), *self.collected, *self.held_ids()}
        known.update(p.checkpoint_id for p in self.pending)
        known.update(e.checkpoint_id for e in self.discarded)
        known.update([self.head] if self.head is not None else [])
        return known

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


EMPTY = ControlRecord()


class ControlUnreadable(CheckpointError):
    """The control record exists but cannot be read: nothing may decide until it is
    repaired. The message names the key and the repair command."""

    def __init__(self, key: str, cause: RecordError) -> None:
        self.key = key
        self.cause = cause
        problem = cause.summary if isinstance(cause, CorruptRecord) else str(cause)
        way_out = (
            ""  # the cause says to upgrade: a repair would lose what that release recorded
            if isinstance(cause, UnsupportedRecordVersion)
            else "; run `batchpoint repair` to rebuild it from the checkpoint records"
        )
        super().__init__(f"the pipeline's control record {key} is unreadable ({problem}){way_out}")
