"""Nothing to do costs nothing: an operator whose inputs hold no rows this epoch, whose
function leaves every state as it was and outputs no rows, acknowledges by reference.
Each state is its base's files as they are (shared, as a changelog shares them, with no
new layer), and each channel is every subtask's empty files, written by the driver: no
Spark job runs. Spark's optimizer is the judge (spark/plan_facts.py): an input known
empty is an empty plan (a source with no new file, a channel whose handles hold no
rows), and the function's plans over it must reduce to the old state and to nothing.
Whatever it cannot prove runs as usual: a state due a full snapshot (no base, a
savepoint, a rescale, a new schema, compaction), a function that re-aggregates its
state. Over Connect the server is asked the same (spark/plan_facts.py): an empty input
is proven alike, an unchanged state only when returned as it came.

A sink with nothing new (its inputs hold no rows, and its function, if any, stages
none) stages every subtask's empty files the same way: its publication adds no rows
(an append sink's chain gains an empty epoch; a table sink's commit adds no data file
and carries the checkpoint id, which the table's position is read from)."""

from __future__ import annotations

from batchpoint.runtime.api import OperatorDef, SinkDef
from batchpoint.runtime.incremental import SnapshotPlan
from batchpoint.runtime.streams import StreamWrite
from batchpoint.runtime.task_attempt import TaskAttempt
from batchpoint.runtime.task_process import Processed
from batchpoint.runtime.task_restore import Restored
from batchpoint.runtime.task_writes import Handles, write_nothing


def idle_handles(
    attempt: TaskAttempt,
    processed: Processed,
    restored: Restored,
    plans: dict[str, SnapshotPlan],
    channels: list[StreamWrite],
) -> Handles | None:
    """The epoch's files by reference (states: the caller adds each plan's shared files)
    and empty channels; None when the operator has something to do."""
    from batchpoint.spark.plan_facts import provably_empty, same_rows

    node = attempt.node
    assert isinstance(node, OperatorDef)
    if any(plan.full for plan in plans.values()):
        return None
    if not all(provably_empty(frame) for frame in restored.inputs.values()):
        return None
    ctx = processed.ctx
    if not all(same_rows(ctx.new_state(s), restored.states[s]) for s in node.states):
        return None
    if channels and (processed.output is None or not provably_empty(processed.output)):
        return None
    handles = write_nothing(attempt, channels)
    attempt.log(
        f"snapshot: nothing to do: no input rows, every state as in checkpoint "
        f"{attempt.checkpoint.base_checkpoint_id} (shared), no output rows (no Spark job)"
    )
    return handles


def idle_sink_handles(
    attempt: TaskAttempt, processed: Processed, restored: Restored, sink: StreamWrite
) -> Handles | None:
    """A sink's empty staged files when its inputs and what it stages provably hold no
    rows; None when it has something to stage."""
    from batchpoint.spark.plan_facts import provably_empty

    node = attempt.node
    assert isinstance(node, SinkDef)
    inputs = list(restored.inputs.values())
    if not inputs or not all(provably_empty(frame) for frame in inputs):
        return None
    if processed.output is None or not provably_empty(processed.output):
        return None
    handles = write_nothing(attempt, [sink])
    attempt.log(
        "snapshot: nothing new: no input rows, nothing staged (empty files written by the "
        "driver, no Spark job)"
    )
    return handles
