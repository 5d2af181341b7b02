"""The restore generation: the one rule that keeps a decision of an abandoned timeline
from taking effect after a restore (invariant 10).

Every restore bumps the control record's `restore_generation`. A decision carries the
generation it was taken in (a pending checkpoint the one it was admitted in, a publish
the one its caller read, a rewind the restore's own), and a record that a decision
changes carries the generation it is in (the control record, a sink manifest, a table).
Generations only grow, so comparing the two says everything:

- the decision is *stale* when the record is in a newer generation: a restore happened
  after it was taken, and it must not change the record (`is_stale`);
- the decision is *on the timeline* when both are the same generation: only then may it
  complete, move the head or be published as part of the current history
  (`on_timeline`).

A record in an older generation than the decision is behind it: the decision brings it
forward (a publish or a rewind stamps its own generation on the manifest).
"""

from __future__ import annotations


def is_stale(decided_in: int, current: int) -> bool:
    """Whether a decision taken in generation `decided_in` comes too late for a record
    that is in generation `current` (a restore happened in between)."""
    return decided_in < current


def on_timeline(decided_in: int, current: int) -> bool:
    """Whether a decision taken in generation `decided_in` belongs to the timeline of
    generation `current`: neither stale nor ahead of it."""
    return decided_in == current
