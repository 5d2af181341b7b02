"""Restore: move the head to a retained checkpoint in one conditional write, then rewind
the sinks, in a way that either finishes or changes nothing.

Before the CAS the target is validated: retained, not quarantined (on every restore
path, gated or not) and every file intact (size and, by default, sha256). "latest"
walks the retained set newest first and skips damaged, unreadable and quarantined
candidates as findings. The CAS itself requires the target to still be retained (GC
only deletes files of discarded ids, and an id leaves `retained` before it can be
discarded, so a target that wins the CAS keeps its files), bumps the generation and
abandons every pending checkpoint. The rest is a roll-forward that any actor finishes
(`finish`): abort the abandoned checkpoints, rewind every sink manifest, then mark
`sinks_rewound`. Losing the race (the target left `retained`) changes nothing.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from batchpoint.errors import CheckpointNotFound, RecordError, RestoreRefused
from batchpoint.protocol.checkpoint import IMPORTED_FROM_PROPERTY, CheckpointFailureReason
from batchpoint.protocol.control import ControlRecord, ControlUnreadable, RestoreInFlight
from batchpoint.protocol.findings import Finding
from batchpoint.protocol.head import HeadMoveCause, HeadPointer
from batchpoint.protocol.records import encode, to_iso
from batchpoint.protocol.sinks import SinkPublisher
from batchpoint.protocol.verify import check_handles

if TYPE_CHECKING:
    from batchpoint.protocol.coordinator import CheckpointCoordinator

#: Properties an import records, so a restore to it keeps the sinks' history.
SAVEPOINT_ID_PROPERTY = "savepoint_checkpoint_id"
TAKEN_FROM_PROPERTY = "savepoint_taken_from"


@dataclass(frozen=True)
class RestoreResult:
    """Where the head went, and which candidates were skipped on the way."""

    head: HeadPointer
    findings: tuple[Finding, ...] = ()

    @property
    def checkpoint_id(self) -> int | None:
        return self.head.checkpoint_id

    @property
    def restore_generation(self) -> int:
        return self.head.restore_generation

    @property
    def moved_at(self) -> float:
        return self.head.moved_at

    @property
    def cause(self) -> HeadMoveCause:
        return self.head.cause


class CheckpointRestorer:
    def __init__(self, coordinator: CheckpointCoordinator) -> None:
        self._c = coordinator

    def restore(
        self,
        checkpoint_id: int | None = None,
        *,
        checksums: bool | None = None,
        claim: bool = False,
    ) -> RestoreResult:
        """Move the head to `checkpoint_id` (or the newest restorable). With `claim`
        (Flink's CLAIM mode) the pipeline takes ownership of the restored checkpoint: a
        savepoint or a checkpoint kept forever becomes subsumable, so retention drops it
        once newer checkpoints complete and GC deletes its files. Without (NO_CLAIM, the
        default) it stays exactly as retained as before. Either way the first new
        checkpoint shares no file with it: every checkpoint is a full snapshot."""
        c = self._c
        checksums = c.config.restore_verify_checksums if checksums is None else checksums
        self.finish()
        control = self._control()
        explicit = checkpoint_id is not None
        if explicit:
            if control.retained_entry(checkpoint_id) is None:
                raise RestoreRefused(
                    f"checkpoint {checkpoint_id} of pipeline '{c.pipeline}' is not retained "
                    f"(retained: {control.retained_ids() or 'none'})"
                )
            candidates = [checkpoint_id]
        else:
            candidates = sorted(control.retained_ids(), reverse=True)
            if not candidates:
                raise RestoreRefused(f"pipeline '{c.pipeline}' has no retained checkpoint")
        findings: list[Finding] = []
        for cid in candidates:
            problem = self.problem(cid, checksums)
            if problem is None:
                moved = self._move(cid, claim)
                if moved is not None:
                    self.finish()
                    return RestoreResult(HeadPointer.of(moved), tuple(findings))
                problem = "it left the retained set while restoring (nothing changed)"
            if explicit:
                raise RestoreRefused(
                    f"checkpoint {cid} of pipeline '{c.pipeline}' cannot be restored: {problem}"
                )
            findings.append(Finding(f"checkpoint {cid}", problem, cid))
        listed = "; ".join(map(str, findings))
        raise RestoreRefused(
            f"pipeline '{c.pipeline}': no retained checkpoint can be restored ({listed})"
        )

    def problem(self, checkpoint_id: int, checksums: bool) -> str | None:
        """Why a retained checkpoint must not be restored, or None."""
        c = self._c
        if c.store.exists(c.layout.quarantine(checkpoint_id)):
            return "quarantined (release it with `batchpoint quarantine release` first)"
        try:
            completed = c.completed.get(checkpoint_id)
        except RecordError as exc:
            return f"unreadable record: {exc}"
        except CheckpointNotFound as exc:
            return str(exc)
        problems = check_handles(c.store, completed.durable_handles, checksums=checksums)
        if problems:
            shown = "; ".join(map(str, problems[:3]))
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            return f"{len(problems)} file(s) not intact: {shown}{more}"
        return None

    def _control(self) -> ControlRecord:
        try:
            found = self._c.control.read()
        except ControlUnreadable as exc:
            raise RestoreRefused(str(exc)) from None
        if found is None:
            raise RestoreRefused(
                f"pipeline '{self._c.pipeline}' has no control record; run `batchpoint repair`"
            )
        return found[0]

    def _move(self, target: int, claim: bool) -> ControlRecord | None:
        now = self._c.clock()

        def move(current: ControlRecord | None) -> ControlRecord | None:
            entry = None if current is None else current.retained_entry(target)
            if current is None or entry is None:
                return None
            if claim and not entry.claimed:
                retained = tuple(
                    replace(e, claimed=True) if e.checkpoint_id == target else e
                    for e in current.retained
                )
                current = replace(current, retained=retained)
            generation = current.restore_generation + 1
            abandoned = sorted(p.checkpoint_id for p in current.pending)
            moved = replace(
                current,
                head=target,
                restore_generation=generation,
                pending=(),
                restore=RestoreInFlight(
                    generation, target, current.head, tuple(abandoned), False, now
                ),
                moved_at=now,
                cause=HeadMoveCause.RESTORE.value,
            )
            return moved.with_discarded(abandoned, now)

        try:
            record, written = self._c.control.update(move)
        except ControlUnreadable as exc:
            raise RestoreRefused(str(exc)) from None
        return record if written else None

    def finish(self) -> None:
        """Roll forward a restore whose sinks are not rewound yet. Idempotent."""
        c = self._c
        try:
            control = c.control.load()
        except ControlUnreadable:
            return
        r = control.restore
        if r is None or r.sinks_rewound:
            return
        for cid in r.aborted:
            with contextlib.suppress(CheckpointNotFound, RecordError):
                c.abort(cid, CheckpointFailureReason.RESTORED, f"restore to checkpoint {r.target}")
        SinkPublisher(c.store, c.layout).rewind_all(
            r.target, r.generation, alias_of=self.alias_of(r.target)
        )
        c.store.put(
            c.layout.restore(r.generation),
            encode(
                "restore",
                1,
                {
                    "checkpoint_id": r.target,
                    "restore_generation": r.generation,
                    "previous_head": r.previous,
                    "restored_at": to_iso(r.at),
                },
            ),
        )
        c.failures.reset(c.clock(), reason=f"restored to checkpoint {r.target}")

        def done(current: ControlRecord | None) -> ControlRecord | None:
            if current is None or current.restore is None:
                return None
            if current.restore.generation != r.generation or current.restore.sinks_rewound:
                return None
            return replace(current, restore=replace(current.restore, sinks_rewound=True))

        c.control.update(done)

    def alias_of(self, checkpoint_id: int) -> int | None:
        """For a checkpoint imported from a savepoint of this very storage: the id the
        savepoint was taken from, whose sink epochs the restore keeps."""
        c = self._c
        try:
            outcome = c.get_outcome(checkpoint_id)
        except RecordError:
            return None
        if outcome is None:
            return None
        props = outcome.pending.properties
        original = props.get(SAVEPOINT_ID_PROPERTY)
        if IMPORTED_FROM_PROPERTY not in props or not isinstance(original, int):
            return None
        return original if props.get(TAKEN_FROM_PROPERTY) == c.store.uri else None
