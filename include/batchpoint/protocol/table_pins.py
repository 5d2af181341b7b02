"""Table pins: the fence between a table sink's sync and GC.

A sync plans on a sink manifest it read earlier; a GC pass in between may drop an epoch
of that plan (subsumed meanwhile) and delete its files. So before each commit the sync
pins the epoch in the manifest (`SinkPublisher.pin`, a CAS, only while the epoch is
still there), and GC's pruning keeps a pinned epoch while the pin is live
(`SinkPublisher.prune_unreachable`). This module is the pin and the rule that tells a
live pin from a stale one; no clock is part of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from batchpoint import codec


@dataclass(frozen=True)
class TablePin(codec.Value):
    """A table sync about to commit epoch `checkpoint_id` to the sink's table, whose
    current snapshot it read as `on` (None: the table had none yet).

    Every table commit is a compare-and-set on the table's current snapshot, and
    snapshot ids never come back, so the pinned commit can land only while the table's
    current snapshot is still `on`. GC's pruning keeps a pinned epoch exactly as long
    (`prune_unreachable`): the epoch stays in the manifest, so its files stay
    referenced, up to the commit; after it, the table's own snapshot references them.
    Once the table moved on, the pin is stale whatever the time (the sync lost its
    commit, died, or committed and did not get to unpin) and GC drops it. No clock is
    involved: a sync paused for an hour is as safe as a fast one."""

    checkpoint_id: int
    on: int | None
    #: The sync that holds it: two syncs pinning one epoch on one snapshot hold two pins.
    owner: str = codec.field(default="", omit="", missing="")


def live_pins(
    pins: tuple[TablePin, ...], table_head: Callable[[], int | None] | None
) -> tuple[TablePin, ...]:
    """The pins whose commit can still land: those planned on the table's current
    snapshot. All of them when the table cannot be asked (no port, or it raises)."""
    if not pins or table_head is None:
        return pins
    try:
        head = table_head()
    except Exception:  # a catalog's or storage's error: keep every pin this round
        return pins
    return tuple(p for p in pins if p.on == head)
