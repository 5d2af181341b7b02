"""Stop-with-savepoint as pure rules over the control record (Flink's
`stopWithSavepoint`): the stop is decided in the savepoint's admission CAS and takes
effect in its settle CAS, so no timing decides what is inside the stop and what is not.

- **Admission** (`admit_stop`): the record gains `stopping = {savepoint, abandoned}`;
  every periodic checkpoint pending on the current timeline is abandoned (out of
  `pending` into `discarded`, as a restore does, without a new generation), with every
  pending checkpoint that builds on one of them (admitted checkpoints chain, so that is
  every one admitted after the first periodic one). The savepoint builds on what is
  left: the newest remaining pending savepoint, else the head. Its state therefore
  includes the input of every abandoned checkpoint.
- **While stopping or stopped** every trigger is refused (`refusal`, reason STOPPED);
  a savepoint import is not (importing is how a stopped pipeline gets a savepoint to
  restore).
- **An abandoned checkpoint never completes after the stop**: it is not pending any
  more, so its finalizer aborts it (`abandoned`), its settle changes nothing, and the
  publish rule never takes a same-generation checkpoint that is neither pending,
  retained nor an ancestor of the head. The savepoint's finalize gives each abandoned
  checkpoint an outcome (abort, create-once) before writing its own COMPLETED: one that
  won that race with COMPLETED completed before the stop (it is still never retained).
- **Settle** (`settle_stop`, inside `completed_store.settle_outcome`): a COMPLETED stop
  savepoint sets `stopped = {savepoint, at}` and clears `stopping`; an ABORTED one
  clears `stopping` only.
- **Resume** (`resumed`) and every restore clear both.
"""

from __future__ import annotations

from dataclasses import replace

from batchpoint.errors import CheckpointError, TriggerRefused
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointType,
    PendingCheckpoint,
)
from batchpoint.protocol.control import ControlRecord, PendingEntry, StopInFlight, Stopped
from batchpoint.protocol.records import to_iso


class NotStopped(CheckpointError):
    """`batchpoint resume` of a pipeline that is not stopped."""


def refusal(control: ControlRecord, pipeline: str) -> TriggerRefused | None:
    """Why a trigger must not start while the pipeline stops or is stopped, or None."""
    if control.stopped is not None:
        s = control.stopped
        return TriggerRefused(
            CheckpointFailureReason.STOPPED,
            f"pipeline '{pipeline}' stopped with savepoint {s.savepoint} at {to_iso(s.at)}; "
            "run `batchpoint resume` or restore a checkpoint to take checkpoints again",
        )
    if control.stopping is not None:
        return TriggerRefused(
            CheckpointFailureReason.STOPPED,
            f"pipeline '{pipeline}' is stopping: savepoint {control.stopping.savepoint} "
            "(stop-with-savepoint) is in progress; no checkpoint starts after it",
        )
    return None


def to_abandon(control: ControlRecord) -> list[PendingEntry]:
    """The pending checkpoints a stop abandons: every periodic one of the current
    timeline and every one that builds on an abandoned one."""
    abandoned: list[PendingEntry] = []
    ids: set[int] = set()
    for p in control.current_pending():
        if p.type is CheckpointType.CHECKPOINT or p.base in ids:
            abandoned.append(p)
            ids.add(p.checkpoint_id)
    return abandoned


def kept_stop(
    current: ControlRecord | None,
    open_checkpoints: list[PendingCheckpoint],
    pending: tuple[PendingEntry, ...],
) -> tuple[StopInFlight | None, tuple[PendingEntry, ...]]:
    """A repair's: a stop in flight stays so while its savepoint stays pending (a repair
    with no head abandons nothing), or the savepoint completes without stopping the
    pipeline. A lost or damaged record's is read from the savepoint's record, with what
    it abandoned by `to_abandon`'s rule, taken out of `pending`."""
    waiting = {p.checkpoint_id for p in pending}
    if current is not None:
        stop = current.stopping
        return (stop if stop is not None and stop.savepoint in waiting else None), pending
    stops = [
        p for p in open_checkpoints if p.properties.stop_pipeline and p.checkpoint_id in waiting
    ]
    if not stops:
        return None, pending
    ours = stops[-1]
    earlier = tuple(p for p in pending if p.checkpoint_id < ours.checkpoint_id)
    at_stop = ControlRecord(restore_generation=ours.restore_generation, pending=earlier)
    gone = [p.checkpoint_id for p in to_abandon(at_stop)]
    stop = StopInFlight(ours.checkpoint_id, ours.trigger_time, tuple(gone))
    return stop, tuple(p for p in pending if p.checkpoint_id not in gone)


def admit_stop(control: ControlRecord, savepoint: int, now: float) -> ControlRecord:
    """The control record with the stop recorded and the periodic checkpoints
    abandoned (not yet the savepoint's own entry: its base is `base_of` the result)."""
    gone = [p.checkpoint_id for p in to_abandon(control)]
    kept = tuple(p for p in control.pending if p.checkpoint_id not in gone)
    stopping = StopInFlight(savepoint, now, tuple(gone))
    return replace(control, pending=kept, stopping=stopping).with_discarded(gone, now)


def abandoned(control: ControlRecord, checkpoint_id: int) -> str | None:
    """Why a checkpoint of the current generation must not complete because a stop
    abandoned it (it left `pending` for `discarded` without an outcome), or None."""
    if control.pending_entry(checkpoint_id) is not None:
        return None
    if not control.is_discarded(checkpoint_id) and checkpoint_id not in control.collected:
        return None
    by = control.stopping or control.stopped
    who = f"stop-with-savepoint {by.savepoint}" if by is not None else "a stop-with-savepoint"
    return f"{who} abandoned it after it was triggered"


def settle_stop(
    record: ControlRecord, checkpoint_id: int, completed_at: float | None
) -> ControlRecord:
    """The stop's part of the settle CAS of checkpoint `checkpoint_id`: a completed stop
    savepoint stops the pipeline, an aborted one only ends the stopping."""
    if record.stopping is None or record.stopping.savepoint != checkpoint_id:
        return record
    stopped = record.stopped if completed_at is None else Stopped(checkpoint_id, completed_at)
    return replace(record, stopping=None, stopped=stopped)


def resumed(control: ControlRecord | None, pipeline: str) -> ControlRecord:
    """`batchpoint resume`: the record without `stopped`. Refused (NotStopped) when the
    pipeline is not stopped, or while its stop is still in flight."""
    if control is not None and control.stopping is not None:
        raise NotStopped(
            f"pipeline '{pipeline}' is still stopping (savepoint "
            f"{control.stopping.savepoint} has not settled); resume once it has"
        )
    if control is None or control.stopped is None:
        raise NotStopped(f"pipeline '{pipeline}' is not stopped: nothing to resume")
    return replace(control, stopped=None)


def cleared(control: ControlRecord) -> ControlRecord:
    """A restore's part: a restore starts the pipeline again from its target."""
    return replace(control, stopping=None, stopped=None)
