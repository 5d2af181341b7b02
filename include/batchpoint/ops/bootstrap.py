"""State bootstrap (Flink's State Processor API, writing side): a savepoint made from
DataFrames, for a pipeline that moves from another system or a state fixed by hand.

    write_savepoint(spark, pipeline, {"aggregate": {"totals": df}}, "savepoints/boot")

writes a self-contained savepoint folder as an export writes one: the state files first,
partitioned by key group exactly as the runtime partitions them (the same write path,
spark/state_writer with a WriteSpec, so the same key hash and key-group ranges), then
`_metadata` last, with paths relative to the folder. Import and restore accept it like
any other savepoint. Its barrier is empty: after the restore, every source is read from
its beginning (bootstrap the state of the input the sources no longer hold).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from batchpoint.errors import CheckpointError, PipelineSpecError
from batchpoint.protocol.checkpoint import (
    AckRecord,
    CheckpointType,
    FileHandle,
    PendingCheckpoint,
    TaskMetrics,
)
from batchpoint.protocol.pipeline import PipelineSpec
from batchpoint.protocol.ports import Count, ProgressFn, count_due
from batchpoint.protocol.savepoint_paths import savepoint_location
from batchpoint.protocol.savepoints import (
    METADATA,
    SavepointLocation,
    SavepointMetadata,
    confined,
    default_savepoint_roots,
    no_links,
)
from batchpoint.runtime.api import OperatorDef, Pipeline
from batchpoint.runtime.deploy import code_topology
from batchpoint.runtime.state_conform import conform_state
from batchpoint.runtime.streams import state_stream
from batchpoint.settings import Settings
from batchpoint.state.schemas import StateNotAsDeclared, schema_differences

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The id the savepoint records as "the checkpoint it was taken from": none was.
BOOTSTRAP_CHECKPOINT_ID = 0
BOOTSTRAP_ATTEMPT = "bootstrap"

States = Mapping[str, Mapping[str, "DataFrame"]]


def write_savepoint(
    spark: SparkSession,
    pipeline: Pipeline,
    states: States,
    target: SavepointLocation | str,
    *,
    parallelism: int | Mapping[str, int] | None = None,
    description: str = "bootstrapped from DataFrames",
    settings: Settings | None = None,
    store_options: Mapping[str, str] | None = None,
    roots: tuple[str, ...] | None = None,
    progress: ProgressFn | None = None,
) -> SavepointMetadata:
    """Write `states` (operator -> state -> DataFrame of the state's declared columns) as
    a savepoint folder at `target` (a location, a URI, or a path under the storage root
    of `settings`), at `parallelism` (default: each operator's in the code). A declared
    state not given starts empty. Refuses unknown operators and states, a DataFrame
    without the declared columns, and a target that already holds a savepoint.
    `progress` hears of each state written (a Count line)."""
    checked = _checked_states(pipeline, states)
    location = bootstrap_location(target, settings, store_options, roots)
    with no_links(location):
        if location.store.exists(location.metadata_key):
            raise CheckpointError(f"{location.uri} already holds a savepoint ({METADATA} exists)")
    spec = pipeline.spec(_parallelism(pipeline, parallelism))
    now = time.time()
    acks = _acks(spark, location, pipeline, spec, checked, now, progress)
    pending = PendingCheckpoint(
        pipeline=pipeline.name,
        checkpoint_id=BOOTSTRAP_CHECKPOINT_ID,
        type=CheckpointType.SAVEPOINT,
        base_checkpoint_id=None,
        restore_generation=0,
        barrier={},
        base_barrier={},
        expected_tasks=spec.expected_tasks(),
        topology=code_topology(pipeline, spec),
        trigger_time=now,
        deadline=now,
    )
    metadata = SavepointMetadata(
        pipeline=pipeline.name,
        checkpoint_id=BOOTSTRAP_CHECKPOINT_ID,
        pending=pending,
        acks=tuple(acks),
        completed_at=now,
        exported_at=now,
        description=description,
        taken_from="",
    )
    with no_links(location):
        location.store.create(location.metadata_key, metadata.encode())  # last
    return metadata


def _acks(
    spark: SparkSession,
    location: SavepointLocation,
    pipeline: Pipeline,
    spec: PipelineSpec,
    checked: Mapping[str, Mapping[str, DataFrame]],
    now: float,
    progress: ProgressFn | None = None,
) -> list[AckRecord]:
    """One ack per task, as if each had snapshotted the given state: its files written by
    the runtime's own keyed write path, so they sit in the key groups a restore expects."""
    acks = []
    states = _state_count(pipeline, spec)
    written_states = 0
    for op in spec.topological_order():
        if not op.has_tasks:
            continue
        node = pipeline.operators.get(op.name)
        by_subtask: dict[int, list[FileHandle]] = {i: [] for i in range(op.parallelism)}
        if isinstance(node, OperatorDef):
            for state in node.states:
                frame = checked.get(op.name, {}).get(state)
                written = _write_state(spark, location, node, state, frame, op.parallelism)
                for subtask, handles in written.items():
                    by_subtask[subtask].extend(handles)
                written_states += 1
                if progress is not None and count_due(written_states, states):
                    line = (
                        f"bootstrap: {written_states}/{states} state(s) written ({op.name}.{state})"
                    )
                    progress(Count("writing states", written_states, states, line))
        for subtask, task in enumerate(op.tasks()):
            acks.append(
                AckRecord(BOOTSTRAP_CHECKPOINT_ID, task, BOOTSTRAP_ATTEMPT,
                          tuple(by_subtask[subtask]), _metrics(by_subtask[subtask]), now,
                          operator_uid=pipeline.node(op.name).uid)
            )  # fmt: skip
    return acks


def _state_count(pipeline: Pipeline, spec: PipelineSpec) -> int:
    """The states a bootstrap writes: every declared one (given or empty)."""
    nodes = [pipeline.operators.get(op.name) for op in spec.operators if op.has_tasks]
    return sum(len(node.states) for node in nodes if isinstance(node, OperatorDef))


def _metrics(handles: list[FileHandle]) -> TaskMetrics:
    return TaskMetrics(records_out=sum(h.rows for h in handles))


def _checked_states(pipeline: Pipeline, states: States) -> dict[str, dict[str, DataFrame]]:
    """The DataFrames with the declared columns selected, in the declared order."""
    from batchpoint.spark.compat import to_arrow_schema

    out: dict[str, dict[str, DataFrame]] = {}
    for operator, frames in states.items():
        node = pipeline.operators.get(operator)
        if node is None or not node.states:
            stateful = sorted(n for n, o in pipeline.operators.items() if o.states)
            raise PipelineSpecError(
                f"pipeline '{pipeline.name}' has no stateful operator '{operator}' "
                f"(stateful: {', '.join(stateful) or 'none'})"
            )
        for state, frame in frames.items():
            if state not in node.states:
                raise PipelineSpecError(
                    f"operator '{operator}' has no state '{state}' "
                    f"(states: {', '.join(node.states)})"
                )
            declared = node.states[state]
            what = f"operator '{operator}', state '{state}'"
            missing = [c for c in declared.names if c not in frame.columns]
            if missing:
                got = to_arrow_schema(frame.schema, timezone="UTC")
                raise PipelineSpecError(
                    f"{what}: the DataFrame is not the declared schema: "
                    + "; ".join(schema_differences(declared, got))
                )
            try:  # other columns are left out: a frame may carry more than the state
                frame = conform_state(frame.select(*declared.names), declared, what)
            except StateNotAsDeclared as exc:
                raise PipelineSpecError(str(exc)) from None
            out.setdefault(operator, {})[state] = frame
    return out


def bootstrap_location(
    target: SavepointLocation | str,
    settings: Settings | None,
    store_options: Mapping[str, str] | None,
    roots: tuple[str, ...] | None,
) -> SavepointLocation:
    """Where a bootstrap writes: `target` confined to `roots`, by default the
    deployment's savepoint roots (refused before any Spark job)."""
    if isinstance(target, str) and settings is None:
        settings = Settings.from_env()
    if settings is not None:
        # The deployment's roots, as export and restore confine to: by default the
        # storage root's savepoints/ (a URI target's own store is not the root).
        root_store = settings.store_ref.open()
        if isinstance(target, str):
            target = savepoint_location(target, root_store, store_options)
        if roots is None:
            roots = settings.savepoint_roots or default_savepoint_roots(root_store)
    assert not isinstance(target, str)
    allowed = default_savepoint_roots(target.store) if roots is None else roots
    return confined(target, allowed)


def _parallelism(pipeline: Pipeline, parallelism: int | Mapping[str, int] | None) -> dict:
    if parallelism is None:
        return {}
    if isinstance(parallelism, int):
        return {n: parallelism for n in [*pipeline.operators, *pipeline.sinks]}
    return dict(parallelism)


def _write_state(
    spark: SparkSession,
    location: SavepointLocation,
    node: OperatorDef,
    state: str,
    frame: DataFrame | None,
    parallelism: int,
) -> dict[int, list[FileHandle]]:
    """The state's files in the folder, per subtask, their paths relative to it."""
    from batchpoint.spark import keyed_io

    if frame is None:
        frame = keyed_io.empty(spark, node.states[state])
    spec = keyed_io.WriteSpec(
        base_key=location.key(f"data/{node.name}"),
        stream=state_stream(node.state_uid(state)),  # found by (operator uid, state uid)
        attempt=f"{BOOTSTRAP_ATTEMPT}-{uuid.uuid4().hex[:12]}",
        key_columns=node.key_columns,
        max_parallelism=node.max_parallelism,
        parallelism=parallelism,
        declared=node.states[state],
        what=f"operator '{node.name}', state '{state}'",
    )
    with no_links(location):
        written = keyed_io.write_keyed(frame, location.store, spec)
    return {
        subtask: [replace(h, path=h.path[len(location.prefix) :]) for h in handles]
        for subtask, handles in written.items()
    }
