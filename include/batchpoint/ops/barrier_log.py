"""The barrier of a checkpoint in words, for the trigger task's log: per source, how many
files the epoch reads in each partition (barrier offset minus the base's) and the last
file it reads there."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from batchpoint.protocol.checkpoint import PendingCheckpoint
from batchpoint.sources.barrier import PartitionOffset


def barrier_lines(pending: PendingCheckpoint, max_partitions: int = 20) -> list[str]:
    lines = []
    for source, partitions in sorted(pending.barrier.items()):
        base: Mapping[str, Any] = pending.base_barrier.get(source) or {}
        parts = []
        total = 0
        for name, value in sorted(partitions.items()):
            offset = PartitionOffset.coerce(value)
            before = PartitionOffset.coerce(base[name]).offset if name in base else 0
            new = max(0, offset.offset - before)
            total += new
            last = f", last {offset.last}" if offset.last and new else ""
            parts.append(f"{name}: {new} new file(s) up to offset {offset.offset}{last}")
        shown = parts[:max_partitions]
        if len(parts) > max_partitions:
            shown.append(f"and {len(parts) - max_partitions} more partition(s)")
        head = f"barrier of source '{source}': {total} new file(s) in {len(parts)} partition(s)"
        lines.append(head + (": " + "; ".join(shown) if shown else ""))
    return lines or ["barrier: the pipeline has no sources"]
