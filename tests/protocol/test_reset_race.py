"""`batchpoint reset` beside a settle of the failed checkpoint it forgives (found by a
reviewer): the settler died after counting the failure and before clearing its pending
marker; the next settle finished it and counted it again, FAILED right after the reset."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchpoint.ops.maintenance import reset
from batchpoint.protocol.checkpoint import CheckpointFailureReason
from batchpoint.protocol.failures import PipelineStatus
from batchpoint.storage.local import LocalObjectStore
from support.clock import FakeClock
from support.protocol_steps import complete, coordinator


class Killed(Exception):
    pass


def test_a_failure_counted_before_a_reset_is_not_counted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = coordinator(LocalObjectStore(tmp_path), FakeClock(), tolerable_failed_checkpoints=0)
    complete(c)
    failed = c.trigger({"src": {"p0": 2}}).checkpoint_id
    records = c.finalizer._records

    def killed(_checkpoint_id: int) -> None:
        raise Killed  # the settler dies after the outcome and the count

    with monkeypatch.context() as m:
        m.setattr(records, "delete_pending", killed)
        with pytest.raises(Killed):
            c.expire(failed)
    assert c.failures.state().status is PipelineStatus.FAILED

    assert reset(c).status == PipelineStatus.RUNNING.value
    c.settle()  # another actor finishes what the dead one left
    assert c.failures.state().status is PipelineStatus.RUNNING
    assert c.failures.state().failed_ids == ()

    newer = c.trigger({"src": {"p0": 3}}).checkpoint_id
    c.expire(newer)  # a failure after the reset still counts
    assert c.failures.state().failed_ids == (newer,)


def test_an_older_checkpoint_failing_after_a_reset_still_counts(tmp_path: Path) -> None:
    """Two runs at once: the newer failed and was reset; the older, still running then,
    failed afterwards: a failure never counted (the reviewer of the first fix)."""
    c = coordinator(
        LocalObjectStore(tmp_path), FakeClock(), tolerable_failed_checkpoints=0, max_concurrent=2
    )
    complete(c)
    older = c.trigger({"src": {"p0": 2}}).checkpoint_id
    newer = c.trigger({"src": {"p0": 3}}).checkpoint_id
    c.abort(newer, CheckpointFailureReason.DECLINED, "task failed")
    reset(c)
    c.abort(older, CheckpointFailureReason.DECLINED, "task failed")
    assert c.failures.state().status is PipelineStatus.FAILED
    assert c.failures.state().failed_ids == (older,)
