"""Starting a checkpoint (Flink's CheckpointCoordinator.triggerCheckpoint): the request
decider's admission in one CAS on the control record, then the pending record.

Admission is one compare-and-swap (the decider checks max-concurrent and min-pause
inside it and picks the base), so racing triggers are linearised; a refusal costs at
most the allocated id. The pending record is written after the admission; a trigger
that dies in between leaves an admitted entry that `settle` aborts at its deadline.
A savepoint import is admitted the same way, with no base (`admit_import`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from attrs import define

from batchpoint.errors import RecordError, TriggerRefused
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointStatus,
    CheckpointType,
    CompletedCheckpoint,
    PendingCheckpoint,
)
from batchpoint.protocol.checkpoint_records import CheckpointRecords
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.control import ControlRecord, ControlUnreadable, PendingEntry
from batchpoint.protocol.control_store import ControlStore
from batchpoint.protocol.decider import CheckpointRequestDecider, base_of
from batchpoint.protocol.failures import CheckpointFailureManager, PipelineStatus
from batchpoint.protocol.ids import COUNTER_HINT, CheckpointIDCounter, IdAlreadyUsed
from batchpoint.protocol.pipeline import PipelineSpec
from batchpoint.protocol.ports import AbortAtTrigger, Clock
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.protocol.topology import Topology


@dataclass(frozen=True)
class DeployBase:
    """The base checkpoint the admission chose, as the deploy check judges the code
    against it, read here so that the check (a policy of the runtime's) reads nothing
    of the protocol's: completed, still pending (what its trigger recorded), neither
    (none, or it aborted), or a record that cannot be read."""

    checkpoint_id: int | None  # None: the first checkpoint, or a restore to nothing
    completed: CompletedCheckpoint | None = None
    pending_topology: Topology | None = None
    pending_barrier: Mapping[str, Any] | None = None  # what a pending base reads up to
    unreadable: str | None = None  # why the base's outcome record cannot be read


#: Judges the code against the admitted base: the problems that refuse the deploy,
#: none when it may run.
CheckBase = Callable[[DeployBase], list[str]]

#: Where each source stands now. A checkpoint's barrier must not be behind its base's,
#: and offsets are the sources' own, so the trigger orders captures in time instead of
#: comparing them: it captures after the base's record was read (that base captured
#: before it was admitted), and again when the admission chose another base.
CaptureBarrier = Callable[[], Mapping[str, Any]]


#: Ids a trigger takes past a counter that is behind before it gives up: one skip
#: moves the counter past every id used, so a second round is for a racing writer.
_BEHIND_ROUNDS = 3


@define(kw_only=True, slots=False, eq=False)
class CheckpointTrigger:
    _records: CheckpointRecords
    _control: ControlStore
    _ids: CheckpointIDCounter
    _decider: CheckpointRequestDecider
    _failures: CheckpointFailureManager
    _config: CheckpointConfig
    _clock: Clock
    _abort: AbortAtTrigger

    @property
    def _pipeline(self) -> str:
        return self._records.pipeline

    def trigger(
        self,
        spec: PipelineSpec,
        barrier: Mapping[str, Any] | CaptureBarrier,
        *,
        checkpoint_type: CheckpointType,
        properties: CheckpointProperties | None,
        timeout: float | None,
        topology: Topology | None = None,
        check_base: CheckBase | None = None,
    ) -> PendingCheckpoint:
        """Admit a checkpoint of `spec`'s tasks reading up to `barrier` and write its
        pending record (recording `topology`), or raise TriggerRefused with the reason.
        A `barrier` given as a capture is taken in time order with the base's
        (`CaptureBarrier`); a fixed one is the caller's to order.

        `check_base` judges the deploy against the base the admission chose (not the
        head read before it, which a concurrent restore may have moved): it returns
        the problems that refuse it, and then the admitted checkpoint is aborted
        (INCOMPATIBLE_DEPLOY, each problem named) before any pending record exists."""
        given = properties if properties is not None else CheckpointProperties()
        now = self._clock()
        self._refuse_if_failed()
        control = self._control_for_trigger()
        history = self._ids.peek() > 1
        capture = barrier if callable(barrier) else lambda: barrier
        planned, captured = self._check_first(
            control, spec, capture, checkpoint_type, now, has_history=history
        )
        if control is None:
            self._create_control()
        deadline = now + (timeout if timeout is not None else self._config.timeout)
        checkpoint_id, admitted, entry = self._admit(
            checkpoint_type, given, deadline, now, has_history=history
        )
        base = self._checked_base(checkpoint_id, entry.base, check_base, now)
        if entry.base != planned:  # a concurrent trigger's checkpoint, maybe ahead of ours
            captured = self._recaptured(checkpoint_id, capture, now)
        props = self._properties(given, admitted, entry.base)
        pending = PendingCheckpoint(
            pipeline=self._pipeline,
            checkpoint_id=checkpoint_id,
            type=checkpoint_type,
            base_checkpoint_id=entry.base,
            restore_generation=entry.restore_generation,
            barrier=dict(captured),
            base_barrier=dict(base.barrier) if base else {},
            expected_tasks=spec.expected_tasks(),
            trigger_time=now,
            deadline=deadline,
            properties=props,
            topology=topology,
        )
        self._records.create_pending(pending)
        return pending

    def _checked_base(
        self, checkpoint_id: int, base_id: int | None, check_base: CheckBase | None, now: float
    ) -> PendingCheckpoint | None:
        """The admitted checkpoint's base, and the deploy judged against it: an
        unreadable base or a refused deploy aborts the admitted checkpoint (triggered
        `now`, which its outcome records: no pending record will)."""
        try:
            base = self._read_base(base_id) if base_id is not None else None
        except TriggerRefused:
            why = "base unreadable"
            self._abort(checkpoint_id, CheckpointFailureReason.NEEDS_REPAIR, why, now)
            raise
        if check_base is not None:
            self._check_deploy(checkpoint_id, base_id, check_base, now)
        return base

    def _recaptured(
        self, checkpoint_id: int, capture: CaptureBarrier, now: float
    ) -> Mapping[str, Any]:
        try:
            return capture()
        except Exception as exc:
            why = f"the sources' barrier could not be captured: {exc}"
            self._abort(checkpoint_id, CheckpointFailureReason.TRIGGER_FAILED, why, now)
            raise

    def _properties(
        self, given: CheckpointProperties, admitted: ControlRecord, base_id: int | None
    ) -> CheckpointProperties:
        props = given
        if given.changelog_chain is None:
            props = replace(props, changelog_chain=self._config.changelog_chain)
        # Fixed only when on: a record without it plans as every record before it did.
        if given.changelog_min_bytes is None and self._config.changelog_min_bytes:
            props = replace(props, changelog_min_bytes=self._config.changelog_min_bytes)
        if (why := held_elsewhere(admitted, base_id)) is not None:
            props = replace(props, independent_of_base=why)
        return props

    def admit_import(self, now: float) -> PendingEntry:
        """Admit a savepoint import like a savepoint trigger (one CAS), with no base
        (the imported state is self-contained) and marked imported: no trigger builds
        on it, only a restore makes it the head. Raises ControlUnreadable."""
        history = self._ids.peek() > 1
        if not history:
            self._create_control()
        deadline = now + self._config.timeout

        def admit(current: ControlRecord | None, checkpoint_id: int) -> ControlRecord:
            return self._decider.admit(
                current,
                checkpoint_id,
                CheckpointType.SAVEPOINT,
                deadline,
                now,
                has_history=history,
                self_contained=True,
            )

        checkpoint_id, admitted = self._admit_new_id(admit)
        entry = admitted.pending_entry(checkpoint_id)
        assert entry is not None
        return entry

    def deploy_base(self, base: int | None) -> DeployBase:
        if not base:
            return DeployBase(None)
        try:
            outcome = self._records.get_outcome(base)
        except RecordError as exc:
            return DeployBase(base, unreadable=str(exc))
        if outcome is not None and outcome.status is CheckpointStatus.COMPLETED:
            return DeployBase(base, completed=outcome.completed)
        pending = self._records.get_pending(base)
        if pending is None:
            return DeployBase(base)
        return DeployBase(base, pending_topology=pending.topology, pending_barrier=pending.barrier)

    def _check_deploy(
        self, checkpoint_id: int, base: int | None, check: CheckBase, now: float
    ) -> None:
        try:
            problems = check(self.deploy_base(base))
        except Exception:
            why = "deploy check failed"
            self._abort(checkpoint_id, CheckpointFailureReason.NEEDS_REPAIR, why, now)
            raise
        if problems:
            reason = CheckpointFailureReason.INCOMPATIBLE_DEPLOY
            message = "; ".join(problems)
            self._abort(checkpoint_id, reason, message, now)
            raise TriggerRefused(
                reason,
                f"pipeline '{self._pipeline}': the code cannot be deployed on base checkpoint "
                f"{base}: {message}",
            )

    def _check_first(
        self,
        control: ControlRecord | None,
        spec: PipelineSpec,
        capture: CaptureBarrier,
        checkpoint_type: CheckpointType,
        now: float,
        *,
        has_history: bool,
    ) -> tuple[int | None, Mapping[str, Any]]:
        """A cheap first check, so an obvious refusal does not even consume an id: the
        base it plans on and the barrier, captured after that base's record was read."""
        checked = self._decider.check(control, checkpoint_type, now, has_history=has_history)
        if (planned := base_of(checked)) is None:
            return None, capture()
        base = self._read_base(planned)
        barrier = capture()
        self._decider.check_idle(
            checkpoint_type,
            base,
            barrier,
            spec.expected_tasks(),
            base_held_elsewhere=held_elsewhere(checked, planned) is not None,
        )
        return planned, barrier

    def _admit(
        self,
        checkpoint_type: CheckpointType,
        given: CheckpointProperties,
        deadline: float,
        now: float,
        *,
        has_history: bool,
    ) -> tuple[int, ControlRecord, PendingEntry]:
        # A stop-with-savepoint stops in this same CAS (protocol/stopping.py).
        stop = checkpoint_type is CheckpointType.SAVEPOINT and bool(given.stop_pipeline)
        run_id = given.scheduler_run_id

        def admit(current: ControlRecord | None, checkpoint_id: int) -> ControlRecord:
            return self._decider.admit(
                current,
                checkpoint_id,
                checkpoint_type,
                deadline,
                now,
                has_history=has_history,
                stop=stop,
                run_id=run_id,
            )

        try:
            checkpoint_id, admitted = self._admit_new_id(admit)
        except ControlUnreadable as exc:
            raise TriggerRefused(CheckpointFailureReason.NEEDS_REPAIR, str(exc)) from None
        entry = admitted.pending_entry(checkpoint_id)
        assert entry is not None
        return checkpoint_id, admitted, entry

    def _admit_new_id(
        self, admit: Callable[[ControlRecord | None, int], ControlRecord]
    ) -> tuple[int, ControlRecord]:
        """Take an id and admit it in one CAS. A counter that is behind (restored from an
        older copy of the store) hands out an id the record names, or one a settled id
        passed (`decider.admissible`): the CAS refuses it, the counter moves past every
        id used, and the next one is taken."""
        for _ in range(_BEHIND_ROUNDS):
            checkpoint_id = self._ids.get_and_increment()
            try:
                admitted, _ = self._control.update(partial(admit, checkpoint_id=checkpoint_id))
            except IdAlreadyUsed as used:
                self._ids.skip_past(used.newest)
                continue
            assert admitted is not None
            return checkpoint_id, admitted
        raise TriggerRefused(
            CheckpointFailureReason.NEEDS_REPAIR,
            f"pipeline '{self._pipeline}': the checkpoint id counter keeps handing out ids "
            f"already used; {COUNTER_HINT}",
        )

    def _refuse_if_failed(self) -> None:
        state = self._failures.state()
        if state.status is PipelineStatus.FAILED:
            raise TriggerRefused(
                CheckpointFailureReason.PIPELINE_FAILED,
                f"pipeline '{self._pipeline}' is FAILED and takes no checkpoints: "
                f"{state.reason}. Reset it (batchpoint reset) or restore a checkpoint.",
            )

    def _create_control(self) -> None:
        """An empty control record before the first id is taken: an admission that
        fails after it (a storage error, a killed process) then leaves an id used and a
        record, never the "checkpoints taken, record gone" that only a repair lifts."""
        self._control.update(lambda current: ControlRecord() if current is None else None)

    def _control_for_trigger(self) -> ControlRecord | None:
        try:
            found = self._control.read()
        except ControlUnreadable as exc:
            raise TriggerRefused(CheckpointFailureReason.NEEDS_REPAIR, str(exc)) from None
        return found[0] if found else None

    def _read_base(self, checkpoint_id: int) -> PendingCheckpoint:
        """The trigger record of a new checkpoint's base (its barrier is where the new
        epoch starts): damage refuses the trigger, naming the record."""
        try:
            outcome = self._records.get_outcome(checkpoint_id)
            pending = outcome.pending if outcome else self._records.get_pending(checkpoint_id)
        except RecordError as exc:
            raise TriggerRefused(
                CheckpointFailureReason.NEEDS_REPAIR,
                f"pipeline '{self._pipeline}': the record of base checkpoint {checkpoint_id} "
                f"is unreadable ({exc}); restore another checkpoint or run `batchpoint repair`",
            ) from None
        if pending is None:
            raise TriggerRefused(
                CheckpointFailureReason.TOO_MANY_CONCURRENT,
                f"pipeline '{self._pipeline}': base checkpoint {checkpoint_id} was admitted by "
                "a concurrent trigger that has not written its record yet; retry",
            )
        return pending


def held_elsewhere(control: ControlRecord, base: int | None) -> str | None:
    """Why a checkpoint on `base` must not share its files, or None: a base that this
    pipeline's retention will never subsume (a savepoint, a checkpoint kept forever, not
    claimed by a restore) belongs to whoever holds it, and Flink's NO_CLAIM makes the
    first checkpoint after it independent of its files."""
    if base is None:
        return None
    entry = next((e for e in control.retained if e.checkpoint_id == base), None)
    if entry is None:
        return f"the base, checkpoint {base}, is not retained"
    if entry.subsumable:
        return None
    kind = "savepoint" if entry.type is CheckpointType.SAVEPOINT else "checkpoint retained forever"
    return f"the base, checkpoint {base}, is a {kind} not claimed by this pipeline's retention"
