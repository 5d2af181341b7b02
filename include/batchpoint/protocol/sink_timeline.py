"""Which published epochs of a sink are still history: the timeline each epoch records.

A downstream pipeline that reads a sink (sources/upstream.py) must know, after the
upstream restored, whether what it read is still on the upstream's timeline or was
taken back. Base links alone cannot say: GC prunes a snapshot sink's old epochs, and a
restore may go to a checkpoint on a branch left behind, newer than the one read.

So each published epoch records its checkpoint's ancestry in a few numbers. Within one
restore generation, the checkpoints that complete form one chain (each builds on the
head), and a generation starts from its restore's target. An epoch's ancestry is
therefore, per generation it passes through, "every checkpoint of generation g up to
id n": `TimelineStep(g, n)`, oldest generation first. Checkpoint b (of generation gb)
is an ancestor of, or is, epoch x exactly when x's timeline has a step (gb, n) with
b <= n. A restore adds a step to the epochs after it; GC loses nothing, since no epoch
needs another to answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from batchpoint import codec


@dataclass(frozen=True)
class TimelineStep(codec.Value):
    """Every checkpoint of restore generation `generation` up to id `upto`."""

    generation: int
    upto: int


Timeline = tuple[TimelineStep, ...]


def extend(base: Sequence[TimelineStep], generation: int, checkpoint_id: int) -> Timeline:
    """The timeline of a checkpoint admitted in `generation` on a base whose timeline is
    `base` (empty for a first checkpoint)."""
    steps = list(base)
    if steps and steps[-1].generation == generation:
        steps.pop()  # the same generation's chain, now one longer
    return (*steps, TimelineStep(generation, checkpoint_id))


def reaches(timeline: Sequence[TimelineStep], generation: int, checkpoint_id: int) -> bool:
    """Whether the checkpoint `checkpoint_id` of `generation` is on `timeline`."""
    return any(s.generation == generation and checkpoint_id <= s.upto for s in timeline)


def generation_of(timeline: Sequence[TimelineStep]) -> int | None:
    """The generation the timeline's own checkpoint was admitted in."""
    return timeline[-1].generation if timeline else None
