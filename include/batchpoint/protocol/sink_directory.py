"""The sinks a pipeline's storage knows, by uid (invariant 17), for the commands that
work from storage alone (`batchpoint sink show`, GC's table sinks, the UI): the sinks of
the registered spec, and those the topologies of its checkpoints recorded, each with its
current name and every earlier one. A user may name a sink by its uid, its current
name, or a name it had in a recorded checkpoint; output shows the name as a label.

The registered spec records each sink's uid; in a spec registered before it did, a spec
sink is the uid that the newest recorded checkpoint knows by that name (its own name, if
none does: uid defaulted to it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from batchpoint.protocol.pipeline import OperatorKind, OperatorSpec
from batchpoint.protocol.sink_keys import SinkRef, sink_refs
from batchpoint.protocol.topology import NodeTopology, Topology


@dataclass(frozen=True)
class KnownSink:
    ref: SinkRef  # uid, current name (the label), older keys of its manifest
    properties: Mapping[str, Any] = field(default_factory=dict)  # mode, table binding
    declared: bool = True  # a sink of the registered spec (else only recorded)

    @property
    def uid(self) -> str:
        return self.ref.uid


class SinkDirectory:
    def __init__(
        self,
        spec: Iterable[OperatorSpec],
        recorded: Iterable[Topology],
        head: Topology | None = None,
    ) -> None:
        """`recorded`: the topologies of the retained checkpoints, oldest first; `head`:
        the head checkpoint's, whose names are the pipeline's as it stands (after a
        restore, until the next trigger registers the code's)."""
        nodes = [n for t in recorded for n in t.nodes if n.kind is OperatorKind.SINK]
        heads = [n for n in (head.nodes if head else ()) if n.kind is OperatorKind.SINK]
        self._at_head = {n.name: n.uid for n in heads}  # name -> the head's sink of it
        latest: dict[str, NodeTopology] = {}  # uid -> its newest node
        self._had: dict[str, str] = {}  # name -> the uid that had it most recently
        for node in reversed(nodes):
            latest.setdefault(node.uid, node)
            self._had.setdefault(node.name, node.uid)
        entries: dict[str, tuple[str, Mapping[str, Any], bool]] = {}
        for op in (o for o in spec if o.kind is OperatorKind.SINK):
            # a spec registered before uids were recorded: the newest recorded owner of
            # the name (uid defaulted to the name)
            uid = op.uid or next((n.uid for n in reversed(nodes) if n.name == op.name), op.name)
            entries[uid] = (op.name, op.properties, True)
        for uid, node in latest.items():
            entries.setdefault(uid, (node.name, node.properties, False))
        refs = sink_refs([(uid, name) for uid, (name, _, _) in entries.items()], nodes)
        self._sinks = [KnownSink(ref, *entries[ref.uid][1:]) for ref in refs]

    @property
    def sinks(self) -> list[KnownSink]:
        return list(self._sinks)

    def find(self, given: str) -> KnownSink | None:
        """The sink `given` names: a declared sink's uid or name, else the head's sink of
        that name, else a recorded sink's uid or name, else an earlier name (the sink
        that had it most recently). Declared and the head's first: a sink given a new
        uid under the old name (a dropped uid) is the one a user means by that name,
        also after a restore to a checkpoint that has it under that name while the code
        registered calls it otherwise."""
        earlier = self._had.get(given)
        at_head = self._at_head.get(given)
        for match in (
            lambda s: s.declared and s.uid == given,
            lambda s: s.declared and s.ref.name == given,
            lambda s: s.uid == at_head,
            lambda s: s.uid == given,
            lambda s: s.ref.name == given,
            lambda s: s.uid == earlier,
        ):
            found = next((s for s in self._sinks if match(s)), None)
            if found is not None:
                return found
        return None

    def labels(self) -> list[str]:
        """The sinks as a user knows them: the declared ones by name."""
        return sorted(s.ref.name for s in self._sinks if s.declared)
