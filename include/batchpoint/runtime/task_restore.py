"""Restore: what an attempt starts from. Its inputs of this epoch (each source's new files
between the base's barrier and this one's; each upstream operator's channel, the files
it acknowledged for this consumer) and, for an operator, each state as of the base
checkpoint, as Spark DataFrames read by executors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from batchpoint.protocol.checkpoint import CompletedCheckpoint, FileHandle
from batchpoint.protocol.sink_manifest import SinkMode
from batchpoint.runtime.api import OperatorDef, SourceDef
from batchpoint.runtime.incremental import base_state_files, rewrite_reason
from batchpoint.runtime.state_evolution import describe, state_verdicts, user_migrated
from batchpoint.runtime.streams import reads_channel
from batchpoint.runtime.task_attempt import TaskAttempt
from batchpoint.runtime.task_metrics import channel_rows_by_subtask
from batchpoint.sources.delta_table import DeltaTableSource
from batchpoint.sources.iceberg_table import IcebergTableSource
from batchpoint.sources.upstream import PipelineSinkSource
from batchpoint.state.evolution import SchemaVerdict, VerdictKind

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: input name -> the files its operator wrote for this consumer (none for a source)
Channels = dict[str, list[FileHandle]]


@dataclass(frozen=True)
class Restored:
    """The attempt's inputs and, for an operator, its restored states, the base's files
    of each (what an incremental snapshot shares) and why a state is rewritten in full
    (`incremental.rewrite_reason`)."""

    inputs: dict[str, DataFrame]
    states: dict[str, DataFrame] = field(default_factory=dict)
    base_files: dict[str, list[FileHandle]] = field(default_factory=dict)
    rewrites: dict[str, str] = field(default_factory=dict)


def upstream_channels(attempt: TaskAttempt) -> Channels:
    """What each input operator acknowledged for this node in this checkpoint (the acks
    are listed once, and only when an input is an operator)."""
    pipeline = attempt.env.pipeline
    upstream = [n for n in attempt.node.inputs if not isinstance(pipeline.node(n), SourceDef)]
    acks = attempt.env.coordinator.acks(attempt.checkpoint_id) if upstream else {}
    return {
        name: [
            h
            for task, ack in acks.items()
            if task.operator == name
            for h in ack.handles
            if reads_channel(h, attempt.operator)
        ]
        for name in attempt.node.inputs
    }


def restore(attempt: TaskAttempt, base: CompletedCheckpoint | None, channels: Channels) -> Restored:
    """Every input as a DataFrame, and an operator's states as of `base`; records the
    rows each subtask reads from upstream operators."""
    node = attempt.node
    base_files: dict[str, list[FileHandle]] = {}
    verdicts: dict[str, SchemaVerdict] = {}
    if isinstance(node, OperatorDef):
        # matched by identity: the base's acks of this operator's uid, its state uid's files
        base_files = {
            state: base_state_files(base, node.uid, node.state_uid(state)) for state in node.states
        }
        # First: a refused schema change fails the attempt before any Spark job.
        verdicts = state_verdicts(attempt.env.store, node, base, base_files)
        for verdict in verdicts.values():
            if verdict.kind is not VerdictKind.UNCHANGED:
                attempt.log(f"restore: {describe(verdict)}")
    inputs = {name: _input(attempt, name, channels[name]) for name in node.inputs}
    attempt.report.records_in = channel_rows_by_subtask(
        [h for files in channels.values() for h in files], node.max_parallelism, attempt.parallelism
    )
    if not isinstance(node, OperatorDef):
        return Restored(inputs)
    states = {
        state: _restored_state(attempt, base, state, base_files[state], verdicts.get(state))
        for state in node.states
    }
    rewrites = {}
    for state, files in base_files.items():
        verdict = verdicts.get(state)
        kind = verdict.kind if verdict is not None else None
        if files and (why := rewrite_reason(base, node.uid, node.key_columns, kind)):
            rewrites[state] = why
    return Restored(inputs, states, base_files, rewrites)


def _input(attempt: TaskAttempt, name: str, channel: list[FileHandle]) -> DataFrame:
    """Input `name`: the source's new files, or `channel`, what operator `name` wrote
    for this node."""
    from batchpoint.spark import keyed_io

    env, pending = attempt.env, attempt.checkpoint
    node = env.pipeline.node(name)
    if isinstance(node, SourceDef):
        source = node.files(env.store, with_schema=True)
        uid = node.uid  # barriers are keyed by source uid
        start, end = pending.base_barrier.get(uid), pending.barrier.get(uid, {})
        if node.reads_changes:
            assert isinstance(source, PipelineSinkSource | IcebergTableSource | DeltaTableSource)
            from batchpoint.spark.upstream_io import read_upstream

            read = source.read_between(start, end)
            what = "published" if read.mode is SinkMode.APPEND else "compared"
            attempt.log(f"{attempt.operator}: reading {read.splits} {what} file(s) of {node.uri}")
            return read_upstream(env.session, node.store_ref(env.store_ref), node, read)
        splits = source.files_between(start, end)
        attempt.log(f"{attempt.operator}: reading {len(splits)} new file(s) of source '{name}'")
        return keyed_io.read_source(env.session, node.store_ref(env.store_ref), node, splits)
    return keyed_io.read_channel(env.session, env.store_ref, channel)


def _restored_state(
    attempt: TaskAttempt,
    base: CompletedCheckpoint | None,
    state: str,
    files: list[FileHandle],
    verdict: SchemaVerdict | None,
) -> DataFrame:
    """The state as the code declares it now: read as stored, migrated by the rules in
    the executors, or handed to the state's migrate= function (state_evolution)."""
    from batchpoint.spark import keyed_io

    env = attempt.env
    node = attempt.node
    assert isinstance(node, OperatorDef)
    schema = node.states[state]
    if base is None or not files:
        return keyed_io.empty(env.session, schema)
    what = f"state '{state}' of '{attempt.operator}' in checkpoint {base.checkpoint_id}"
    if verdict is None or verdict.kind is VerdictKind.UNCHANGED:
        return keyed_io.read_keyed(env.session, env.store_ref, files, schema=schema, what=what)
    if verdict.kind is VerdictKind.MIGRATED:
        return keyed_io.read_keyed(env.session, env.store_ref, files, verdict=verdict, what=what)
    old = keyed_io.read_keyed(env.session, env.store_ref, files, schema=verdict.stored, what=what)
    attempt.log(f"restore: {verdict.what}: running its migrate= function (once, for this deploy)")
    return user_migrated(node, state, verdict, old)
