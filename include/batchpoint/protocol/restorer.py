"""Restore: move the head to a retained checkpoint in one conditional write, then rewind
the sinks, in a way that either finishes or changes nothing.

Before the CAS the target is validated by the one candidate walk (restore_candidates.py):
retained, not quarantined (on every restore path, gated or not), its outcome record
readable and every file intact (size and, by default, sha256). "latest" walks the
retained set newest first and skips damaged, unreadable and quarantined candidates as
findings; a candidate whose damage its records or files prove (not a storage error,
which fails the restore, changing nothing) is quarantined with the finding as the reason
(`condemn`), so no later restore, repair or form offers it again until it is released.
`restore` is the one way in: it moves the head to what the walk (or an import) chose,
in the mode the caller asks (claim_mode.py). An intent goes before the CAS, so a repair
after a control record lost in the CAS's wake knows a restore may have moved the head
(restore_intents.py). The CAS itself requires the target to
still be retained (GC only deletes files of discarded ids, and an id leaves `retained`
before it can be discarded, so a target that wins the CAS keeps its files) and still not
quarantined (read after the record it swaps on: a mark bumps that record, quarantine.py),
bumps the generation and abandons every pending checkpoint. The rest is a roll-forward
that any actor finishes (`finish`): abort the abandoned checkpoints, rewind every sink
manifest, then mark `sinks_rewound`. Losing the race (the target left `retained`, or was
quarantined) changes nothing.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import replace

from attrs import define, field

from batchpoint.errors import (
    CheckpointError,
    CheckpointNotFound,
    RecordError,
    RestoreRefused,
    StorageError,
)
from batchpoint.protocol import stopping
from batchpoint.protocol.cascade import held_by
from batchpoint.protocol.checkpoint import CheckpointFailureReason
from batchpoint.protocol.checkpoint_records import CheckpointRecords
from batchpoint.protocol.claim_mode import ClaimMode
from batchpoint.protocol.completed_store import CompletedCheckpointStore
from batchpoint.protocol.control import (
    CascadeFence,
    ControlRecord,
    ControlUnreadable,
    RestoreInFlight,
    TargetChoice,
)
from batchpoint.protocol.control_store import ControlStore
from batchpoint.protocol.failures import CheckpointFailureManager
from batchpoint.protocol.head import HeadMoveCause, HeadPointer
from batchpoint.protocol.ports import AbortCheckpoint, Clock
from batchpoint.protocol.quarantine import QuarantineRecord, QuarantineStore
from batchpoint.protocol.restore_candidates import (
    Chosen,
    Examination,
    RestoreCandidates,
    cannot_restore,
    left_retained,
    release_hint,
)
from batchpoint.protocol.restore_intents import RestoreIntent
from batchpoint.protocol.restores import RestoreRecord
from batchpoint.protocol.sinks import SinkPublisher, published_base

_INTENT_ROUNDS = 10


class _GenerationTaken(Exception):
    """Another restore (or a repair) moved the generation after the intent was written."""


class _QuarantinedMeanwhile(Exception):
    """The target was quarantined after the walk examined it."""

    def __init__(self, held: QuarantineRecord) -> None:
        self.held = held


class _HeldByCascade(Exception):
    """A cascade (protocol/cascade.py) holds the pipeline, and this restore is not its."""

    def __init__(self, fence: CascadeFence) -> None:
        self.fence = fence


@define(kw_only=True, slots=False, eq=False)
class CheckpointRestorer:
    _records: CheckpointRecords
    _control: ControlStore
    _completed: CompletedCheckpointStore
    quarantine: QuarantineStore
    _sinks: SinkPublisher
    _failures: CheckpointFailureManager
    _clock: Clock
    _abort: AbortCheckpoint
    _verify_checksums: bool
    candidates: RestoreCandidates = field(init=False)

    @candidates.default
    def _walk(self) -> RestoreCandidates:
        completed = self._completed
        return RestoreCandidates(
            pipeline=self._records.pipeline,
            retained=lambda: self._read_control().retained_ids(),
            held=self.quarantine.held,
            outcome=completed.get,
            files=lambda done, checksums, progress: completed.check_files(
                done, checksums=checksums, progress=progress
            ),
        )

    @property
    def _pipeline(self) -> str:
        return self._records.pipeline

    def restore(
        self,
        target: Examination,
        *,
        mode: ClaimMode = ClaimMode.NO_CLAIM,
        allow_non_restored_state: bool = False,
        choice: TargetChoice | None = None,
        cascade: str | None = None,
    ) -> HeadPointer:
        """The one way in: move the head to a target the caller examined (chosen by
        `candidates`, or an import, which completes a checkpoint only once its files
        check out): that verdict is the validation, not repeated here. What only the
        CAS can hold is: the target must still be retained when the head moves, or
        nothing changes (RestoreRefused). `mode` (claim_mode.py): with CLAIM the
        pipeline owns the restored checkpoint from now on, so retention may drop it;
        NO_CLAIM (the default) leaves it as retained as it was. Either way the first
        new checkpoint shares no file with it: every checkpoint is a full snapshot.
        `allow_non_restored_state` is recorded for the first trigger after it; `choice`:
        how the target was chosen (the gate that passed it; what was passed over and
        quarantined on the way), recorded with the restore; None: ungated, nothing.
        A pipeline a cascade holds is restored only by that cascade (`cascade`, its id):
        its resume would otherwise restore it back to the cascade's own target."""
        cid = target.checkpoint_id
        if not target.restorable:
            raise cannot_restore(self._pipeline, cid, target.problem)
        self.finish()
        if damaged := self._sinks.unreadable():
            raise RestoreRefused(
                f"pipeline '{self._pipeline}': nothing was restored: its sinks could not be "
                f"rewound with the head, as their manifests cannot be read: {'; '.join(damaged)}"
                " (`batchpoint repair` reports a damaged manifest but cannot rebuild it: put "
                "back a good copy)"
            )
        moved = self._move(cid, mode, allow_non_restored_state, choice or TargetChoice(), cascade)
        if moved is None:
            raise left_retained(self._pipeline, cid)
        self.finish()
        return HeadPointer.of(moved)

    def choose(self, checkpoint_id: int | None = None, checksums: bool | None = None) -> Chosen:
        """The walk a restore of `checkpoint_id` (None: the newest restorable) takes,
        quarantining what it finds damaged (`condemn`); `checksums` defaults to the
        configuration's."""
        checksums = self._verify_checksums if checksums is None else checksums
        return self.candidates.choose(checkpoint_id, checksums, self.condemn)

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
        self,
        target: int,
        mode: ClaimMode,
        allow: bool,
        choice: TargetChoice,
        cascade: str | None = None,
    ) -> ControlRecord | None:
        """The compare-and-swap, after an intent naming the generation it would create
        (restore_intents.py): read from the record it swaps on, so a generation another
        restore took first withdraws the intent and says the next one."""
        for _ in range(_INTENT_ROUNDS):
            read = self._read_control()
            generation = read.restore_generation + 1
            token = uuid.uuid4().hex[:12]
            intent = RestoreIntent(generation, target, read.head, self._clock())
            self._records.put_restore_intent(intent, token)
            try:
                record, written = self._control.update(
                    lambda current, g=generation: self._moved(
                        current, target, g, mode, allow, choice, cascade
                    )
                )
            except _GenerationTaken:
                self._withdraw(generation, token)
                continue
            except _QuarantinedMeanwhile as exc:
                self._withdraw(generation, token)
                problem = f"{exc.held.describe()} ({release_hint(target)})"
                raise cannot_restore(self._pipeline, target, problem) from None
            except ControlUnreadable as exc:
                self._withdraw(generation, token)
                raise RestoreRefused(str(exc)) from None
            except _HeldByCascade as exc:
                self._withdraw(generation, token)
                raise RestoreRefused(held_by(self._pipeline, exc.fence)) from None
            if not written:
                self._withdraw(generation, token)
                return None
            return record
        raise CheckpointError(
            f"pipeline '{self._pipeline}': other restores took {_INTENT_ROUNDS} generations "
            "in a row while this one tried to move the head; nothing was changed"
        )

    def _withdraw(self, generation: int, token: str) -> None:
        # A delete that fails leaves an intent that can only make a later repair ask.
        with contextlib.suppress(StorageError):
            self._records.delete_restore_intent(generation, token)

    def _moved(
        self,
        current: ControlRecord | None,
        target: int,
        generation: int,
        mode: ClaimMode,
        allow: bool,
        choice: TargetChoice,
        cascade: str | None,
    ) -> ControlRecord | None:
        entry = None if current is None else current.retained_entry(target)
        if current is None or entry is None:
            return None
        if current.cascade is not None and current.cascade.cascade != cascade:
            raise _HeldByCascade(current.cascade)
        if current.restore_generation + 1 != generation:
            raise _GenerationTaken
        # Read after the record this swap is on: a mark made since bumped it (quarantine.py)
        if (held := self.quarantine.held(target)) is not None:
            raise _QuarantinedMeanwhile(held)
        if mode.claims and not entry.claimed:
            retained = tuple(
                replace(e, claimed=True) if e.checkpoint_id == target else e
                for e in current.retained
            )
            current = replace(current, retained=retained)
        now = self._clock()
        # With those a stop in flight abandoned: clearing the stop here takes away the
        # finalize that would abort them, and each would expire, counted as a failure.
        stopped = current.stopping.abandoned if current.stopping is not None else ()
        abandoned = sorted({*(p.checkpoint_id for p in current.pending), *stopped})
        moved = replace(
            stopping.cleared(current),  # a restore starts a stopped pipeline again
            head=target,
            restore_generation=generation,
            pending=(),
            restore=RestoreInFlight(
                generation,
                target,
                current.head,
                tuple(abandoned),
                False,
                now,
                allow,
                choice.gate,
                choice.passed_over,
                choice.quarantined,
            ),
            moved_at=now,
            cause=HeadMoveCause.RESTORE,
        )
        return moved.with_discarded(abandoned, now)

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
        self._sinks.rewind_all(
            r.target, r.generation, alias_of=self.alias_of(r.target), base_of=self.base_of
        )
        self._records.put_restore(RestoreRecord.of(r))
        self._failures.reset(
            self._clock(), reason=f"restored to checkpoint {r.target}", completed_up_to=r.target
        )

        def done(current: ControlRecord | None) -> ControlRecord | None:
            if current is None or current.restore is None:
                return None
            if current.restore.generation != r.generation or current.restore.sinks_rewound:
                return None
            return replace(current, restore=replace(current.restore, sinks_rewound=True))

        self._control.update(done)

    def base_of(self, checkpoint_id: int) -> int | None:
        """The epoch a checkpoint's output follows (None: none, or its record is
        unreadable: a rewind then shows no epoch rather than guess one)."""
        try:
            return published_base(
                self._records.get_checkpoint(checkpoint_id), self._records.storage_uri
            )
        except (CheckpointNotFound, RecordError):
            return None

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
