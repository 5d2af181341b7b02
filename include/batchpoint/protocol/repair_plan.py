"""What `batchpoint repair` would write, derived only from what the records prove: a pure
function of the evidence (`RepairEvidence`), so every rule is one place and testable.

The head is on the current timeline: the latest restore generation (the highest of the
restore records `restores/gen-G.json`, the control record when it reads, and every
checkpoint's trigger record) and its target, or a checkpoint completed after it within
that generation; failing those, the target's ancestors (its base chain). Quarantined,
damaged and imported checkpoints (an imported savepoint completes into `retained` but
only a restore makes it the head) are skipped with a finding. Retained: every intact
savepoint and checkpoint kept forever, the newest `num_retained` intact checkpoints, the
head, and whatever the record read retains and is still intact. A repair with a head is
a restore to it: a new generation above every one seen (the sinks' too), every open
checkpoint abandoned, and a restore in flight so the sinks are rewound to the head,
never to an epoch the last restore abandoned. A restore intent above every generation
the other records prove is a restore in doubt (protocol/restore_intents.py): refused
unless the operator chose the head. An id the record read had discarded or
collected never comes back; an id whose outcome or trigger record cannot be read is
held (in no set, never queued for GC), and so is one the record held already.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from batchpoint.protocol.checkpoint import (
    CheckpointOutcome,
    CheckpointStatus,
    PendingCheckpoint,
)
from batchpoint.protocol.control import (
    MIGRATED_FROM,
    CascadeFence,
    ControlFinding,
    ControlRecord,
    DiscardedEntry,
    PendingEntry,
    RestoreInFlight,
    RetainedEntry,
    Stopped,
)
from batchpoint.protocol.findings import Finding
from batchpoint.protocol.head import HeadMoveCause
from batchpoint.protocol.records import to_iso
from batchpoint.protocol.restore_intents import RestoreInDoubt, doubt_refusal, in_doubt
from batchpoint.protocol.stopping import kept_stop
from batchpoint.protocol.timeline import is_stale, on_timeline


@dataclass
class RepairEvidence:
    """Everything repair read, after it read the control record."""

    current: ControlRecord | None  # the control record, when it was readable
    outcomes: dict[int, CheckpointOutcome] = field(default_factory=dict)  # readable ones
    damaged: dict[int, str] = field(default_factory=dict)  # completed, files not intact
    open: list[PendingCheckpoint] = field(default_factory=list)  # pending, no outcome
    unreadable: dict[int, str] = field(default_factory=dict)  # outcome or trigger record
    restores: dict[int, int | None] = field(default_factory=dict)  # generation -> target
    intents: list[RestoreInDoubt] = field(default_factory=list)  # restores about to move
    sinks: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # generation, current
    quarantined: set[int] = field(default_factory=set)
    findings: list[Finding] = field(default_factory=list)  # damage met while reading
    fence: CascadeFence | None = None  # of the cascade under way that names the pipeline


@dataclass(frozen=True)
class RepairPlan:
    control: ControlRecord
    findings: tuple[Finding, ...]
    abandoned: tuple[int, ...]  # open checkpoints the new generation aborts
    queued: tuple[int, ...]  # ids newly entering GC's queue
    refusal: str | None = None  # why no head can be proven: nothing may be written
    in_doubt: tuple[RestoreInDoubt, ...] = ()  # restores the records cannot settle

    @property
    def held(self) -> list[int]:
        return sorted(self.control.held_ids())


def plan_repair(
    evidence: RepairEvidence, num_retained: int, now: float, chosen: int | None = None
) -> RepairPlan:
    """`chosen`: the head the operator named (`repair --head`), in place of the proven one."""
    ev = evidence
    current = ev.current
    findings = list(ev.findings)
    gone: set[int] = set()
    if current is not None:
        gone = {e.checkpoint_id for e in current.discarded} | set(current.collected)
    intact = _intact(ev, gone, findings)
    generation, target = _timeline(ev, findings)
    doubt = in_doubt(ev.intents, generation) if current is None else []
    proven = _head(ev, intact, generation, target, findings)
    head, refusal = _answer(ev, intact, chosen, doubt, proven, generation, target)
    # A chosen head other than the proven one is a restore to it (a stopped pipeline
    # starts again); the proven one, chosen, keeps what a plain repair keeps.
    target = chosen if head != proven else target
    held = _held(ev, current, intact, gone, now)

    entries = {cid: _entry(o, current) for cid, o in intact.items() if cid not in held}
    keep = _keep(entries, head, current, num_retained)
    retained = tuple(entries[cid] for cid in sorted(keep))
    findings += _imported_not_chosen(entries, intact, target)
    pending, abandoned = _open_checkpoints(ev, gone, held, head)
    stop, pending = kept_stop(ev.current, ev.open, pending)
    abandoned = [*abandoned, *(stop.abandoned if stop is not None else ())]
    kept = {e.checkpoint_id for e in retained} | {p.checkpoint_id for p in pending} | set(held)
    settled = [cid for cid in ev.outcomes if cid not in gone]
    queued = sorted(cid for cid in {*settled, *abandoned} if cid not in kept)
    old_queue = () if current is None else current.discarded
    discarded = (
        *(e for e in old_queue if e.checkpoint_id not in kept),
        *(DiscardedEntry(cid, now) for cid in queued),
    )
    notes = () if current is None else current.findings
    kept_notes = tuple(f for f in notes if not f.hold and f.checkpoint_id in keep)
    new_generation, restore = _restore_to(ev, generation, head, abandoned, now)
    extra = {} if current is None else dict(current.extra)
    extra.pop(MIGRATED_FROM, None)
    control = ControlRecord(
        head=head,
        restore_generation=new_generation,
        retained=retained,
        pending=pending,
        discarded=discarded,
        collected=() if current is None else current.collected,
        restore=restore,
        moved_at=now,
        cause=HeadMoveCause.RESTORE,
        findings=(*kept_notes, *held.values()),
        extra={**extra, "repaired_at": to_iso(now)},
        stopped=_stopped(current, intact, head, target, findings),
        stopping=stop,
        quarantine_marks=0 if current is None else current.quarantine_marks,
        cascade=ev.fence if current is None else current.cascade or ev.fence,
    )
    return RepairPlan(
        control, tuple(findings), tuple(abandoned), tuple(queued), refusal, tuple(doubt)
    )


def _answer(
    ev: RepairEvidence,
    intact: dict[int, CheckpointOutcome],
    chosen: int | None,
    doubt: list[RestoreInDoubt],
    head: int | None,
    generation: int,
    target: int | None,
) -> tuple[int | None, str | None]:
    """The head and the refusal: the operator's `--head` in place of the proven head, a
    restore in doubt refused until it answers, or no head proven (`_refusal`)."""
    if chosen is not None:
        unfit = _unfit(ev, intact, chosen)
        if unfit is not None:
            return head, f"checkpoint {chosen} cannot be the head: {unfit}"
        return chosen, None
    if doubt:
        return head, doubt_refusal(doubt, head)
    return head, _refusal(intact, head, generation, target)


def _stopped(
    current: ControlRecord | None,
    intact: dict[int, CheckpointOutcome],
    head: int | None,
    restored_to: int | None,
    findings: list[Finding],
) -> Stopped | None:
    """A stopped pipeline stays stopped through a repair: a repair is not the resume or
    the restore its user asked for. A readable record says so itself; a damaged one is
    read from the head, when it is a completed stop-with-savepoint no restore chose (a
    restore starts the pipeline again)."""
    stopped = current.stopped if current is not None else None
    if stopped is None and head is not None and head != restored_to:
        outcome = intact[head]
        if outcome.pending.properties.stop_pipeline and outcome.completed is not None:
            stopped = Stopped(head, outcome.completed.completed_at)
    if stopped is not None:
        why = "the pipeline stays stopped; run `batchpoint resume` to start it again"
        findings.append(Finding(f"stop-with-savepoint {stopped.savepoint}", why))
    return stopped


def _imported_not_chosen(
    entries: dict[int, RetainedEntry], intact: dict[int, CheckpointOutcome], target: int | None
) -> list[Finding]:
    why = "an imported savepoint no restore chose: retained, never the head"
    return [
        Finding(f"checkpoint {cid}", why, cid)
        for cid in sorted(entries)
        if intact[cid].pending.properties.is_imported and cid != target
    ]


def _intact(
    ev: RepairEvidence, gone: set[int], findings: list[Finding]
) -> dict[int, CheckpointOutcome]:
    """The completed checkpoints not queued or collected whose files are intact; the
    damaged ones are findings (they are queued for GC)."""
    completed = {
        cid: o
        for cid, o in ev.outcomes.items()
        if o.status is CheckpointStatus.COMPLETED and o.completed is not None and cid not in gone
    }
    for cid, problem in sorted(ev.damaged.items()):
        if cid in completed:
            findings.append(Finding(f"checkpoint {cid}", f"{problem}: queued for GC", cid))
    return {cid: o for cid, o in completed.items() if cid not in ev.damaged}


def _keep(
    entries: dict[int, RetainedEntry],
    head: int | None,
    current: ControlRecord | None,
    num_retained: int,
) -> set[int]:
    """The retained ids: every savepoint and checkpoint kept forever, the newest
    `num_retained` checkpoints, the head, and what the record read retains."""
    forever = [e for e in entries.values() if not e.subsumable]
    newest = sorted((e for e in entries.values() if e.subsumable), key=_id)[-num_retained:]
    keep = {e.checkpoint_id for e in [*forever, *newest]}
    if head is not None:
        keep.add(head)
    if current is not None:
        keep |= {cid for cid in current.retained_ids() if cid in entries}
    return keep


def _open_checkpoints(
    ev: RepairEvidence, gone: set[int], held: dict[int, ControlFinding], head: int | None
) -> tuple[tuple[PendingEntry, ...], list[int]]:
    """The pending entries, and the open checkpoints a repair with a head abandons
    (all of them: it is a restore)."""
    current = ev.current
    open_ids = sorted({p.checkpoint_id for p in ev.open} - gone - set(held))
    admitted = (
        [] if current is None else [p for p in current.pending if p.checkpoint_id not in held]
    )
    if head is not None:
        return (), sorted(set(open_ids) | {p.checkpoint_id for p in admitted})
    by_id = {p.checkpoint_id: p for p in admitted}
    for p in ev.open:
        if p.checkpoint_id in open_ids:
            by_id.setdefault(p.checkpoint_id, PendingEntry.of(p))
    return tuple(by_id[cid] for cid in sorted(by_id)), []


def _restore_to(
    ev: RepairEvidence, generation: int, head: int | None, abandoned: list[int], now: float
) -> tuple[int, RestoreInFlight | None]:
    """The new record's generation, and the restore in flight that rewinds the sinks."""
    seen = [*(g for g, _ in ev.sinks.values()), *(i.restore_generation for i in ev.intents)]
    new_generation = max([generation, *seen])
    if head is None:
        return new_generation, None
    # A repair with a head is a restore to it: a generation above every decision made so
    # far, so a late finalize or publish of the old timeline stays stale.
    new_generation += 1
    previous = None if ev.current is None else ev.current.head
    return new_generation, RestoreInFlight(
        new_generation, head, previous, tuple(abandoned), False, now
    )


def _refusal(
    intact: dict[int, CheckpointOutcome], head: int | None, generation: int, target: int | None
) -> str | None:
    """No head with checkpoints that could continue the pipeline would restart it from
    empty state: refused. Only imported savepoints no restore chose leave no head, as
    before the restore that is meant to follow their import."""
    if head is not None or all(o.pending.properties.is_imported for o in intact.values()):
        return None
    return (
        f"no checkpoint of the current timeline (restore generation {generation}"
        + (f", restored to checkpoint {target}" if target is not None else "")
        + ") is intact and unquarantined, so the records prove no head; release a "
        "quarantined one (`batchpoint quarantine release ID`) and repair again"
    )


def _timeline(ev: RepairEvidence, findings: list[Finding]) -> tuple[int, int | None]:
    """The latest restore generation any record shows, and that restore's target (or a
    checkpoint its timeline continued to)."""
    triggered = [o.pending for o in ev.outcomes.values()] + list(ev.open)
    generations = [
        *ev.restores,
        *(p.restore_generation for p in triggered),
        *(g for g, _ in ev.sinks.values()),
        0 if ev.current is None else ev.current.restore_generation,
    ]
    generation = max(generations, default=0)
    if generation == 0:
        return 0, None
    if ev.restores.get(generation) is not None:
        return generation, ev.restores[generation]
    r = None if ev.current is None else ev.current.restore
    if r is not None and r.generation == generation:
        return generation, r.target
    # The restore record was never written (the restore's roll-forward did not finish):
    # the first checkpoint of the generation was triggered on the restored head ...
    first = min(
        (p for p in triggered if on_timeline(p.restore_generation, generation)),
        key=lambda p: p.checkpoint_id,
        default=None,
    )
    if first is not None and first.base_checkpoint_id is not None:
        return generation, first.base_checkpoint_id
    # ... and a sink rewound into the generation shows the restored head, or an epoch
    # published after it on its timeline.
    for sink, (seen, current) in sorted(ev.sinks.items()):
        if seen == generation and current is not None:
            findings.append(
                Finding(
                    f"restore generation {generation}",
                    f"no restore record names its target: sink {sink} shows checkpoint "
                    f"{current} of that timeline",
                )
            )
            return generation, current
    findings.append(
        Finding(
            f"restore generation {generation}",
            "no record names its target: the head is taken from the checkpoints "
            "completed in that generation",
        )
    )
    return generation, None


def _head(
    ev: RepairEvidence,
    intact: dict[int, CheckpointOutcome],
    generation: int,
    target: int | None,
    findings: list[Finding],
) -> int | None:
    """The newest restorable checkpoint of the timeline: the target, what completed
    after it in its generation (imports excluded), then the target's base chain."""
    ev_outcomes = ev.outcomes
    on = {
        cid
        for cid, o in ev_outcomes.items()
        if o.status is CheckpointStatus.COMPLETED
        and on_timeline(o.pending.restore_generation, generation)
        and not o.pending.properties.is_imported
    }
    ancestors: list[int] = []
    step = target
    while step is not None and step not in ancestors:
        ancestors.append(step)
        outcome = ev_outcomes.get(step)
        step = None if outcome is None else outcome.pending.base_checkpoint_id
    on.discard(target)
    order = [*sorted((c for c in on if target is None or c > target), reverse=True), *ancestors]
    for cid in order:
        problem = _unfit(ev, intact, cid)
        if problem is None:
            _note_abandoned(ev, intact, cid, generation, target, findings)
            return cid
        findings.append(Finding(f"checkpoint {cid}", f"{problem}: not the head", cid))
    _note_abandoned(ev, intact, None, generation, target, findings)
    return None


def _unfit(ev: RepairEvidence, intact: dict[int, CheckpointOutcome], cid: int) -> str | None:
    if cid in ev.quarantined:
        return "quarantined"
    if cid in ev.unreadable:
        return "unreadable record"
    if cid in ev.damaged:
        return ev.damaged[cid]
    outcome = ev.outcomes.get(cid)
    if outcome is None:
        return "no outcome record"
    if cid not in intact:
        return "not completed" if outcome.status is not CheckpointStatus.COMPLETED else "collected"
    return None


def _note_abandoned(
    ev: RepairEvidence,
    intact: dict[int, CheckpointOutcome],
    head: int | None,
    generation: int,
    target: int | None,
    findings: list[Finding],
) -> None:
    """Say which completed checkpoints the last restore left behind (never the head)."""
    if generation == 0 or target is None:
        return
    for cid in sorted(intact):
        o = intact[cid]
        if (
            cid > target
            and cid != head
            and is_stale(o.pending.restore_generation, generation)
            and not o.pending.properties.is_imported
        ):
            why = f"abandoned by restore generation {generation} to checkpoint {target}"
            findings.append(Finding(f"checkpoint {cid}", f"{why}: not the head", cid))


def _held(
    ev: RepairEvidence,
    current: ControlRecord | None,
    intact: dict[int, CheckpointOutcome],
    gone: set[int],
    now: float,
) -> dict[int, ControlFinding]:
    """Ids kept out of every set: unreadable records now, and what the record held and
    the records still cannot judge (a hold is released only by an intact outcome). An
    id already queued or collected stays so: its files are judged without its records."""
    held = {
        cid: ControlFinding(cid, problem, now, hold=True)
        for cid, problem in sorted(ev.unreadable.items())
        if cid not in gone
    }
    for f in () if current is None else current.findings:
        if f.hold and f.checkpoint_id not in intact:
            held.setdefault(f.checkpoint_id, f)
    return held


def _entry(outcome: CheckpointOutcome, current: ControlRecord | None) -> RetainedEntry:
    assert outcome.completed is not None
    p = outcome.pending
    known = None if current is None else current.retained_entry(p.checkpoint_id)
    return RetainedEntry(
        p.checkpoint_id,
        p.type,
        outcome.completed.completed_at,
        bool(p.properties.retain_forever),
        claimed=known.claimed if known is not None else False,
    )


def _id(entry: RetainedEntry) -> int:
    return entry.checkpoint_id
