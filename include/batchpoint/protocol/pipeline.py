"""The pipeline as the protocol sees it: operators, their parallelism and edges, and the
tasks (`operator#subtask`) that must acknowledge every checkpoint.

This is the serialisable graph only; the functions that compute each operator live in
the runtime and refer to it by name.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from batchpoint import codec
from batchpoint.errors import PipelineSpecError
from batchpoint.protocol.layout import TaskId, check_name
from batchpoint.state.keygroups import check_parallelism


class OperatorKind(enum.StrEnum):
    SOURCE = "source"
    OPERATOR = "operator"
    SINK = "sink"


@dataclass(frozen=True)
class OperatorSpec(codec.Value):
    name: str
    kind: OperatorKind
    inputs: tuple[str, ...] = ()
    parallelism: int = 1
    max_parallelism: int = 128
    key_columns: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    properties: Mapping[str, Any] = field(default_factory=dict)
    # The parallelism the code declared when this spec was registered, beside the
    # effective one above (which a rescaling restore may have set): a deploy that
    # changes the code's value is told apart from a restore's rescale that must
    # persist. Absent in specs registered before it was recorded.
    code_parallelism: int | None = codec.field(default=None, omit=None)
    # The node's identity (runtime.api: default its name), by which the next deploy's
    # code finds what this spec says of it (the parallelism in force). Absent in specs
    # registered before it was recorded: they are matched by name.
    uid: str | None = codec.field(default=None, omit=None)

    @property
    def has_tasks(self) -> bool:
        # A source is not a running task: the trigger's barrier is its whole contribution.
        return self.kind is not OperatorKind.SOURCE

    def tasks(self) -> list[TaskId]:
        return [TaskId(self.name, i) for i in range(self.parallelism)] if self.has_tasks else []


@dataclass(frozen=True)
class PipelineSpec(codec.Record):
    KIND = "pipeline-spec"
    VERSION = 1

    name: str
    operators: tuple[OperatorSpec, ...]

    def __post_init__(self) -> None:
        self.validate()

    # -- queries --------------------------------------------------------------------------

    def operator(self, name: str) -> OperatorSpec:
        for op in self.operators:
            if op.name == name:
                return op
        raise PipelineSpecError(f"pipeline '{self.name}' has no operator '{name}'")

    def expected_tasks(self) -> tuple[TaskId, ...]:
        return tuple(t for op in self.topological_order() for t in op.tasks())

    def topological_order(self) -> list[OperatorSpec]:
        by_name = {op.name: op for op in self.operators}
        order: list[OperatorSpec] = []
        state: dict[str, str] = {}

        def visit(name: str, path: list[str]) -> None:
            if state.get(name) == "done":
                return
            if state.get(name) == "visiting":
                cycle = " -> ".join([*path[path.index(name) :], name])
                raise PipelineSpecError(f"pipeline '{self.name}' has a cycle: {cycle}")
            state[name] = "visiting"
            for upstream in by_name[name].inputs:
                visit(upstream, [*path, name])
            state[name] = "done"
            order.append(by_name[name])

        for op in self.operators:  # declaration order breaks ties, so the order is stable
            visit(op.name, [])
        return order

    def downstream(self, name: str) -> list[OperatorSpec]:
        return [op for op in self.operators if name in op.inputs]

    def with_parallelism(self, parallelism: Mapping[str, int]) -> PipelineSpec:
        """The same pipeline rescaled (restore with a different parallelism)."""
        unknown = set(parallelism) - {op.name for op in self.operators}
        if unknown:
            raise PipelineSpecError(
                f"pipeline '{self.name}': cannot rescale unknown operators {sorted(unknown)}"
            )
        ops = tuple(
            replace(op, parallelism=parallelism.get(op.name, op.parallelism))
            for op in self.operators
        )
        return PipelineSpec(self.name, ops)

    # -- validation -----------------------------------------------------------------------

    def validate(self) -> None:
        check_name(self.name, "pipeline")
        if not self.operators:
            raise PipelineSpecError(f"pipeline '{self.name}' has no operators")
        seen: set[str] = set()
        for op in self.operators:
            check_name(op.name, f"pipeline '{self.name}': operator")
            if op.name in seen:
                raise PipelineSpecError(
                    f"pipeline '{self.name}': operator '{op.name}' is declared twice"
                )
            seen.add(op.name)
            check_parallelism(
                op.parallelism, op.max_parallelism, f"pipeline '{self.name}', operator '{op.name}'"
            )
        for op in self.operators:
            for upstream in op.inputs:
                if upstream not in seen:
                    raise PipelineSpecError(
                        f"pipeline '{self.name}': operator '{op.name}' reads from unknown "
                        f"input '{upstream}'"
                    )
            if op.kind is OperatorKind.SOURCE and op.inputs:
                raise PipelineSpecError(
                    f"pipeline '{self.name}': source '{op.name}' cannot have inputs"
                )
            if op.kind is not OperatorKind.SOURCE and not op.inputs:
                raise PipelineSpecError(
                    f"pipeline '{self.name}': {op.kind.value} '{op.name}' has no inputs"
                )
        self.topological_order()  # raises on a cycle


def simple_pipeline(
    name: str, operators: Sequence[tuple[str, int]] | Iterable[str]
) -> PipelineSpec:
    """A linear pipeline source → op1 → op2 ..., handy for tests and benches.
    `operators` are names or (name, parallelism) pairs."""
    ops: list[OperatorSpec] = [OperatorSpec("source", OperatorKind.SOURCE)]
    previous = "source"
    for item in operators:
        op_name, parallelism = (item, 1) if isinstance(item, str) else item
        ops.append(
            OperatorSpec(op_name, OperatorKind.OPERATOR, (previous,), parallelism=parallelism)
        )
        previous = op_name
    return PipelineSpec(name, tuple(ops))
