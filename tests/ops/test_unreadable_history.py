"""Damage is a finding in the history views too (invariant 11): a checkpoint whose
outcome record cannot be read is a row of its own, UNREADABLE with the problem, and
every other checkpoint still lists, pages and shows."""

from __future__ import annotations

import pytest

from batchpoint.ops.inspect import list_checkpoints, pipeline_stats, show_checkpoint
from batchpoint.ops.overview import checkpoint_page, pipeline_overview
from batchpoint.protocol.checkpoint import CheckpointStatus
from support import protocol_steps as steps

DAMAGE = {
    "truncated JSON": lambda data: data[: len(data) // 2],
    "bad field": lambda data: data.replace(b'"decided_at":"', b'"decided_at":"not a time '),
    "unknown version": lambda data: data.replace(b'"version":2', b'"version":9'),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_garbled_outcome_is_a_row_of_the_history_not_an_error(store, damage):
    c = steps.coordinator(store)
    ids = [steps.complete(c) for _ in range(3)]
    key = c.layout.outcome(ids[1])
    garbled = DAMAGE[damage](store.get(key).data)
    assert garbled != store.get(key).data
    store.put(key, garbled)

    tracker = c.stats
    for rows in (tracker.history(), tracker.page(limit=10).checkpoints[::-1]):
        assert [r.checkpoint_id for r in rows] == ids
        assert [r.status for r in rows] == [
            CheckpointStatus.COMPLETED,
            CheckpointStatus.UNREADABLE,
            CheckpointStatus.COMPLETED,
        ]
        assert key in rows[1].failure_message

    listed = list_checkpoints(c, None)
    assert [s.status for s in listed.checkpoints][1] is CheckpointStatus.UNREADABLE
    assert pipeline_stats(c).summary.count == 3

    detail = show_checkpoint(c, ids[1])
    assert detail.stats.status is CheckpointStatus.UNREADABLE and detail.tasks == []
    assert checkpoint_page(c, ids[1]).files == []
    assert checkpoint_page(c, ids[2]).files  # the others still show their files
    assert pipeline_overview(c, c.store, tracker.page(limit=10)).head == ids[2]
