"""The checkpoint history read a page at a time (the UI's history tab): newest first,
each page's `older` cursor leading to the next, and a page costs storage requests in
proportion to its length, not to the history's."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointStatus,
    FileHandle,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.protocol.stats import CheckpointStatsTracker
from batchpoint.storage.base import ObjectStore
from batchpoint.storage.local import LocalObjectStore
from support.counting_store import CountingStore


def make_history(store: Any, n: int) -> CheckpointCoordinator:
    """`n` checkpoints: every third aborted, the newest still pending."""
    c = CheckpointCoordinator(store, "paged", CheckpointConfig(max_concurrent=1))
    c.register(simple_pipeline("paged", [("op", 1)]))
    for i in range(1, n + 1):
        cid = c.trigger({"src": {"p0": i}}).checkpoint_id
        if i == n:
            break
        if i % 3 == 0:
            c.abort(cid, CheckpointFailureReason.EXPIRED)
            continue
        for task in c.get_checkpoint(cid).expected_tasks:
            data = f"{task} {cid}".encode()
            key = c.layout.task_data_prefix(cid, task, "a") + "part-0"
            store.put(key, data)
            handle = FileHandle(key, len(data), hashlib.sha256(data).hexdigest(), 1, name="s")
            c.acknowledge(cid, task, "a", (handle,))
        assert c.try_finalize(cid) is not None
    return c


def walk(tracker: CheckpointStatsTracker, limit: int) -> list[list[int]]:
    pages, before = [], None
    while True:
        page = tracker.page(before, limit)
        pages.append([s.checkpoint_id for s in page.checkpoints])
        if page.older is None:
            return pages
        assert page.older == page.checkpoints[-1].checkpoint_id
        before = page.older


def test_pages_walk_the_history_newest_first(store: ObjectStore) -> None:
    c = make_history(store, 12)
    tracker = c.stats
    assert walk(tracker, 5) == [[12, 11, 10, 9, 8], [7, 6, 5, 4, 3], [2, 1]]
    first = tracker.page(limit=3).checkpoints
    assert [s.status for s in first] == [
        CheckpointStatus.PENDING,
        CheckpointStatus.COMPLETED,
        CheckpointStatus.COMPLETED,
    ]
    assert tracker.page(before=10, limit=1).checkpoints[0].status is CheckpointStatus.ABORTED
    # the old whole-history read agrees, oldest first
    assert [s.checkpoint_id for s in tracker.history(4)] == [9, 10, 11, 12]
    assert [s.checkpoint_id for s in tracker.history()] == list(range(1, 13))
    with pytest.raises(ValueError, match="at least one"):
        tracker.page(limit=0)


def test_a_page_costs_the_same_however_long_the_history(tmp_path: Path) -> None:
    costs = []
    for n in (12, 60):  # the same mix of statuses on the newest page
        counting = CountingStore(LocalObjectStore(tmp_path / f"history-{n}"))
        c = make_history(counting, n)
        counting.calls.clear()
        page = c.stats.page(limit=5)
        assert len(page.checkpoints) == 5
        costs.append(dict(counting.calls))
    assert costs[0] == costs[1], costs
    assert "list_dirs" not in costs[1], costs  # no listing of the checkpoint folders


def test_a_pruned_stretch_is_skipped_by_one_listing(store: ObjectStore) -> None:
    c = make_history(store, 20)
    # checkpoints 3..15 gone, as history pruning or GC leaves a long-kept old record (16
    # and 17 are retained: their records stay, and a retained one missing is damage)
    for cid in range(3, 16):
        store.delete_many([info.key for info in store.list(c.layout.checkpoint(cid))])
    tracker = c.stats
    assert walk(tracker, 4) == [[20, 19, 18, 17], [16, 2, 1]]
