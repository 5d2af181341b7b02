"""How many Spark tasks read a source's epoch: its splits packed into runs, as Spark packs
the files of its own file scans (FilePartition), so that an epoch of a few small files
costs one wave of tasks instead of a task per file.

A task's share is the epoch's bytes over the slots Spark runs at once, between one
file's open cost and Spark's largest file partition; each file counts its size and the
open cost, so many tiny files still spread. Runs keep the splits' order, so reading the
tasks in order yields the rows in the order one task per file did."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

from batchpoint.sources.files import SourceSplit

#: Spark's defaults for its own scans (spark.sql.files.openCostInBytes and
#: spark.sql.files.maxPartitionBytes): what opening a file costs, in bytes of reading,
#: and the most a task reads.
OPEN_COST = 4 * 1024 * 1024
MAX_TASK_BYTES = 128 * 1024 * 1024

S = TypeVar("S", bound=SourceSplit)


def pack_splits(
    splits: Sequence[S],
    slots: int | None,
    *,
    open_cost: int = OPEN_COST,
    max_task_bytes: int = MAX_TASK_BYTES,
) -> list[list[S]]:
    """`splits` in consecutive runs, one per Spark task. `slots` is how many tasks Spark
    runs at once; None (not known) keeps one split per task."""
    if slots is None:
        return [[split] for split in splits]
    if slots < 1 or open_cost < 0 or max_task_bytes < 1:
        raise ValueError(f"pack_splits: slots ({slots}) and task bytes ({max_task_bytes}) "
                         f"must be positive, the open cost ({open_cost}) not negative")  # fmt: skip
    total = sum(split.size + open_cost for split in splits)
    share = min(max_task_bytes, max(open_cost, math.ceil(total / slots)))
    runs: list[list[S]] = []
    taken = 0
    for split in splits:
        # As Spark's FilePartition: a run closes before the split that would take it
        # past its share; a split larger than the share is a run alone.
        if runs and taken + split.size <= share:
            runs[-1].append(split)
            taken += split.size + open_cost
            continue
        runs.append([split])
        taken = split.size + open_cost
    return runs
