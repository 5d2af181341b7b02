"""Which subtask of a consumer the rows of its input channels go to. A channel file is
written per key-group range of its producer's subtask, so its rows belong to the consumer
subtasks owning those key groups. When a file spans several consumer subtasks (producer
and consumer parallelism differ) its rows are shared out by key-group overlap: an
estimate per subtask; the operator's total is exact."""

from __future__ import annotations

from collections.abc import Iterable

from batchpoint.protocol.checkpoint import FileHandle
from batchpoint.state.keygroups import KeyGroupRange, key_group_range_for_subtask


def channel_rows_by_subtask(
    files: Iterable[FileHandle], max_parallelism: int, parallelism: int
) -> dict[int, int]:
    """subtask -> rows of `files` it reads (a file without key groups: subtask 0's)."""
    ranges = [
        key_group_range_for_subtask(max_parallelism, parallelism, i) for i in range(parallelism)
    ]
    rows: dict[int, int] = {}
    for handle in files:
        if handle.key_group_range is None:
            rows[0] = rows.get(0, 0) + handle.rows
            continue
        for subtask, share in _shares(KeyGroupRange(*handle.key_group_range), ranges, handle.rows):
            rows[subtask] = rows.get(subtask, 0) + share
    return rows


def _shares(
    groups: KeyGroupRange, ranges: list[KeyGroupRange], total: int
) -> list[tuple[int, int]]:
    """`total` split by overlap with each range, in whole rows that add up to `total`."""
    overlaps = [(i, r.intersection(groups).size) for i, r in enumerate(ranges)]
    overlaps = [(i, n) for i, n in overlaps if n > 0]
    span = sum(n for _, n in overlaps)
    if span == 0:
        return [(0, total)]
    shares = [(i, total * n // span) for i, n in overlaps]
    left = total - sum(s for _, s in shares)
    # Largest remainders first, so the shares add up to the total exactly.
    order = sorted(range(len(overlaps)), key=lambda k: -(total * overlaps[k][1] % span))
    for k in order[:left]:
        shares[k] = (shares[k][0], shares[k][1] + 1)
    return shares
