"""A checkpoint's barrier as the drill-down shows it: one row per source partition, its
fields labelled (how many files it covers, the last of them, the digest that checks
them), not the stored JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from batchpoint.errors import ConfigError
from batchpoint.sources.barrier import PartitionOffset

BARRIER_COLUMNS = ["source", "partition", "files covered", "last file", "digest"]
#: How much of a digest is shown; the whole one is the cell's title.
DIGEST_SHOWN = 19  # "sha256:" and 12 hex digits


def _digest(digest: str | None) -> dict[str, str] | str:
    if not digest:
        return "not recorded"
    shown = digest if len(digest) <= DIGEST_SHOWN else digest[:DIGEST_SHOWN] + "…"
    return {"text": shown, "title": digest}


def _partition_row(source: str, partition: str, value: Any) -> list[Any]:
    try:
        offset = PartitionOffset.coerce(value)
    except ConfigError:  # a shape this reader does not know: shown as it is
        return [source, partition, str(value), "", ""]
    return [source, partition, str(offset.offset), offset.last or "", _digest(offset.digest)]


def barrier_rows(barrier: Mapping[str, Any]) -> list[list[Any]]:
    """The cells of the barrier's table, by source then partition (a partition it does
    not name is at offset 0, so it has no row)."""
    rows = []
    for source, partitions in sorted(barrier.items()):
        if not isinstance(partitions, Mapping):
            rows.append([source, "", str(partitions), "", ""])
            continue
        rows += [_partition_row(source, p, v) for p, v in sorted(partitions.items())]
    return rows
