"""The code's side of a deploy (issue 26): the topology the code declares, its states'
evolution and allowances, and the plan against a checkpoint (protocol/deploy_plan.py).
No Spark: the DAG processor, the CLI and the UI build plans too."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import pyarrow as pa

from batchpoint.errors import BatchpointError
from batchpoint.protocol.checkpoint import CheckpointStatus, CompletedCheckpoint
from batchpoint.protocol.deploy_plan import (
    DeployAllowances,
    DeployPlan,
    StateEvolution,
    plan_deploy,
    table_key,
)
from batchpoint.protocol.pipeline import OperatorKind, PipelineSpec
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.protocol.source_input import READ
from batchpoint.protocol.topology import NodeTopology, StateTopology, Topology
from batchpoint.protocol.trigger import DeployBase
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.base_schemas import judged_recorded, judged_schema
from batchpoint.sources.barrier import SourceBarrier
from batchpoint.sources.upstream import PipelineSinkSource, upstream_of
from batchpoint.storage import ObjectStore


def code_topology(pipeline: Pipeline, spec: PipelineSpec | None = None) -> Topology:
    """What a checkpoint of this code records: every node by uid, with the parallelism
    in force (`spec`'s, else the code's) and each state's declared schema."""
    spec = spec or pipeline.spec()
    nodes = [
        NodeTopology(
            s.uid,
            s.name,
            OperatorKind.SOURCE,
            key_columns=s.key_columns,
            properties=_source_properties(pipeline, s.name),
        )
        for s in pipeline.sources.values()
    ]
    for op in pipeline.operators.values():
        states = tuple(
            StateTopology.declared(op.state_uid(name), name, schema)
            for name, schema in op.states.items()
        )
        nodes.append(
            NodeTopology(
                op.uid,
                op.name,
                OperatorKind.OPERATOR,
                spec.operator(op.name).parallelism,
                op.max_parallelism,
                op.key_columns,
                states,
            )
        )
    for sink in pipeline.sinks.values():
        properties = {"mode": sink.mode.value, **(sink.table.to_properties() if sink.table else {})}
        nodes.append(
            NodeTopology(
                sink.uid,
                sink.name,
                OperatorKind.SINK,
                spec.operator(sink.name).parallelism,
                sink.max_parallelism,
                sink.key_columns,
                properties=properties,
            )
        )
    return Topology(tuple(nodes))


def _source_properties(pipeline: Pipeline, name: str) -> dict[str, str]:
    """What tells a source's input apart (a rename without uid; a kept uid on other
    input): its files' prefix and format, a digest of its location's URI (never the URI
    or its options: credentials), or its table or upstream sink."""
    source = pipeline.sources[name]
    if source.upstream is not None:
        return {"upstream": source.upstream.pipeline, "sink": source.upstream.sink}
    if source.table is not None:
        return source.table.to_properties()
    if source.location is not None:
        digest = hashlib.sha256(source.location.uri.encode()).hexdigest()[:16]
        return {"location": digest, "format": source.format}
    return {"root": source.root, "format": source.format}


def state_evolution(pipeline: Pipeline) -> dict[tuple[str, str], StateEvolution]:
    return {
        (op.uid, decl.uid or name): StateEvolution(
            dict(decl.defaults), tuple(decl.dropped), decl.migrate is not None
        )
        for op in pipeline.operators.values()
        for name, decl in op.state_decls.items()
    }


def allowances(pipeline: Pipeline, *, allow_non_restored_state: bool = False) -> DeployAllowances:
    return DeployAllowances(
        allow_non_restored_state,
        frozenset(pipeline.dropped_states),
        frozenset(pipeline.dropped_operators),
        frozenset(pipeline.dropped_sinks),
        frozenset(pipeline.dropped_sources),
    )


def plan_on(
    pipeline: Pipeline,
    store: ObjectStore,
    completed: CompletedCheckpoint | None,
    spec: PipelineSpec | None = None,
    *,
    allow_non_restored_state: bool = False,
    tables: ObjectStore | None = None,
) -> DeployPlan:
    """Whether the code may be deployed on `completed` (None: on nothing stored), and
    what the deploy keeps, migrates, rewrites or drops: the one decision that
    `batchpoint plan`, the trigger (BaseCheck), the restore (PipelineDriver.check_deploy)
    and the DAGs' check tasks all make (DESIGN.md invariant 18). Each state's stored
    schema is the one its files are read with (`judged_schema`, what the restore's
    reader finds too), so a plan that says yes is an epoch that runs. `store` holds the
    checkpoint's files (a savepoint folder's store for a folder); `tables`: the
    pipeline's store, whose root its tables name (default `store`)."""
    code = code_topology(pipeline, spec)
    stored = None
    if completed is not None:
        judged = judged_topology(store, completed, code)
        stored = with_reads(judged, barrier_partitions(completed.pending.barrier))
    return plan_against(
        pipeline,
        stored,
        completed.checkpoint_id if completed is not None else None,
        spec,
        allow_non_restored_state=allow_non_restored_state,
        recorded=completed is None or completed.pending.topology is not None,
        claimed=claimed_tables(pipeline, tables or store, stored),
        reads=upstream_partitions(pipeline, tables or store),
    )


def upstream_partitions(pipeline: Pipeline, store: ObjectStore) -> dict[str, str]:
    """source uid -> the partition its code reads (`<pipeline>/<sink uid>`), its sink
    resolved by the upstream's registered spec on the pipeline's store `store`. A sink
    or upstream not found is the epoch's error to give (ConfigError), not a deploy's."""
    found: dict[str, str] = {}
    for source in pipeline.sources.values():
        if source.upstream is None:
            continue
        try:
            uid = PipelineSinkSource(store, source.upstream).sink_uid()
        except BatchpointError:
            continue
        found[source.uid] = source.upstream.partition(uid)
    return found


def barrier_partitions(barriers: Mapping[str, Any]) -> dict[str, str]:
    """source uid -> the upstream partitions a checkpoint's barriers read."""
    found: dict[str, str] = {}
    for uid, barrier in barriers.items():
        try:
            partitions = [p for p in SourceBarrier.coerce(barrier) if upstream_of(p)]
        except BatchpointError:  # a malformed barrier is the epoch's to report
            continue
        if partitions:
            found[uid] = ", ".join(sorted(partitions))
    return found


def with_reads(topology: Topology, reads: Mapping[str, str]) -> Topology:
    """The topology with each upstream source's partition under READ (a plan's only:
    a checkpoint records the sink as the code names it)."""
    nodes = tuple(
        replace(n, properties={**n.properties, READ: reads[n.uid]})
        if n.kind is OperatorKind.SOURCE and "upstream" in n.properties and n.uid in reads
        else n
        for n in topology.nodes
    )
    return Topology(nodes)


def claimed_tables(
    pipeline: Pipeline, store: ObjectStore, stored: Topology | None
) -> dict[tuple[str, str], str]:
    """(catalog, table) -> the sink uid the table names as its writer, for the tables
    the code binds that `stored` records no sink of: a sink a restore took back may
    have made one (the catalog, not the checkpoint, still says whose it is). `store`:
    the pipeline's (its tables name its root). No catalog is opened when every table
    the code binds is recorded."""
    recorded = set(map(table_key, (stored.table_bindings() if stored else {}).values()))
    bindings = [
        s.table
        for s in pipeline.sinks.values()
        if s.table is not None and table_key(s.table.to_properties()) not in recorded
    ]
    if not bindings:
        return {}
    from batchpoint.tables.service import table_writers

    writers = table_writers(store, pipeline.name, bindings)
    return {table_key(b.to_properties()): uid for b, uid in writers.items()}


def judged_topology(store: ObjectStore, completed: CompletedCheckpoint, code: Topology) -> Topology:
    """The checkpoint's topology with each state's schema as its files are read under
    the code's declaration (`judged_schema`); a state without readable files is judged
    by what was recorded (`judged_recorded`)."""

    def from_files(operator_uid: str, state_uid: str, want: pa.Schema | None) -> pa.Schema | None:
        try:
            return judged_schema(store, completed, operator_uid, state_uid, want)
        except (BatchpointError, pa.ArrowException):
            # files missing or unreadable are damage, the restore's and integrity's
            # finding (invariant 11), not a deploy's: judged as recorded
            return None

    return _judged_states(completed.topology, code, from_files)


def pending_judged_topology(recorded: Topology, code: Topology) -> Topology:
    """A base still pending (concurrent checkpoints), judged by what its trigger
    recorded as a completed base's states are judged (`judged_recorded`, the files'
    equivalence): its files will hold that declaration, so judged now and again once
    it completed, the code gets one verdict (invariant 18)."""
    return _judged_states(recorded, code, lambda *_: None)


#: A state's schema as its files are judged (operator uid, state uid, the declared
#: schema), None when no files answer.
_FromFiles = Callable[[str, str, pa.Schema | None], pa.Schema | None]


def _judged_states(topology: Topology, code: Topology, from_files: _FromFiles) -> Topology:
    """`topology` with each state's schema as the evolution rules compare it with the
    code's declaration: `from_files`' answer (operator uid, state uid, declared), else
    the recorded schema judged as the files would be (`judged_recorded`). The one place
    a base's states are judged, pending or completed."""
    declared = {
        (n.uid, s.uid): s.arrow_schema()
        for n in code.nodes
        if n.kind is OperatorKind.OPERATOR
        for s in n.states
    }
    nodes = []
    for node in topology.nodes:
        states = []
        for state in node.states:
            want = declared.get((node.uid, state.uid))
            schema = from_files(node.uid, state.uid, want)
            if schema is None and (recorded := state.arrow_schema()) is not None:
                judged = judged_recorded(recorded, want)
                schema = None if judged.equals(recorded) else judged  # as recorded: as is
            if schema is not None:
                state = StateTopology.declared(state.uid, state.name, schema)
            states.append(state)
        nodes.append(replace(node, states=tuple(states)))
    return Topology(tuple(nodes))


def plan_against(
    pipeline: Pipeline,
    stored: Topology | None,
    base: int | None,
    spec: PipelineSpec | None = None,
    *,
    allow_non_restored_state: bool = False,
    recorded: bool = True,
    claimed: Mapping[tuple[str, str], str] | None = None,
    reads: Mapping[str, str] | None = None,
) -> DeployPlan:
    """The plan of deploying the code on a checkpoint whose topology is `stored`;
    `reads`: the code's upstream sources' partitions (`upstream_partitions`)."""
    return plan_deploy(
        stored,
        with_reads(code_topology(pipeline, spec), reads or {}),
        allowances(pipeline, allow_non_restored_state=allow_non_restored_state),
        evolution=state_evolution(pipeline),
        base=base,
        recorded=recorded,
        claimed=claimed,
    )


def completed_checkpoint(
    coordinator: PipelineHistory, checkpoint_id: int
) -> CompletedCheckpoint | None:
    """The completed checkpoint `checkpoint_id`, None when it did not complete (yet)."""
    outcome = coordinator.get_outcome(checkpoint_id)
    if outcome is None or outcome.status is not CheckpointStatus.COMPLETED:
        return None
    return outcome.completed


class BaseCheck:
    """The trigger's `check_base`: the plan of the code on the base the admission
    chose (`plan_on`); its problems refuse the trigger. `plan` keeps the last plan made
    (logged)."""

    def __init__(
        self,
        store: ObjectStore,
        pipeline: Pipeline,
        spec: PipelineSpec,
        *,
        allow_non_restored_state: bool | Mapping[int, bool] = False,
    ) -> None:
        self.store = store
        self.pipeline = pipeline
        self.spec = spec
        self.allow = allow_non_restored_state
        self.plan: DeployPlan | None = None

    def __call__(self, base: DeployBase) -> list[str]:
        cid = base.checkpoint_id
        if base.unreadable is not None:
            return [f"the record of base checkpoint {cid} is unreadable ({base.unreadable})"]
        allow = self.allow.get(cid, False) if isinstance(self.allow, Mapping) else self.allow
        if cid is not None and base.completed is None:
            # a base still pending (concurrent checkpoints): what its trigger recorded,
            # each state judged as its files will be, so completing changes no verdict
            if base.pending_topology is None:
                return []  # its own trigger judged the code then; nothing recorded to judge
            read = barrier_partitions(base.pending_barrier or {})
            code = code_topology(self.pipeline, self.spec)
            self.plan = plan_against(
                self.pipeline,
                with_reads(pending_judged_topology(base.pending_topology, code), read),
                cid,
                self.spec,
                allow_non_restored_state=allow,
                reads=upstream_partitions(self.pipeline, self.store),
            )
            return self.plan.problems
        self.plan = plan_on(
            self.pipeline,
            self.store,
            base.completed,
            self.spec,
            allow_non_restored_state=allow,
        )
        return self.plan.problems
