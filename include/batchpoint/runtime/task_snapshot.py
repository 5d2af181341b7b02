"""Snapshot: what an attempt writes, per subtask, from executors (Flink's snapshotState).
An operator writes each state (in full, or as a changelog on its base's files) and its
output once per group of consumers that key it alike; a sink stages its output, or, with
no function and one input already keyed for it, acknowledges that input's files by
reference (no Spark job). The writes themselves run in task_writes."""

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
        return _timed_writes(attempt, [sink], aligned)
    assert isinstance(node, OperatorDef)
    plans = snapshot_plans(attempt, processed.ctx, restored)
    handles = _idle(attempt, processed, restored, plans, aligned)
    if handles is None:
        cached = _cache(node, processed, restored, plans)
        try:
            writes = operator_writes(attempt, processed.ctx, cached.output, plans)
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
            attempt.checkpoint, restored.base_files[state], ctx.new_state(state), node,
            attempt.parallelism, chain,
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
        state_write(
            ctx,
            s,
            state_stream(node.state_uid(s)),
            node.key_columns,
            node.max_parallelism,
            plans[s],
            value=node.value_state(s),
        )
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
    aligned: float,
) -> Handles | None:
    """The epoch by reference when the operator has nothing to do (task_idle)."""
    from batchpoint.runtime.task_idle import idle_handles

    writing = attempt.report.timed_sync(aligned)
    writes = operator_writes(attempt, processed.ctx, processed.output, plans)
    channels = [w for w in writes if w.layer == 0 and w.stream.startswith("channel-")]
    handles = idle_handles(attempt, processed, restored, plans, channels)
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
    """Frames persisted for the writes, and the output to write (its persisted form)."""

    def __init__(self, frames: list[DataFrame], output: DataFrame | None) -> None:
        self.frames = frames
        self.output = output

    def release(self) -> None:
        for frame in self.frames:
            frame.unpersist()


def _cache(
    node: OperatorDef, processed: Processed, restored: Restored, plans: dict[str, SnapshotPlan]
) -> _Cached:
    """New state and output usually share most of their plan, and each is written once
    per consumer: computing them once (spilling to disk if large) saves work. A
    changelog compares the new state with the base's, read once for both. A lone state
    with no output is not persisted: one write reads it, and filling the cache would
    cost a Spark job of its own."""
    from pyspark import StorageLevel

    level = StorageLevel.MEMORY_AND_DISK
    ctx = processed.ctx
    shared = processed.output is not None or len(node.states) > 1
    frames = [ctx.new_state(s).persist(level) for s in node.states] if shared else []
    frames += [restored.states[s].persist(level) for s, p in plans.items() if not p.full]
    output = processed.output
    if output is not None:
        output = output.persist(level)
        frames.append(output)
    return _Cached(frames, output)
