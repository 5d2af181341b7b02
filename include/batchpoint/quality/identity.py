"""Which state is which, for the quality gate (invariant 17): a state is its operator's
uid and its own uid; names are labels.

A candidate checkpoint's states are what its records prove: its topology (recorded, or
derived for a checkpoint written before topologies) and its acks, each state's files
being the acks of its operator's uid (`operator_uid`) named `state-<state uid>`. They are
matched with the states the code declares by uid alone, whatever either side calls
them: a checkpoint written before a deploy that renamed an operator or a state is judged
by the renamed state's suites and checks. What is on one side only is said, with why: a
declared state the candidate does not hold (new since it), and a state it holds that the
code no longer declares.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from batchpoint.protocol.checkpoint import CompletedCheckpoint, FileHandle
from batchpoint.protocol.pipeline import OperatorKind
from batchpoint.protocol.topology import STATE_STREAM_PREFIX

if TYPE_CHECKING:
    from batchpoint.runtime.api import Pipeline


@dataclass(frozen=True, order=True)
class StateId:
    """A state's identity: its operator's uid and its own."""

    operator: str
    state: str

    @property
    def key(self) -> str:
        """How reports key the state: `operator uid/state uid`."""
        return f"{self.operator}/{self.state}"


@dataclass(frozen=True)
class DeclaredState:
    """A state as the code declares it: its identity and its names there."""

    id: StateId
    operator: str
    state: str
    max_parallelism: int

    @property
    def label(self) -> str:
        return f"{self.operator}/{self.state}"


def declared_states(pipeline: Pipeline) -> dict[StateId, DeclaredState]:
    return {
        StateId(op.uid, op.state_uid(state)): DeclaredState(
            StateId(op.uid, op.state_uid(state)), op.name, state, op.max_parallelism
        )
        for op in pipeline.operators.values()
        for state in op.states
    }


@dataclass(frozen=True)
class HeldState:
    """A state a candidate checkpoint holds, and the code's declaration of it (None: the
    code no longer declares it)."""

    id: StateId
    recorded: str  # `operator/state` as the checkpoint's code named it
    handles: tuple[FileHandle, ...]
    max_parallelism: int | None  # as the checkpoint's topology records it
    declared: DeclaredState | None

    @property
    def label(self) -> str:
        """The code's names for it, else the checkpoint's."""
        return self.declared.label if self.declared is not None else self.recorded


@dataclass(frozen=True)
class NewState:
    """A state the code declares and the candidate does not hold."""

    declared: DeclaredState
    reason: str


@dataclass(frozen=True)
class StateMatch:
    held: tuple[HeldState, ...]
    new: tuple[NewState, ...]

    @property
    def undeclared(self) -> tuple[HeldState, ...]:
        return tuple(s for s in self.held if s.declared is None)


#: Why a held state the code no longer declares is not judged.
UNDECLARED = "not declared by the code (dropped, or its uid changed): nothing to judge it by"


def match_states(
    completed: CompletedCheckpoint, declared: Mapping[StateId, DeclaredState]
) -> StateMatch:
    """The candidate's states, by uid, with the code's declarations of them; and the
    declared states it does not hold."""
    files: dict[StateId, list[FileHandle]] = {}
    for ack in completed.acks:
        for handle in ack.handles:
            if handle.name.startswith(STATE_STREAM_PREFIX):
                uid = handle.name[len(STATE_STREAM_PREFIX) :]
                files.setdefault(StateId(ack.operator_uid, uid), []).append(handle)
    operators = completed.topology.of_kind(OperatorKind.OPERATOR)
    recorded = {
        StateId(node.uid, state.uid): (f"{node.name}/{state.name}", node.max_parallelism)
        for node in operators.values()
        for state in node.states
    }
    held = tuple(
        HeldState(
            sid,
            recorded.get(sid, (sid.key, None))[0],
            tuple(files.get(sid, ())),
            recorded.get(sid, (sid.key, None))[1],
            declared.get(sid),
        )
        for sid in sorted(set(recorded) | set(files))
    )
    present = {s.id for s in held}
    took_part = set(operators) | {s.operator for s in present}
    cid = completed.checkpoint_id
    new = tuple(
        NewState(
            d,
            f"new since checkpoint {cid}: "
            + (
                f"it holds no state of uid '{sid.state}' of operator uid '{sid.operator}'"
                if sid.operator in took_part
                else f"it holds no operator of uid '{sid.operator}'"
            ),
        )
        for sid, d in sorted(declared.items())
        if sid not in present
    )
    return StateMatch(held, new)


def max_parallelism_of(held: HeldState) -> tuple[int | None, str]:
    """The max parallelism the state's files were written with: their meta, else the
    checkpoint's topology, else the code's; with a problem when the files disagree or
    it is recorded nowhere."""
    recorded = {
        int(h.meta["max_parallelism"]) for h in held.handles if h.meta.get("max_parallelism")
    }
    if len(recorded) > 1:
        return None, f"its files disagree on max_parallelism: {sorted(recorded)}"
    if recorded:
        return recorded.pop(), ""
    if held.max_parallelism is not None:
        return held.max_parallelism, ""
    if held.declared is not None:
        return held.declared.max_parallelism, ""
    return None, "max_parallelism is recorded nowhere (no file meta, no topology, no code)"
