"""What writing a repair's plan over a readable control record changes, one line per
field (protocol/repair.py reports it; `--force` needs it to say what it replaces)."""

from __future__ import annotations

from collections.abc import Iterable

from batchpoint.protocol.control import ControlRecord


def changes(before: ControlRecord, after: ControlRecord) -> list[str]:
    """What writing `after` over `before` changes, one line per field that differs."""
    lines = []
    if before.head != after.head:
        lines.append(f"head: checkpoint {before.head} -> checkpoint {after.head}")
    if before.restore_generation != after.restore_generation:
        lines.append(
            f"restore generation: {before.restore_generation} -> {after.restore_generation}"
            + (
                f" (a restore in flight to checkpoint {after.restore.target}: the sinks "
                "are rewound to it)"
                if after.restore is not None
                else ""
            )
        )
    lines += _set_change("retained", before.retained_ids(), after.retained_ids())
    lines += _set_change(
        "pending",
        [p.checkpoint_id for p in before.pending],
        [p.checkpoint_id for p in after.pending],
    )
    lines += _set_change(
        "GC queue",
        [e.checkpoint_id for e in before.discarded],
        [e.checkpoint_id for e in after.discarded],
    )
    lines += _set_change("held", before.held_ids(), after.held_ids())
    if before.cascade != after.cascade:
        lines.append(f"cascade fence: {_fence(before)} -> {_fence(after)}")
    return lines


def _fence(record: ControlRecord) -> str:
    fence = record.cascade
    return "none" if fence is None else f"cascade {fence.cascade} (following '{fence.root}')"


def _set_change(name: str, before: Iterable[int], after: Iterable[int]) -> list[str]:
    old, new = set(before), set(after)
    if old == new:
        return []
    parts = []
    if new - old:
        parts.append(f"adds {sorted(new - old)}")
    if old - new:
        parts.append(f"drops {sorted(old - new)}")
    return [f"{name}: {sorted(old)} -> {sorted(new)} ({', '.join(parts)})"]


def same_substance(before: ControlRecord, after: ControlRecord) -> bool:
    """Whether `after` changes nothing but the generation, the restore and stamps: then
    a forced repair has nothing to do (it would only abandon the open checkpoints)."""
    return not [line for line in changes(before, after) if not line.startswith("restore gen")]
