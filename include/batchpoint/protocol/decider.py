"""Flink's CheckpointRequestDecider: whether a trigger may start a checkpoint, decided
inside the one conditional write that admits it (so two racing triggers can never both
pass `max_concurrent`), and which checkpoint it builds on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from batchpoint.errors import TriggerRefused
from batchpoint.protocol import stopping
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointType,
    PendingCheckpoint,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.control import ControlRecord, PendingEntry
from batchpoint.protocol.ids import IdAlreadyUsed
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.records import to_iso


class CheckpointRequestDecider:
    def __init__(self, pipeline: str, config: CheckpointConfig, control_key: str) -> None:
        self._pipeline = pipeline
        self._config = config
        self._key = control_key

    def check(
        self,
        control: ControlRecord | None,
        checkpoint_type: CheckpointType,
        now: float,
        *,
        has_history: bool,
        self_contained: bool = False,
    ) -> ControlRecord:
        """Refuse (TriggerRefused) or return the record to admit into. A stopped or
        stopping pipeline refuses every trigger but a savepoint import
        (`self_contained`): a stopped pipeline may import the savepoint it restores."""
        if control is None:
            if has_history:
                raise TriggerRefused(
                    CheckpointFailureReason.NEEDS_REPAIR, control_lost(self._pipeline, self._key)
                )
            control = ControlRecord()
        if control.restore is not None and not control.restore.sinks_rewound:
            raise TriggerRefused(
                CheckpointFailureReason.RESTORED,
                f"pipeline '{self._pipeline}': the restore to checkpoint "
                f"{control.restore.target} has not finished rewinding its sinks",
            )
        if not self_contained and (stop := stopping.refusal(control, self._pipeline)):
            raise stop
        if control.cascade is not None:
            fence = control.cascade
            raise TriggerRefused(
                CheckpointFailureReason.CASCADE,
                f"pipeline '{self._pipeline}' waits for cascade {fence.cascade}, which "
                f"follows the restore of '{fence.root}' (started {to_iso(fence.at)}); "
                f"`batchpoint restore --pipeline {fence.root} --cascade` finishes it if it "
                "was cut short",
            )
        if checkpoint_type is CheckpointType.CHECKPOINT:
            self._check_periodic(control, now)
        return control

    def admit(
        self,
        control: ControlRecord | None,
        checkpoint_id: int,
        checkpoint_type: CheckpointType,
        deadline: float,
        now: float,
        *,
        has_history: bool,
        self_contained: bool = False,
        stop: bool = False,
        run_id: str | None = None,
    ) -> ControlRecord:
        """The mutation of the admission CAS: the control record with the new pending
        entry, whose base is `base_of` the record; none when `self_contained` (a
        savepoint import brings all of its state, and its entry is marked `imported`:
        never a base). A savepoint with `stop` records the stop and abandons the
        periodic checkpoints pending (protocol/stopping.py). The entry names the
        scheduler run that asked for it (`run_id`). An id the record already names,
        or one below the newest settled id it names, is never admitted (IdAlreadyUsed:
        the counter is behind; `admissible`)."""
        control = self.check(
            control, checkpoint_type, now, has_history=has_history, self_contained=self_contained
        )
        if not admissible(control, checkpoint_id):
            raise IdAlreadyUsed(checkpoint_id, max(control.known_ids()))
        if stop and checkpoint_type is CheckpointType.SAVEPOINT:
            control = stopping.admit_stop(control, checkpoint_id, now)
        base = None if self_contained else base_of(control)
        entry = PendingEntry(
            checkpoint_id,
            checkpoint_type,
            base,
            control.restore_generation,
            deadline,
            imported=self_contained,
            run_id=run_id,
        )
        return replace(control, pending=(*control.pending, entry))

    def check_idle(
        self,
        checkpoint_type: CheckpointType,
        base: PendingCheckpoint | None,
        barrier: Mapping[str, Any],
        expected_tasks: Sequence[TaskId],
        *,
        base_held_elsewhere: bool,
    ) -> None:
        """With `skip_idle`, refuse a periodic checkpoint that would read nothing new: its
        barrier is its base's and it runs the same tasks. Skipping is always safe (the
        next trigger with input reads everything past the base), so this is checked
        outside the admission CAS. A rescale or a new operator still runs, and so does
        the first checkpoint after a base held elsewhere: NO_CLAIM promises that one
        checkpoint makes the pipeline independent of the restored files."""
        if not self._config.skip_idle or checkpoint_type is not CheckpointType.CHECKPOINT:
            return
        if base is None or base_held_elsewhere:
            return
        if tuple(base.expected_tasks) != tuple(expected_tasks):
            return
        if dict(base.barrier) != dict(barrier):
            return
        raise TriggerRefused(
            CheckpointFailureReason.NO_NEW_INPUT,
            f"pipeline '{self._pipeline}': no source has new input since checkpoint "
            f"{base.checkpoint_id}, so this epoch would change nothing (idle epochs are "
            "skipped; BATCHPOINT_SKIP_IDLE_EPOCHS=false runs them anyway)",
        )

    def _check_periodic(self, control: ControlRecord, now: float) -> None:
        running = [p for p in control.current_pending() if p.type is CheckpointType.CHECKPOINT]
        if len(running) >= self._config.max_concurrent:
            ids = ", ".join(str(p.checkpoint_id) for p in running)
            raise TriggerRefused(
                CheckpointFailureReason.TOO_MANY_CONCURRENT,
                f"pipeline '{self._pipeline}': {len(running)} checkpoint(s) pending ({ids}); "
                f"max_concurrent is {self._config.max_concurrent}",
            )
        if self._config.min_pause > 0 and control.head is not None:
            head = control.retained_entry(control.head)
            if head is not None:
                waited = now - head.completed_at
                if waited < self._config.min_pause:
                    raise TriggerRefused(
                        CheckpointFailureReason.MINIMUM_PAUSE,
                        f"pipeline '{self._pipeline}': checkpoint {control.head} completed "
                        f"{waited:.1f}s ago; min_pause is {self._config.min_pause:g}s "
                        f"(retry in {self._config.min_pause - waited:.1f}s)",
                    )


def admissible(control: ControlRecord, checkpoint_id: int) -> bool:
    """Whether `checkpoint_id` may be admitted (invariant 5: ids are never reused). Not
    if the record names it. Nor if it is lower than the newest settled id the record
    names (retained, the head, collected): GC prunes collected ids out of the record but
    keeps the newest one ever used, so without this a counter put back from an older
    copy of the store would hand out an id pruned from it. Pending ids do not count:
    racing triggers admit theirs out of order (the lower id may come second). Once a
    higher id settled, a trigger still holding a lower one is refused as a stale counter
    is, and takes a higher id (`trigger._admit_new_id` moves the counter past the
    newest): it loses only the id it allocated."""
    if checkpoint_id in control.known_ids():
        return False
    settled = [*control.retained_ids(), *control.collected]
    settled += [control.head] if control.head is not None else []
    return checkpoint_id > max(settled, default=0)


def base_of(control: ControlRecord) -> int | None:
    """The newest admitted checkpoint of the current timeline (concurrent checkpoints
    chain), else the head. Never an import: a savepoint folder being imported does not
    continue the timeline (completed, it is retained beside it), and only a restore
    makes it the head, and so a base."""
    head = control.head or 0
    newer = [p for p in control.current_pending() if p.checkpoint_id > head and not p.imported]
    return newer[-1].checkpoint_id if newer else control.head


def control_lost(pipeline: str, key: str) -> str:
    """Checkpoints were taken and the control record is gone: read as it stands, the
    history would say nothing is stored (invariant 11: never a restart from empty)."""
    return (
        f"pipeline '{pipeline}' has checkpoints but no control record ({key}); run "
        "`batchpoint repair` (or restore a checkpoint) instead of restarting from empty state"
    )
