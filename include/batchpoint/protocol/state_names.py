"""Which operator state a user means when reading one as of a checkpoint (invariant 17:
a node is its uid). An operator or a state renamed with its uid kept is the same one, so
it may be named by its uid, its name in the code now, or any name a recorded checkpoint
knew it by; the checkpoint read then gives its files under the uid, whatever it was
called there. protocol/sink_directory.py does the same for sinks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from batchpoint.errors import BatchpointError
from batchpoint.protocol.pipeline import OperatorKind, OperatorSpec
from batchpoint.protocol.topology import NodeTopology, Topology


@dataclass(frozen=True)
class StateName:
    """A state as a checkpoint recorded it: by uid, with the names it had there."""

    operator_uid: str
    operator: str
    state_uid: str
    state: str

    @property
    def label(self) -> str:
        return f"{self.operator}/{self.state}"


def _first(candidates: Iterable[str | None]) -> str | None:
    return next((c for c in candidates if c is not None), None)


def operator_uid(
    given: str,
    declared: Sequence[OperatorSpec],
    recorded: Sequence[Topology],
    at: Topology | None = None,
) -> str | None:
    """The uid `given` names: a declared operator's uid or name, else a recorded one's
    uid, else a name it had (the newest checkpoint that knew the name wins). With `at`,
    the first of those that has state in `at` wins: a name the code gave a new uid
    still finds the old uid's state in a checkpoint taken before."""
    operators = [op for op in declared if op.kind is OperatorKind.OPERATOR]
    nodes = [
        node
        for topology in reversed(recorded)  # newest first
        for node in topology.nodes
        if node.kind is OperatorKind.OPERATOR
    ]
    rules: list[Callable[[], str | None]] = [
        lambda: _first(op.uid or op.name for op in operators if (op.uid or op.name) == given),
        lambda: _first(op.uid or op.name for op in operators if op.name == given),
        lambda: _first(n.uid for n in nodes if n.uid == given),
        lambda: _first(n.uid for n in nodes if n.name == given),
    ]
    candidates = [rule() for rule in rules]
    if at is not None:
        stateful = {n.uid for n in at.nodes if n.kind is OperatorKind.OPERATOR and n.states}
        held = _first(c for c in candidates if c in stateful)
        if held is not None:
            return held
    return _first(candidates)


def state_uid(given: str, uid: str, at: NodeTopology, recorded: Sequence[Topology]) -> str | None:
    """The uid of the state `given` names in operator `uid`: one of `at`'s by uid or
    name, else one the operator had under that name in another recorded checkpoint."""
    found = _first(s.uid for s in at.states if given in (s.uid, s.name))
    if found is not None:
        return found
    for topology in reversed(recorded):
        node = topology.node(OperatorKind.OPERATOR, uid)
        if node is not None:
            found = _first(s.uid for s in node.states if s.name == given)
            if found is not None and at.state(found) is not None:
                return found
    return None


def find_state(
    operator: str,
    state: str,
    at: Topology,
    *,
    checkpoint_id: int,
    declared: Sequence[OperatorSpec],
    recorded: Sequence[Topology],
) -> StateName:
    """The state `operator`/`state` names in the checkpoint whose topology is `at`;
    `recorded` is every topology the pipeline still keeps, oldest first."""
    uid = operator_uid(operator, declared, [*recorded, at], at)
    if uid is None:
        known = sorted({n.name for n in at.nodes if n.kind is OperatorKind.OPERATOR and n.states})
        raise BatchpointError(
            f"no stateful operator '{operator}' (stateful: {', '.join(known) or 'none'}); "
            "an operator's uid or a name it had earlier is found too"
        )
    node = at.node(OperatorKind.OPERATOR, uid)
    if node is None or not node.states:
        raise BatchpointError(
            f"operator '{operator}' (uid {uid}) has no state in checkpoint {checkpoint_id}"
        )
    found = state_uid(state, uid, node, recorded)
    if found is None:
        raise BatchpointError(
            f"operator '{operator}' has no state '{state}' "
            f"(states: {', '.join(s.name for s in node.states)}) in checkpoint {checkpoint_id}"
        )
    recorded_state = node.state(found)
    assert recorded_state is not None  # state_uid found it there
    return StateName(uid, node.name, found, recorded_state.name)
