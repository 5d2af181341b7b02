"""Restore: move the head to a retained checkpoint in one conditional write, then rewind
the sinks, in a way that either finishes or changes nothing.

Before the CAS the target is validated: retained, not quarantined (on every restore
path, gated or not), its outcome record readable and every file intact (size and, by
default, sha256). "latest" walks the retained set newest first and skips damaged,
unreadable and quarantined candidates as findings; a candidate whose damage its records
or files prove (not a storage error, which fails the restore, changing nothing) is
quarantined with the finding as the reason, so no later restore, repair or form offers
it again until it is released. The CAS itself requires the target to still be retained (GC
only deletes files of discarded ids, and an id leaves `retained` before it can be
discarded, so a target that wins the CAS keeps its files), bumps the generation and
abandons every pending checkpoint. The rest is a roll-forward that any actor finishes
(`finish`): abort the abandoned checkpoints, rewind every sink manifest, then mark
`sinks_rewound`. Losing the race (the target left `retained`) changes nothing.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace

from batchpoint.errors import CheckpointNotFound, RecordError, RestoreRefused
from batchpoint.protocol import stopping
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CompletedCheckpoint,
)
from batchpoint.protocol.checkpoint_records import CheckpointRecords
from batchpoint.protocol.completed_store import CompletedCheckpointStore
from batchpoint.protocol.control import ControlRecord, ControlUnreadable, RestoreInFlight
from batchpoint.protocol.control_store import ControlStore
from batchpoint.protocol.failures import CheckpointFailureManager
from batchpoint.protocol.findings import Finding
from batchpoint.protocol.head import HeadMoveCause, HeadPointer
from batchpoint.protocol.ports import AbortCheckpoint, Clock, ProgressFn
from batchpoint.protocol.quarantine import QuarantineRecord, QuarantineStore
from batchpoint.protocol.restores import RestoreRecord
from batchpoint.protocol.sinks import SinkPublisher


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


@dataclass(frozen=True)
class Examination:
    """What a restore found about one retained candidate before moving the head to it."""

    checkpoint_id: int
    completed: CompletedCheckpoint | None = None  # None: its outcome could not be read
    problem: str | None = None  # why it must not be restored, in one line
    details: tuple[str, ...] = ()  # each file problem, when files are at fault
    held: QuarantineRecord | None = None  # quarantined already
    damaged: bool = False  # the problem is proven by its records or files

    @property
    def restorable(self) -> bool:
        return self.problem is None and self.completed is not None


def _release_hint(checkpoint_id: int) -> str:
    return f"release it with `batchpoint quarantine release {checkpoint_id}` first"


class CheckpointRestorer:
    def __init__(
        self,
        *,
        records: CheckpointRecords,
        control: ControlStore,
        completed: CompletedCheckpointStore,
        quarantine: QuarantineStore,
        sinks: SinkPublisher,
        failures: CheckpointFailureManager,
        clock: Clock,
        abort: AbortCheckpoint,
        verify_checksums: bool,
    ) -> None:
        self._records = records
        self._control = control
        self._completed = completed
        self.quarantine = quarantine
        self._sinks = sinks
        self._failures = failures
        self._clock = clock
        self._abort = abort
        self._verify_checksums = verify_checksums

    @property
    def _pipeline(self) -> str:
        return self._records.pipeline

    def restore(
        self,
        checkpoint_id: int | None = None,
        *,
        checksums: bool | None = None,
        claim: bool = False,
        allow_non_restored_state: bool = False,
    ) -> RestoreResult:
        """Move the head to `checkpoint_id` (or the newest restorable). With `claim`
        (Flink's CLAIM mode) the pipeline takes ownership of the restored checkpoint: a
        savepoint or a checkpoint kept forever becomes subsumable, so retention drops it
        once newer checkpoints complete and GC deletes its files. Without (NO_CLAIM, the
        default) it stays exactly as retained as before. Either way the first new
        checkpoint shares no file with it: every checkpoint is a full snapshot."""
        checksums = self._verify_checksums if checksums is None else checksums
        self.finish()
        control = self._read_control()
        explicit = checkpoint_id is not None
        if explicit:
            if control.retained_entry(checkpoint_id) is None:
                raise RestoreRefused(
                    f"checkpoint {checkpoint_id} of pipeline '{self._pipeline}' is not retained "
                    f"(retained: {control.retained_ids() or 'none'})"
                )
            candidates = [checkpoint_id]
        else:
            candidates = sorted(control.retained_ids(), reverse=True)
            if not candidates:
                raise RestoreRefused(f"pipeline '{self._pipeline}' has no retained checkpoint")
        findings: list[Finding] = []
        for cid in candidates:
            examined = self.examine(cid, checksums)
            problem = examined.problem
            if problem is None:
                moved = self._move(cid, claim, allow_non_restored_state)
                if moved is not None:
                    self.finish()
                    return RestoreResult(HeadPointer.of(moved), tuple(findings))
                problem = "it left the retained set while restoring (nothing changed)"
            elif self.condemn(examined):
                problem += f"; quarantined ({_release_hint(cid)} once it is mended)"
            if explicit:
                raise RestoreRefused(
                    f"checkpoint {cid} of pipeline '{self._pipeline}' cannot be restored: {problem}"
                )
            findings.append(Finding(f"checkpoint {cid}", problem, cid))
        listed = "; ".join(map(str, findings))
        raise RestoreRefused(
            f"pipeline '{self._pipeline}': no retained checkpoint can be restored ({listed})"
        )

    def restore_examined(
        self,
        examined: Examination,
        *,
        claim: bool = False,
        allow_non_restored_state: bool = False,
        gate: str | None = None,
    ) -> RestoreResult:
        """Move the head to a target the caller examined (`examine`; or an import, which
        completes a checkpoint only once its files check out): that verdict is the
        validation, not repeated here. What only the CAS can hold is: the target must
        still be retained when the head moves, or nothing changes (RestoreRefused).
        `claim` and `allow_non_restored_state` as for `restore`; `gate`: the name of the
        gate that passed the target, recorded with the restore (None: ungated)."""
        cid = examined.checkpoint_id
        if not examined.restorable:
            raise RestoreRefused(
                f"checkpoint {cid} of pipeline '{self._pipeline}' cannot be restored: "
                f"{examined.problem}"
            )
        self.finish()
        moved = self._move(cid, claim, allow_non_restored_state, gate)
        if moved is None:
            raise RestoreRefused(
                f"checkpoint {cid} of pipeline '{self._pipeline}' left the retained set "
                "while restoring (nothing changed)"
            )
        self.finish()
        return RestoreResult(HeadPointer.of(moved))

    def problem(self, checkpoint_id: int, checksums: bool) -> str | None:
        """Why a retained checkpoint must not be restored, or None."""
        return self.examine(checkpoint_id, checksums).problem

    def examine(self, checkpoint_id: int, checksums: bool) -> Examination:
        """Quarantine, outcome record, then files: the first that fails is the problem.
        A storage error (unreachable, throttled) is raised, never a finding: it proves
        nothing about the checkpoint."""
        return self.check_files(self.read_candidate(checkpoint_id), checksums)

    def read_candidate(self, checkpoint_id: int) -> Examination:
        """The candidate's quarantine mark and outcome record, not its files."""
        held = self.quarantine.held(checkpoint_id)
        if held is not None:
            problem = f"{held.describe()} ({_release_hint(checkpoint_id)})"
            return Examination(checkpoint_id, problem=problem, held=held)
        try:
            completed = self._completed.get(checkpoint_id)
        except RecordError as exc:
            return Examination(checkpoint_id, problem=f"unreadable record: {exc}", damaged=True)
        except CheckpointNotFound as exc:  # retained, yet no completed outcome
            return Examination(checkpoint_id, problem=str(exc), damaged=True)
        return Examination(checkpoint_id, completed)

    def check_files(
        self, examined: Examination, checksums: bool, progress: ProgressFn | None = None
    ) -> Examination:
        """Every file of a readable candidate: present, its size and (with `checksums`)
        its sha256 as recorded."""
        if not examined.restorable or examined.completed is None:
            return examined
        problems = self._completed.check_files(
            examined.completed, checksums=checksums, progress=progress
        )
        if not problems:
            return examined
        shown = "; ".join(map(str, problems[:3]))
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        return replace(
            examined,
            problem=f"{len(problems)} file(s) not intact: {shown}{more}",
            details=tuple(map(str, problems)),
            damaged=True,
        )

    def condemn(self, examined: Examination) -> bool:
        """Quarantine a candidate whose damage its records or files prove, the finding as
        the reason; whether it is quarantined now. Only while it is still retained: ids
        leave `retained` for good, and GC deletes only files of ids that left it, so
        damage seen while it was retained was not GC's doing. Created once: when
        another restore (or the gate) quarantined it first, its record stands."""
        if not examined.damaged or examined.problem is None:
            return False
        try:
            retained = self._control.load().retained_entry(examined.checkpoint_id) is not None
        except ControlUnreadable:
            return False  # nothing proven about where it stands: no mark
        if not retained:
            return False
        self.quarantine.mark_damaged(examined.checkpoint_id, examined.problem, self._clock())
        return True

    def _read_control(self) -> ControlRecord:
        try:
            found = self._control.read()
        except ControlUnreadable as exc:
            raise RestoreRefused(str(exc)) from None
        if found is None:
            raise RestoreRefused(
                f"pipeline '{self._pipeline}' has no control record; run `batchpoint repair`"
            )
        return found[0]

    def _move(
        self, target: int, claim: bool, allow: bool = False, gate: str | None = None
    ) -> ControlRecord | None:
        now = self._clock()

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
                stopping.cleared(current),  # a restore starts a stopped pipeline again
                head=target,
                restore_generation=generation,
                pending=(),
                restore=RestoreInFlight(
                    generation, target, current.head, tuple(abandoned), False, now, allow, gate
                ),
                moved_at=now,
                cause=HeadMoveCause.RESTORE,
            )
            return moved.with_discarded(abandoned, now)

        try:
            record, written = self._control.update(move)
        except ControlUnreadable as exc:
            raise RestoreRefused(str(exc)) from None
        return record if written else None

    def finish(self) -> None:
        """Roll forward a restore whose sinks are not rewound yet. Idempotent."""
        try:
            control = self._control.load()
        except ControlUnreadable:
            return
        r = control.restore
        if r is None or r.sinks_rewound:
            return
        for cid in r.aborted:
            with contextlib.suppress(CheckpointNotFound, RecordError):
                self._abort(
                    cid, CheckpointFailureReason.RESTORED, f"restore to checkpoint {r.target}"
                )
        self._sinks.rewind_all(r.target, r.generation, alias_of=self.alias_of(r.target))
        self._records.put_restore(RestoreRecord.of(r))
        self._failures.reset(self._clock(), reason=f"restored to checkpoint {r.target}")

        def done(current: ControlRecord | None) -> ControlRecord | None:
            if current is None or current.restore is None:
                return None
            if current.restore.generation != r.generation or current.restore.sinks_rewound:
                return None
            return replace(current, restore=replace(current.restore, sinks_rewound=True))

        self._control.update(done)

    def alias_of(self, checkpoint_id: int) -> int | None:
        """For a checkpoint imported from a savepoint of this very storage: the id the
        savepoint was taken from, whose sink epochs the restore keeps."""
        try:
            outcome = self._records.get_outcome(checkpoint_id)
        except RecordError:
            return None
        if outcome is None:
            return None
        props = outcome.pending.properties
        original = props.savepoint_checkpoint_id
        if not props.is_imported or original is None:
            return None
        return original if props.savepoint_taken_from == self._records.storage_uri else None
