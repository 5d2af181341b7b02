"""Channel rows go to the consumer subtasks that own their key groups; a file spanning
several subtasks is shared out by key-group overlap, and the shares add up exactly."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from batchpoint.protocol.checkpoint import AckRecord, FileHandle, TaskMetrics
from batchpoint.protocol.layout import TaskId
from batchpoint.runtime.task_metrics import channel_rows_by_subtask
from batchpoint.state.keygroups import key_group_range_for_subtask


def handle(rows: int, groups: tuple[int, int] | None) -> FileHandle:
    return FileHandle("k", 1, hashlib.sha256(b"").hexdigest(), rows, groups, "channel-x")


def test_files_within_one_subtask_go_to_it():
    ranges = [key_group_range_for_subtask(128, 4, i) for i in range(4)]
    files = [handle(10 * (i + 1), (r.start, r.end)) for i, r in enumerate(ranges)]
    assert channel_rows_by_subtask(files, 128, 4) == {0: 10, 1: 20, 2: 30, 3: 40}
    assert channel_rows_by_subtask([handle(7, None)], 128, 4) == {0: 7}


@given(
    producers=st.integers(1, 8),
    consumers=st.integers(1, 8),
    rows=st.lists(st.integers(0, 10_000), min_size=8, max_size=8),
)
def test_shares_add_up_whatever_the_parallelisms(producers, consumers, rows):
    files = []
    for i in range(producers):
        r = key_group_range_for_subtask(64, producers, i)
        files.append(handle(rows[i], (r.start, r.end)))
    shares = channel_rows_by_subtask(files, 64, consumers)
    assert sum(shares.values()) == sum(rows[:producers])
    assert set(shares) <= set(range(consumers))
    if producers == consumers:
        assert all(shares.get(i, 0) == rows[i] for i in range(producers))


def test_old_acks_without_the_metrics_read_as_zeros():
    assert TaskMetrics.from_json({"records_out": 5}) == TaskMetrics(records_out=5)
    old_ack = AckRecord(
        1, TaskId("op", 0), "a1", (handle(3, None),), TaskMetrics(1.0), 0.0
    ).to_body()
    del old_ack["metrics"]
    assert AckRecord.from_body("old", old_ack).metrics == TaskMetrics()
