"""The workload of bench_peer.py: each epoch's events (a pure function of the size and
the epoch), written as Parquet files, and the totals they must sum to, computed
independently of both engines (numpy over every generated event)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

EVENTS = pa.schema([pa.field("key", pa.string()), pa.field("amount", pa.int64())])


@dataclass(frozen=True)
class Size:
    keys: int
    events: int  # per epoch
    files: int
    first_epoch_touches_every_key: bool = False  # sparse: epoch 0 loads the whole state


SIZES = {
    "small": Size(10_000, 100_000, 4),
    "medium": Size(1_000_000, 2_000_000, 8),
    "sparse": Size(1_000_000, 10_000, 4, first_epoch_touches_every_key=True),
    # bench_cost_curve's upper sizes: about 250-500k events a file, as medium's.
    "large": Size(3_000_000, 6_000_000, 16),
    "xlarge": Size(10_000_000, 20_000_000, 40),
}


def epoch_events(size: Size, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """Key indexes and amounts of one epoch, a pure function of (size, epoch)."""
    rng = np.random.default_rng([7, epoch])
    if size.first_epoch_touches_every_key and epoch == 0:
        keys = rng.permutation(size.keys)
    elif size.first_epoch_touches_every_key:
        keys = rng.choice(size.keys, size=size.events, replace=False)  # 1% of the keys
    else:
        keys = rng.integers(0, size.keys, size=size.events)
    return keys, rng.integers(-1000, 1000, size=len(keys))


def write_epoch(source_dir: Path, size: Size, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    keys, amounts = epoch_events(size, epoch)
    for i, part in enumerate(np.array_split(np.arange(len(keys)), size.files)):
        # Named a file at a time: numpy's unicode arrays of 20M keys take gigabytes.
        names = np.char.add("k", np.char.zfill(keys[part].astype(str), 7))
        table = pa.table({"key": names, "amount": amounts[part]}, schema=EVENTS)
        # Written aside, then renamed: Structured Streaming must never list a half file.
        final = source_dir / f"e{epoch:05d}-f{i:03d}.parquet"
        pq.write_table(table, source_dir / f".{final.name}.tmp")
        (source_dir / f".{final.name}.tmp").rename(final)
    return keys, amounts


def expected_totals(size: Size, epochs: int) -> dict[str, tuple[int, int]]:
    count, total = expected_arrays(size, epochs)
    return {f"k{i:07d}": (int(count[i]), int(total[i])) for i in np.flatnonzero(count)}


def expected_arrays(size: Size, epochs: int) -> tuple[np.ndarray, np.ndarray]:
    """Count and sum per key index (key `k{i:07d}`; a count of 0: no such key), the form
    a check of 10M keys can afford where a dict of them takes gigabytes."""
    count = np.zeros(size.keys, dtype=np.int64)
    total = np.zeros(size.keys, dtype=np.int64)
    for epoch in range(epochs):
        keys, amounts = epoch_events(size, epoch)
        count += np.bincount(keys, minlength=size.keys)
        total += np.bincount(keys, weights=amounts, minlength=size.keys).astype(np.int64)
    return count, total
