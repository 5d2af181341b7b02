"""Migration from the head-pointer v1 layout: a `head-pointer` record at the control
record's key plus one `retained/chk-N.json` marker per retained checkpoint.

The control record is built from them when it is read (`ControlStore.snapshot`) and
written by the next write, which then drops the markers. The migration never discards
what it cannot judge:

- a readable marker is the retained entry; a marker that cannot be read (damaged,
  truncated, naming another id) falls back to the checkpoint's outcome record: a
  COMPLETED checkpoint stays retained as the outcome describes it (a savepoint, a
  checkpoint kept forever), with a note;
- what stays unknowable (the outcome unreadable or missing too, or ABORTED against its
  marker) is *held*: in no set, so never queued for GC, and reported by every GC pass
  (`ControlFinding`) until `batchpoint repair` can judge it;
- only the folders the old layout proves unretained (no marker, not pending, not the
  head) enter GC's queue, once.
"""

from __future__ import annotations

from dataclasses import dataclass

from batchpoint import codec
from batchpoint.errors import CorruptRecord, ObjectNotFound, RecordError
from batchpoint.protocol.checkpoint import (
    CheckpointOutcome,
    CheckpointStatus,
    CheckpointType,
    PendingCheckpoint,
)
from batchpoint.protocol.control import (
    MIGRATED_FROM,
    OLD_LAYOUT,
    ControlFinding,
    ControlRecord,
    DiscardedEntry,
    PendingEntry,
    RetainedEntry,
)
from batchpoint.protocol.head import HeadPointer
from batchpoint.protocol.layout import PipelineLayout, parse_checkpoint_dir_name
from batchpoint.storage.base import ObjectStore


@dataclass(frozen=True)
class RetainedMarker(codec.Record):
    """The old layout's membership of one checkpoint in the retained set."""

    KIND = "retained-checkpoint"
    VERSION = 1

    checkpoint_id: int
    type: CheckpointType = codec.field(missing=CheckpointType.CHECKPOINT)
    completed_at: float = codec.time()
    retain_forever: bool = False

    @classmethod
    def of(cls, entry: RetainedEntry) -> RetainedMarker:
        return cls(entry.checkpoint_id, entry.type, entry.completed_at, entry.retain_forever)

    @property
    def entry(self) -> RetainedEntry:
        return RetainedEntry(self.checkpoint_id, self.type, self.completed_at, self.retain_forever)


def migrate(store: ObjectStore, layout: PipelineLayout, data: bytes, now: float) -> ControlRecord:
    """The control record the old layout stands for. Raises RecordError when the
    head-pointer record itself cannot be read (the caller makes it ControlUnreadable)."""
    old = HeadPointer.decode(layout.head, data)
    retained: list[RetainedEntry] = []
    findings: list[ControlFinding] = []
    for info in store.list(layout.retained_prefix):
        cid = parse_checkpoint_dir_name(info.key.rsplit("/", 1)[-1])
        if cid is None:
            continue
        entry, finding = _retained(store, layout, cid, info.key, now)
        if entry is not None:
            retained.append(entry)
        if finding is not None:
            findings.append(finding)
    pending: list[PendingEntry] = []
    for info in store.list(layout.active_prefix):
        cid = parse_checkpoint_dir_name(info.key.rsplit("/", 1)[-1])
        if cid is None:
            continue
        try:
            p = PendingCheckpoint.decode(info.key, store.get(info.key).data)
        except ObjectNotFound:
            continue  # settled while listing
        except RecordError as exc:
            # Not admitted in the new record: its folder follows its marker like any other.
            findings.append(ControlFinding(cid, f"unreadable pending record: {_why(exc)}", now))
            continue
        pending.append(PendingEntry.of(p))
    keep = {e.checkpoint_id for e in retained} | {p.checkpoint_id for p in pending}
    keep |= {f.checkpoint_id for f in findings if f.hold}
    if old.checkpoint_id is not None:
        keep.add(old.checkpoint_id)
    # Settled checkpoints the old layout proves unretained enter GC's queue once, so the
    # new GC (which looks only at the queue) still reclaims them.
    discarded = []
    for prefix in store.list_dirs(layout.checkpoints_prefix):
        cid = parse_checkpoint_dir_name(prefix.rstrip("/").rsplit("/", 1)[-1])
        if cid is not None and cid not in keep:
            discarded.append(DiscardedEntry(cid, now))
    return ControlRecord(
        head=old.checkpoint_id,
        restore_generation=old.restore_generation,
        retained=tuple(retained),
        pending=tuple(pending),
        discarded=tuple(discarded),
        moved_at=old.moved_at,
        cause=old.cause,
        findings=tuple(findings),
        extra={MIGRATED_FROM: OLD_LAYOUT},
    )


def _retained(
    store: ObjectStore, layout: PipelineLayout, cid: int, key: str, now: float
) -> tuple[RetainedEntry | None, ControlFinding | None]:
    """The retained entry a marker stands for, from the marker or else the outcome."""
    try:
        marker = RetainedMarker.decode(key, store.get(key).data)
        if marker.entry.checkpoint_id == cid:
            return marker.entry, None
        problem = f"marker {key} names checkpoint {marker.entry.checkpoint_id}"
    except ObjectNotFound:
        # A writer migrated meanwhile and dropped the markers: this read is stale, and
        # any compare-and-swap based on it loses; the outcome still says the truth.
        problem = f"marker {key} vanished while it was read"
    except RecordError as exc:
        problem = _why(exc)
    outcome_key = layout.outcome(cid)
    try:
        outcome: CheckpointOutcome | None = CheckpointOutcome.decode(
            outcome_key, store.get(outcome_key).data
        )
    except ObjectNotFound:
        outcome = None
    except RecordError as exc:
        why = f"its retained marker ({problem}) and its outcome ({_why(exc)}) are unreadable"
        return None, ControlFinding(cid, why, now, hold=True)
    if outcome is None or outcome.status is not CheckpointStatus.COMPLETED:
        said = "no outcome record" if outcome is None else f"an {outcome.status.value} outcome"
        why = f"its retained marker is unreadable ({problem}) and there is {said}"
        return None, ControlFinding(cid, why, now, hold=True)
    assert outcome.completed is not None
    p = outcome.pending
    entry = RetainedEntry(
        cid,
        p.type,
        outcome.completed.completed_at,
        bool(p.properties.retain_forever),
    )
    note = f"retained as its outcome record says: its retained marker is unreadable ({problem})"
    return entry, ControlFinding(cid, note, now)


def _why(exc: RecordError) -> str:
    return exc.summary if isinstance(exc, CorruptRecord) else str(exc)


def drop_old_markers(store: ObjectStore, layout: PipelineLayout) -> None:
    """After the first write of a migrated record: the markers said all they could."""
    store.delete_many([i.key for i in store.list(layout.retained_prefix)])
