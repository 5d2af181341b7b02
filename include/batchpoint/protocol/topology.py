"""The pipeline's topology as a checkpoint records it (issue 26): every source, operator
and sink by its `uid`, with its name, parallelism, key and, for an operator, each state
by uid with the schema its code declared. A deploy is judged by comparing the topology
of the base checkpoint with the code's (protocol/deploy_plan.py).

Checkpoints written before version 2 of the pending record recorded no topology; for
them `derived_topology` reads what their records prove: uids are the names (there were
no others), the states are the `state-<name>` streams of each operator's acks, the
sources the barrier's keys, and no schema is known (None: "not recorded").
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from batchpoint import codec
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.pipeline import OperatorKind

#: The stream name prefix of a state's files (`state-<state uid>`).
STATE_STREAM_PREFIX = "state-"
#: The stream name of a sink's staged output.
SINK_STREAM_NAME = "sink"


def encode_schema(schema: pa.Schema) -> str:
    """A schema as text a record can hold: base64 of its Arrow IPC form."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def decode_schema(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def describe_fields(schema: pa.Schema) -> tuple[str, ...]:
    """The columns as people read them: `name: type` (`not null` when so)."""
    return tuple(f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in schema)


@dataclass(frozen=True)
class StateTopology(codec.Value):
    """A state of an operator: its uid, its name in the code, and the declared schema
    (None when the checkpoint did not record it: written before version 2)."""

    uid: str
    name: str
    schema: str | None = codec.field(default=None, omit=None, doc="base64 Arrow IPC schema")
    fields: tuple[str, ...] | None = codec.field(default=None, omit=None, doc="for people")

    @classmethod
    def declared(cls, uid: str, name: str, schema: pa.Schema) -> StateTopology:
        return cls(uid, name, encode_schema(schema), describe_fields(schema))

    def arrow_schema(self) -> pa.Schema | None:
        return decode_schema(self.schema) if self.schema is not None else None


@dataclass(frozen=True)
class NodeTopology(codec.Value):
    """A source, operator or sink by uid. `properties`: a sink's mode and table binding.
    `max_parallelism` and `key_columns` are None when not recorded (before version 2)."""

    uid: str
    name: str
    kind: OperatorKind
    parallelism: int = 1
    max_parallelism: int | None = None
    key_columns: tuple[str, ...] | None = None
    states: tuple[StateTopology, ...] = ()
    properties: Mapping[str, Any] = field(default_factory=dict)

    def state(self, uid: str) -> StateTopology | None:
        return next((s for s in self.states if s.uid == uid), None)


@dataclass(frozen=True)
class Topology(codec.Value):
    nodes: tuple[NodeTopology, ...]

    def of_kind(self, kind: OperatorKind) -> dict[str, NodeTopology]:
        """uid -> node, for the nodes of one kind (uids are unique per kind)."""
        return {n.uid: n for n in self.nodes if n.kind is kind}

    def node(self, kind: OperatorKind, uid: str) -> NodeTopology | None:
        return self.of_kind(kind).get(uid)

    def state_schema(self, operator_uid: str, state_uid: str) -> pa.Schema | None:
        """The schema recorded for a state (None: not recorded, or no such state): what
        `runtime.base_schemas.base_state_schema` (the state reader's) asks first."""
        node = next(
            (n for n in self.nodes if n.uid == operator_uid and n.kind is OperatorKind.OPERATOR),
            None,
        )
        state = node.state(state_uid) if node is not None else None
        return state.arrow_schema() if state is not None else None

    def table_bindings(self) -> dict[str, Mapping[str, Any]]:
        """sink uid -> the table binding's properties, for the sinks that have a table."""
        return {
            n.uid: n.properties
            for n in self.nodes
            if n.kind is OperatorKind.SINK and "table" in n.properties
        }


def derived_topology(
    barrier_sources: Iterable[str], acks: Sequence[Any], expected_tasks: Sequence[TaskId]
) -> Topology:
    """What a checkpoint without a recorded topology proves about it: uid = name, the
    parallelism its tasks had, the states its acks hold; no schema. An operator whose
    acks hold a sink's staged output is a sink."""
    parallelism: dict[str, int] = {}
    for task in expected_tasks:
        parallelism[task.operator] = parallelism.get(task.operator, 0) + 1
    streams: dict[str, set[str]] = {name: set() for name in parallelism}
    key_groups: dict[str, int] = {}
    for ack in acks:
        streams.setdefault(ack.operator_uid, set()).update(h.name for h in ack.handles)
        for handle in ack.handles:
            if handle.meta.get("max_parallelism"):
                key_groups[ack.operator_uid] = int(handle.meta["max_parallelism"])
    nodes = [NodeTopology(s, s, OperatorKind.SOURCE) for s in sorted(barrier_sources)]
    for name, found in streams.items():
        states = tuple(
            StateTopology(s.removeprefix(STATE_STREAM_PREFIX), s.removeprefix(STATE_STREAM_PREFIX))
            for s in sorted(found)
            if s.startswith(STATE_STREAM_PREFIX)
        )
        kind = OperatorKind.SINK if SINK_STREAM_NAME in found else OperatorKind.OPERATOR
        nodes.append(
            NodeTopology(
                name, name, kind, parallelism.get(name, 1), key_groups.get(name), states=states
            )
        )
    return Topology(tuple(nodes))
