"""Process: call the node's function on this epoch's input (Flink's processElement over
a whole epoch). An operator's function gets its inputs and restored states and sets new
ones; a sink's optional function reshapes what it stages, which is otherwise its input
(several inputs unioned by column name)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from batchpoint.runtime.api import OperatorContext, OperatorDef, SinkDef
from batchpoint.runtime.task_attempt import TaskAttempt
from batchpoint.runtime.task_restore import Restored

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class Processed:
    """What the function gave: the context (holding an operator's new states) and the
    output, for an operator its downstream output (None: it returned none), for a sink
    what it stages."""

    ctx: OperatorContext
    output: DataFrame | None


def process(attempt: TaskAttempt, restored: Restored) -> Processed:
    node, pending = attempt.node, attempt.checkpoint
    ctx = OperatorContext(
        attempt.env.session,
        pending.checkpoint_id,
        node.name,
        restored.inputs,
        restored.states,
        pending.properties,
        declared=node.states if isinstance(node, OperatorDef) else None,
    )
    if not isinstance(node, SinkDef):
        return Processed(ctx, node.fn(ctx))
    frames = list(restored.inputs.values())
    staged = frames[0] if len(frames) == 1 else _union(frames)
    if node.fn is not None:
        staged = node.fn(ctx) or staged
    return Processed(ctx, staged)


def _union(frames: list[DataFrame]) -> DataFrame:
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out
