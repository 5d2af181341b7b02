"""A restore or a stop-with-savepoint is judged before the deadlines (invariants 1 and 16,
`settlement.superseded`): a periodic checkpoint a stop abandoned, settled after its
deadline, was aborted EXPIRED and counted, so with `tolerable_failed_checkpoints=0` the
pipeline stayed FAILED after the stop's resume (found by a reviewer). Abandoned by a stop
it aborts STOPPED, taken back by a restore RESTORED: neither counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointStatus,
    CheckpointType,
)
from batchpoint.protocol.control import ControlRecord
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.protocol.settlement import SettlementAction, decide_settlement
from batchpoint.storage.local import LocalObjectStore
from support.clock import FakeClock
from support.protocol_steps import ack_all, complete, coordinator
from support.restoring import restore

STOP = CheckpointProperties(stop_pipeline=True)


class Killed(Exception):
    """The restoring process died after its CAS, before its roll-forward."""


def _stopping(tmp_path: Path, clock: FakeClock) -> tuple[CheckpointCoordinator, int, int]:
    """A head, a periodic checkpoint whose tasks still run (timeout 60s), and a
    stop-with-savepoint (timeout 600s) that abandoned it."""
    c = coordinator(LocalObjectStore(tmp_path), clock, tolerable_failed_checkpoints=0, timeout=60)
    complete(c)
    periodic = c.trigger({"src": {"p0": 2}}).checkpoint_id
    stop = c.trigger(
        {"src": {"p0": 2}}, checkpoint_type=CheckpointType.SAVEPOINT, timeout=600, properties=STOP
    ).checkpoint_id
    stopping = c.control_record().stopping
    assert stopping is not None and stopping.abandoned == (periodic,)
    return c, periodic, stop


def _assert_aborted_uncounted(
    c: CheckpointCoordinator, cid: int, reason: CheckpointFailureReason
) -> None:
    outcome = c.get_outcome(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is reason, outcome.message
    assert c.failures.state().failed_ids == ()


def test_a_checkpoint_a_stop_abandoned_settled_past_its_deadline_aborts_stopped(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    c, periodic, stop = _stopping(tmp_path, clock)
    clock.advance(61)  # past the periodic checkpoint's deadline only
    c.settle()  # any actor's: a cleanup, gc, a refused trigger
    _assert_aborted_uncounted(c, periodic, CheckpointFailureReason.STOPPED)

    ack_all(c, stop)
    outcome = c.try_finalize(stop)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    c.resume()
    assert c.trigger({"src": {"p0": 3}}).checkpoint_id > stop  # not FAILED


@pytest.mark.parametrize("how", ["expire", "finalize"])
def test_an_explicit_expiry_or_finalize_of_an_abandoned_checkpoint_aborts_stopped(
    tmp_path: Path, how: str
) -> None:
    """A runner's timeout expires the checkpoint it ran; its finalize task retries."""
    clock = FakeClock()
    c, periodic, _ = _stopping(tmp_path, clock)
    clock.advance(61)
    if how == "expire":
        c.expire(periodic)
    else:
        c.finalize(periodic)
    _assert_aborted_uncounted(c, periodic, CheckpointFailureReason.STOPPED)


def test_a_checkpoint_a_restore_took_back_settled_past_its_deadline_aborts_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restoring process died after its CAS (the generation moved), before its
    roll-forward aborted what it abandoned; a settle past the deadline comes first."""
    clock = FakeClock()
    c = coordinator(LocalObjectStore(tmp_path), clock, tolerable_failed_checkpoints=0, timeout=60)
    first = complete(c)
    late = c.trigger({"src": {"p0": 2}}).checkpoint_id
    real_finish, calls = c.restorer.finish, []

    def dies_before_the_roll_forward() -> None:
        calls.append(1)
        if len(calls) > 1:  # the first call is before the CAS (nothing to finish)
            raise Killed
        real_finish()

    monkeypatch.setattr(c.restorer, "finish", dies_before_the_roll_forward)
    with pytest.raises(Killed):
        restore(c, first)
    monkeypatch.undo()
    assert c.control_record().restore_generation == 1 and c.get_outcome(late) is None

    clock.advance(61)
    c.settle()
    _assert_aborted_uncounted(c, late, CheckpointFailureReason.RESTORED)


def test_a_run_over_after_a_restore_is_settled_restored_not_expired(tmp_path: Path) -> None:
    """The scheduler's rule reads the same precedence (`decide_settlement`)."""
    c = coordinator(LocalObjectStore(tmp_path), FakeClock(), timeout=60)
    pending = c.get_checkpoint(c.trigger({"src": {"p0": 1}}).checkpoint_id)
    progress = c.progress(pending.checkpoint_id)
    restored = ControlRecord(restore_generation=pending.restore_generation + 1)
    past = pending.deadline + 1

    assert decide_settlement(pending, progress, {}, past).action is SettlementAction.EXPIRED
    decision = decide_settlement(pending, progress, {}, past, control=restored)
    assert decision.action is SettlementAction.ABORTED and decision.abort is not None
    assert decision.abort.reason is CheckpointFailureReason.RESTORED
