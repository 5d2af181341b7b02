"""Snapshot: what an attempt writes, per subtask, from executors (Flink's snapshotState).
An operator writes each state (in full, or as a changelog on its base's files) and its
output once per group of consumers that key it alike; a sink stages its output, or, with
no function and one input already keyed for it, acknowledges that input's files by
reference (no Spark job), or, with nothing new to stage, every subtask's empty files
written by the driver (no Spark job: task_idle). The writes themselves run in task_writes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from batchpoint.errors import CheckpointError
from batchpoint.runtime.adopted_channels import adopt_channel
from batchpoint.runtime.api import OperatorContext, OperatorDef, SinkDef
from batchpoint.runtime.incremental import (
    SnapshotPlan,
    mark_churn,
    plan_state_snapshot,
    state_write,
)
from batchpoint.runtime.streams import SINK_STREAM, StreamWrite, channel_stream, state_stream
from batchpoint.runtime.task_attempt import TaskAttempt
from batchpoint.runtime.task_process import Processed
from batchpoint.runtime.task_restore import Channels, Restored
from batchpoint.runtime.task_writes import Handles, run_writes

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def adopted_sink(attempt: TaskAttempt, channels: Channels, aligned: float) -> Handles | None:
    """A sink with no function and one input (not a table: a table's data files hold the
    user's columns only) stages that input's files as they are, when each lies inside
    one of its subtasks' key groups; None when it must write its own."""
    node = attempt.node
    if not isinstance(node, SinkDef) or node.fn is not None or len(node.inputs) != 1:
        return None
    if node.table is not None:
        return None
    files = channels[node.inputs[0]]
    adopted = adopt_channel(files, SINK_STREAM, node.max_parallelism, attempt.parallelism)
    if adopted is None:
        return None
    attempt.report.timed_async(attempt.report.timed_sync(aligned))
    attempt.log(
        f"snapshot: sink staged by reference: {len(files)} file(s) of "
        f"{node.inputs[0]}'s channel, already keyed for it (no Spark job)"
    )
    return adopted


def snapshot(
    attempt: TaskAttempt, processed: Processed, restored: Restored, aligned: float
) -> Handles:
    """Write what `processed` holds; the files per subtask, in the streams' order."""
    node = attempt.node
    if isinstance(node, SinkDef):
        sink = StreamWrite(
            processed.output, SINK_STREAM, node.key_columns, node.max_parallelism,
            plain=node.table is not None,
        )  # fmt: skip
        idle = _idle_sink(attempt, processed, restored, sink, aligned)
        return idle if idle is not None else _timed_writes(attempt, [sink], aligned)
    assert isinstance(node, OperatorDef)
    plans = snapshot_plans(attempt, processed.ctx, restored)
    writes = operator_writes(attempt, processed.ctx, processed.output, plans)
    handles = _idle(attempt, processed, restored, plans, writes, aligned)
    if handles is None:
        cached = _cache(node, processed, writes)
        try:
            handles = _timed_writes(attempt, writes, aligned)
        finally:
            cached.release()
    for state, plan in plans.items():
        attempt.log(f"snapshot: state '{state}': {plan.why}")
        mark_churn(handles, state_stream(node.state_uid(state)), plan)
        for subtask, shared in plan.shared_by_subtask().items():
            handles[subtask].extend(shared)
    return handles


def snapshot_plans(
    attempt: TaskAttempt, ctx: OperatorContext, restored: Restored
) -> dict[str, SnapshotPlan]:
    """For each state: a full snapshot or a changelog on the base's files."""
    node = attempt.node
    assert isinstance(node, OperatorDef)
    chain = attempt.env.coordinator.config.changelog_chain
    return {
        state: plan_state_snapshot(
            attempt.checkpoint, restored.base_files[state], ctx.new_state(state), node, state,
            attempt.parallelism, chain, restored.rewrites.get(state),
        )
        for state in node.states
    }  # fmt: skip


def operator_writes(
    attempt: TaskAttempt,
    ctx: OperatorContext,
    output: DataFrame | None,
    plans: dict[str, SnapshotPlan],
) -> list[StreamWrite]:
    """What an operator writes: each state (in full or its changelog), then its output
    once per group of consumers that key it alike (key columns and max parallelism; the
    files are split by this operator's subtasks): they read one channel, written once."""
    node = attempt.node
    assert isinstance(node, OperatorDef)
    writes = [
        # a state's files are named by its uid: what later checkpoints find it by
        state_write(ctx, node, s, state_stream(node.state_uid(s)), plans[s])
        for s in node.states
    ]
    pipeline = attempt.env.pipeline
    consumers = [
        c for c in (*pipeline.operators.values(), *pipeline.sinks.values()) if node.name in c.inputs
    ]
    if not consumers:
        return writes
    if output is None:
        raise CheckpointError(
            f"operator '{node.name}' returned no output but feeds "
            f"{', '.join(c.name for c in consumers)}"
        )
    alike: dict[tuple[tuple[str, ...], int], list[str]] = {}
    for c in consumers:
        alike.setdefault((c.key_columns, c.max_parallelism), []).append(c.name)
    writes += [
        StreamWrite(output, channel_stream(names[0]), key, max_par, tuple(names))
        for (key, max_par), names in alike.items()
    ]
    return writes


def _idle(
    attempt: TaskAttempt,
    processed: Processed,
    restored: Restored,
    plans: dict[str, SnapshotPlan],
    writes: list[StreamWrite],
    aligned: float,
) -> Handles | None:
    """The epoch by reference when the operator has nothing to do (task_idle)."""
    from batchpoint.runtime.task_idle import idle_handles

    writing = attempt.report.timed_sync(aligned)
    channels = [w for w in writes if w.layer == 0 and w.stream.startswith("channel-")]
    handles = idle_handles(attempt, processed, restored, plans, channels)
    if handles is not None:
        attempt.report.timed_async(writing)
    return handles


def _idle_sink(
    attempt: TaskAttempt,
    processed: Processed,
    restored: Restored,
    sink: StreamWrite,
    aligned: float,
) -> Handles | None:
    """A sink's epoch with nothing new to stage (task_idle)."""
    from batchpoint.runtime.task_idle import idle_sink_handles

    writing = attempt.report.timed_sync(aligned)
    handles = idle_sink_handles(attempt, processed, restored, sink)
    if handles is not None:
        attempt.report.timed_async(writing)
    return handles


def _timed_writes(attempt: TaskAttempt, writes: list[StreamWrite], aligned: float) -> Handles:
    """The writes, the sync part of the snapshot ending when they start."""
    writing = attempt.report.timed_sync(aligned)
    handles = run_writes(attempt, writes)
    attempt.report.timed_async(writing)
    return handles


class _Cached:
    """Frames persisted for the snapshot's one pass, unpersisted once it is written."""

    def __init__(self, frames: list[DataFrame]) -> None:
        self.frames = frames

    def release(self) -> None:
        for frame in self.frames:
            frame.unpersist()


def _cache(node: OperatorDef, processed: Processed, writes: list[StreamWrite]) -> _Cached:
    """What the user's function returned and set, computed once for the snapshot's one
    pass: each branch of the pass (a state, its changelog, a channel) would otherwise
    compute its frame again (exchange reuse shares a shuffle, not what runs after it).
    A state that is the output itself shares its cache. A lone stream reads its frame
    once: nothing is persisted (filling a cache is a Spark job of its own). The base of
    a changelog is not persisted: it is state files read again, not the function."""
    if len(writes) < 2:
        return _Cached([])
    from pyspark import StorageLevel

    level = StorageLevel.MEMORY_AND_DISK
    output = processed.output
    frames = [] if output is None else [output]
    for state in node.states:
        new = processed.ctx.new_state(state)
        if output is None or not (new is output or new.sameSemantics(output)):
            frames.append(new)
    return _Cached([frame.persist(level) for frame in frames])
