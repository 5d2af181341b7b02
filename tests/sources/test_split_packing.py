"""pack_splits: a source epoch's files in consecutive runs, one per Spark task, as Spark
packs its own file scans. Held against the rule itself on generated epochs: the runs
keep every split once and in order, every split joins its run within the share, and
each run ends only where the next split would take it past the share."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from batchpoint.sources import SourceSplit
from batchpoint.sources.split_packing import MAX_TASK_BYTES, OPEN_COST, pack_splits

MB = 1024 * 1024


def splits_of(sizes: list[int]) -> list[SourceSplit]:
    return [SourceSplit("p0", i, f"in/p0/{i:05d}.parquet", size) for i, size in enumerate(sizes)]


def share(sizes: list[int], slots: int, open_cost: int, most: int) -> int:
    total = sum(sizes) + open_cost * len(sizes)
    return min(most, max(open_cost, math.ceil(total / slots)))


def test_generated_epochs_follow_the_rule() -> None:
    rng = random.Random(20261206)
    for _ in range(400):
        count = rng.randint(0, 40)
        scale = rng.choice([1, 1024, MB, 64 * MB, 512 * MB])
        sizes = [rng.randint(0, 4) * rng.randint(0, scale) for _ in range(count)]
        slots = rng.randint(1, 9)
        open_cost = rng.choice([0, 1024, OPEN_COST])
        most = rng.choice([MB, MAX_TASK_BYTES])
        splits = splits_of(sizes)
        runs = pack_splits(splits, slots, open_cost=open_cost, max_task_bytes=most)
        limit = share(sizes, slots, open_cost, most)
        case = f"sizes {sizes}, slots {slots}, open cost {open_cost}, most {most}"

        assert [s for run in runs for s in run] == splits, case
        assert all(runs), case
        for run in runs:
            taken = run[0].size + open_cost
            for split in run[1:]:
                assert taken + split.size <= limit, case
                taken += split.size + open_cost
        for run, after in itertools.pairwise(runs):
            taken = sum(s.size + open_cost for s in run)
            assert taken + after[0].size > limit, case


def test_a_few_small_files_take_one_wave_of_tasks() -> None:
    runs = pack_splits(splits_of([300_000] * 4), 2)
    assert [[s.index for s in run] for run in runs] == [[0, 1], [2, 3]]
    assert len(pack_splits(splits_of([3 * MB] * 16), 2)) == 2


def test_large_files_stay_one_task_each() -> None:
    runs = pack_splits(splits_of([200 * MB] * 5), 2)
    assert [[s.index for s in run] for run in runs] == [[0], [1], [2], [3], [4]]


def test_many_slots_spread_tiny_files() -> None:
    assert len(pack_splits(splits_of([10] * 8), 8)) == 8


def test_unknown_slots_keep_one_split_a_task() -> None:
    splits = splits_of([1, 2, 3])
    assert pack_splits(splits, None) == [[s] for s in splits]
    assert pack_splits([], 4) == []


@pytest.mark.parametrize("slots, open_cost, most", [(0, OPEN_COST, MB), (2, -1, MB), (2, 0, 0)])
def test_bad_arguments_are_refused(slots: int, open_cost: int, most: int) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        pack_splits(splits_of([1]), slots, open_cost=open_cost, max_task_bytes=most)
