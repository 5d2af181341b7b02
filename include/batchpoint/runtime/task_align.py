"""Align: an attempt starts once every upstream task of the same epoch acknowledged and
its base checkpoint completed (the base's state is what the epoch starts from). The
batch form of Flink's barrier alignment: nothing is read before all of it is there."""

from __future__ import annotations

import time

from batchpoint.errors import CheckpointError
from batchpoint.protocol.checkpoint import CheckpointStatus, CompletedCheckpoint, PendingCheckpoint
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.runtime.task_attempt import AttemptInterrupted, TaskAttempt


def align(attempt: TaskAttempt) -> CompletedCheckpoint | None:
    """Block until the upstream tasks acked and the base completed; returns the base
    (None: the epoch has none). Raises CheckpointError when the checkpoint is settled
    or declined meanwhile, or the wait passes the environment's align_timeout."""
    env, pending = attempt.env, attempt.checkpoint
    cid = pending.checkpoint_id
    upstream_ops = {i for i in attempt.node.inputs if i in env.pipeline.operators}
    deadline = time.monotonic() + env.align_timeout
    announced = False
    while True:
        progress = env.coordinator.progress(cid)
        if progress.status is not CheckpointStatus.PENDING:
            reason = progress.outcome.message if progress.outcome else "gone"
            raise CheckpointError(f"checkpoint {cid} was settled while aligning: {reason}")
        if progress.declines:
            d = progress.declines[0]
            raise CheckpointError(f"checkpoint {cid} was declined by {d.task}: {d.reason}")
        waiting = [t for t in progress.missing if t.operator in upstream_ops]
        base = base_state(env.coordinator, pending)
        if not waiting and base is not False:
            return base  # type: ignore[return-value]
        names = ", ".join(map(str, waiting))
        if time.monotonic() > deadline:
            what = names or f"base checkpoint {pending.base_checkpoint_id}"
            raise CheckpointError(f"alignment timed out waiting for {what}")
        if not announced:
            attempt.log(f"aligning: waiting for {names or 'the base checkpoint'}")
            announced = True
        if env.interrupted.wait(env.poll_interval):
            raise AttemptInterrupted(f"checkpoint {cid}: interrupted while aligning")


def base_state(
    coordinator: PipelineHistory, pending: PendingCheckpoint
) -> CompletedCheckpoint | bool | None:
    """The base checkpoint's metadata; None with no base; False while it is pending."""
    if pending.base_checkpoint_id is None:
        return None
    outcome = coordinator.get_outcome(pending.base_checkpoint_id)
    if outcome is None:
        return False
    if outcome.completed is None:
        raise CheckpointError(
            f"base checkpoint {pending.base_checkpoint_id} was aborted: {outcome.message}"
        )
    return outcome.completed
