"""What a scheduler needs around an epoch: attempt ids, an idempotent trigger per run,
declining for a dead job, and settling a run that ended (no Spark, no Airflow)."""

from __future__ import annotations

import hashlib

import pytest

from batchpoint.errors import TriggerRefused
from batchpoint.ops.epoch import finalize
from batchpoint.ops.runs import (
    attempt_id,
    checkpoint_of_run,
    decline_operator,
    settle_run,
    trigger_for_run,
    try_of_attempt,
)
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointStatus,
    CheckpointType,
    FileHandle,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.settlement import SettlementAction
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from support.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def driver(tmp_path, clock) -> PipelineDriver:
    ref = StoreRef.of((tmp_path / "store").as_uri())
    return PipelineDriver(build_pipeline(), ref, CheckpointConfig(timeout=60), clock=clock)


def ack(driver, checkpoint_id, tasks, attempt="a"):
    c = driver.coordinator
    for task in tasks:
        key = c.layout.task_data_prefix(checkpoint_id, task, attempt) + "f"
        c.store.put(key, b"x")
        c.acknowledge(
            checkpoint_id, task, attempt, [FileHandle(key, 1, hashlib.sha256(b"x").hexdigest())]
        )


def test_attempt_ids_are_per_try_and_storage_safe():
    a1 = attempt_id("scheduled__2025-01-01T00:00:00+00:00", 1)
    assert a1 == attempt_id("scheduled__2025-01-01T00:00:00+00:00", 1)
    assert a1 != attempt_id("scheduled__2025-01-01T00:00:00+00:00", 2)
    assert a1 != attempt_id("manual__2025-01-01T00:00:00+00:00", 1)
    assert all(ch.isalnum() or ch == "-" for ch in a1)


def test_an_attempt_tells_its_try_and_map_index_for_its_own_run_only():
    run = "manual__2025-01-01T00:00:00+00:00"
    assert try_of_attempt(attempt_id(run, 3), run) == (3, -1)
    assert try_of_attempt(attempt_id(run, 2, map_index=4), run) == (2, 4)
    assert try_of_attempt(attempt_id(run, 1), "manual__2025-01-02T00:00:00+00:00") is None
    assert try_of_attempt(attempt_id(run, 1) + "-cleanup", run) is None
    assert try_of_attempt("fake", run) is None


def test_a_runs_checkpoint_is_found_by_the_run_id_its_record_holds(driver, clock):
    c = driver.coordinator
    first = trigger_for_run(driver, "run-1")
    ack(driver, first.checkpoint_id, first.expected_tasks)
    finalize(driver, first.checkpoint_id)
    assert checkpoint_of_run(c, "run-1") == first.checkpoint_id
    # the run cleared and run again: a new checkpoint under the same run id, which wins
    clock.advance(60)
    again = trigger_for_run(driver, "run-1")
    ack(driver, again.checkpoint_id, again.expected_tasks)
    finalize(driver, again.checkpoint_id)
    clock.advance(60)
    second = trigger_for_run(driver, "run-2", CheckpointType.SAVEPOINT)
    assert checkpoint_of_run(c, "run-1") == again.checkpoint_id != first.checkpoint_id
    assert checkpoint_of_run(c, "run-2", CheckpointType.SAVEPOINT) == second.checkpoint_id
    assert checkpoint_of_run(c, "run-2", CheckpointType.CHECKPOINT) is None  # another DAG's
    assert checkpoint_of_run(c, "run-3") is None
    assert checkpoint_of_run(c, "run-1", depth=1) is None  # older than the search


def test_a_retried_trigger_returns_the_runs_checkpoint(driver):
    first = trigger_for_run(driver, "run-1")
    again = trigger_for_run(driver, "run-1")  # max_concurrent=1 would refuse a new one
    assert again.checkpoint_id == first.checkpoint_id
    assert first.properties["scheduler_run_id"] == "run-1"


class Killed(Exception):
    """The trigger task's process dying at this point."""


def _die_before_the_pending_record(driver, monkeypatch):
    def killed(pending):
        raise Killed(pending.checkpoint_id)

    monkeypatch.setattr(driver.coordinator.records, "create_pending", killed)


def test_a_retry_whose_first_try_died_before_its_record_triggers_again(driver, monkeypatch):
    """The first try was admitted and died before its pending record: the retry used to
    be refused by max-concurrent (its own admission) and skip until the deadline."""
    c = driver.coordinator
    with monkeypatch.context() as m:
        _die_before_the_pending_record(driver, m)
        with pytest.raises(Killed) as died:
            trigger_for_run(driver, "run-1")
    orphan = died.value.args[0]
    assert [e.run_id for e in c.control.load().pending] == ["run-1"]

    again = trigger_for_run(driver, "run-1")
    assert again.checkpoint_id == orphan + 1
    outcome = c.get_outcome(orphan)
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is CheckpointFailureReason.TRIGGER_FAILED
    assert [e.checkpoint_id for e in c.control.load().pending] == [again.checkpoint_id]
    ack(driver, again.checkpoint_id, again.expected_tasks)
    done = finalize(driver, again.checkpoint_id).outcome
    assert done is not None and done.status is CheckpointStatus.COMPLETED


def test_another_runs_dead_admission_still_holds_a_run_back(driver, monkeypatch):
    with monkeypatch.context() as m:
        _die_before_the_pending_record(driver, m)
        with pytest.raises(Killed):
            trigger_for_run(driver, "run-1")
    with pytest.raises(TriggerRefused) as refused:
        trigger_for_run(driver, "run-2")
    assert refused.value.reason is CheckpointFailureReason.TOO_MANY_CONCURRENT


def test_a_first_try_that_writes_its_record_meanwhile_is_the_runs_checkpoint(driver, monkeypatch):
    c = driver.coordinator
    first = trigger_for_run(driver, "run-1")
    # the retry lists the pending records just before the first try's record lands
    monkeypatch.setattr(c, "pending_checkpoints", lambda: [])
    again = trigger_for_run(driver, "run-1")
    assert again.checkpoint_id == first.checkpoint_id
    assert c.get_outcome(first.checkpoint_id) is None


def test_settle_a_completed_run_publishes_and_collects(driver):
    pending = trigger_for_run(driver, "r")
    ack(driver, pending.checkpoint_id, pending.expected_tasks)
    finalize(driver, pending.checkpoint_id)
    settled = settle_run(driver, pending.checkpoint_id)
    assert settled.status is CheckpointStatus.COMPLETED and settled.action == "none"


def test_settle_finalizes_when_the_finalize_task_never_ran(driver):
    pending = trigger_for_run(driver, "r")
    ack(driver, pending.checkpoint_id, pending.expected_tasks)
    settled = settle_run(driver, pending.checkpoint_id)
    assert (settled.status, settled.action) == (CheckpointStatus.COMPLETED, "finalized")
    assert driver.sinks.manifest("alerts").current == pending.checkpoint_id


def test_settle_declines_for_a_failed_operator_and_discards_its_output(driver):
    pending = trigger_for_run(driver, "r")
    cid = pending.checkpoint_id
    ack(driver, cid, [TaskId("dedup", 0), TaskId("dedup", 1)])
    settled = settle_run(driver, cid, {"balances": "Airflow task operators.balances failed"})
    assert settled.outcome.reason is CheckpointFailureReason.DECLINED
    assert "operators.balances failed" in settled.outcome.message
    assert len(settled.discarded_files) == 2
    assert list(driver.store.list(driver.coordinator.layout.data_prefix(cid))) == []
    assert driver.coordinator.failures.state().consecutive_failures == 1


def test_settle_expires_an_overdue_checkpoint(driver, clock):
    pending = trigger_for_run(driver, "r")
    ack(driver, pending.checkpoint_id, [TaskId("dedup", 0)])
    clock.now += 61
    settled = settle_run(driver, pending.checkpoint_id)
    assert (settled.action, settled.outcome.reason) == ("expired", CheckpointFailureReason.EXPIRED)
    assert "dedup#1" in settled.outcome.message


def test_the_settlement_action_is_the_protocols_enum_reported_as_before(driver, clock):
    pending = trigger_for_run(driver, "r")
    clock.now += 61
    settled = settle_run(driver, pending.checkpoint_id)
    assert settled.action is SettlementAction.EXPIRED
    assert settled.to_json()["action"] == "expired"
    assert settle_run(driver, pending.checkpoint_id).action is SettlementAction.NONE


def test_settle_aborts_a_checkpoint_its_run_left_behind(driver):
    pending = trigger_for_run(driver, "r")
    settled = settle_run(driver, pending.checkpoint_id)
    assert settled.status is CheckpointStatus.ABORTED and settled.action == "aborted"
    assert "ended before every task acknowledged" in settled.outcome.message


def test_decline_operator_declines_only_missing_subtasks(driver):
    pending = trigger_for_run(driver, "r")
    ack(driver, pending.checkpoint_id, [TaskId("dedup", 0)])
    results = decline_operator(driver.coordinator, pending.checkpoint_id, "dedup", "x", "killed")
    assert [r.value for r in results] == ["ABORTED"]
    assert driver.coordinator.status(pending.checkpoint_id) is CheckpointStatus.ABORTED


def test_a_failed_operator_that_had_acked_does_not_block_finalizing(driver):
    """The job acked every subtask, then died before returning (after-ack)."""
    pending = trigger_for_run(driver, "r")
    ack(driver, pending.checkpoint_id, pending.expected_tasks)
    settled = settle_run(driver, pending.checkpoint_id, {"alerts": "Airflow task failed"})
    assert (settled.status, settled.action) == (CheckpointStatus.COMPLETED, "finalized")


def test_the_savepoint_and_checkpoint_dags_keep_their_own_checkpoints_under_one_run_id(driver):
    """`airflow dags test` and API triggers name both DAGs' runs after their date: the
    savepoint DAG's trigger returned the checkpoint DAG's checkpoint, and no savepoint
    was ever taken (found by a reviewer)."""
    run = "manual__2025-01-01T00:00:00+00:00"
    checkpoint = trigger_for_run(driver, run)  # still pending
    savepoint = trigger_for_run(driver, run, CheckpointType.SAVEPOINT)
    assert savepoint.checkpoint_id != checkpoint.checkpoint_id
    assert savepoint.type is CheckpointType.SAVEPOINT
    # each run's retry finds its own
    assert trigger_for_run(driver, run, CheckpointType.SAVEPOINT) == savepoint
    assert trigger_for_run(driver, run) == checkpoint
    for kind, ours in (
        (CheckpointType.CHECKPOINT, checkpoint),
        (CheckpointType.SAVEPOINT, savepoint),
    ):
        assert checkpoint_of_run(driver.coordinator, run, kind) == ours.checkpoint_id


def test_a_savepoint_run_never_aborts_the_checkpoint_runs_admission(driver, monkeypatch):
    """The checkpoint DAG's trigger is between its admission and its record; the
    savepoint DAG's run of the same id took that for its own dead first try and aborted
    a live checkpoint."""
    run = "manual__2025-01-01T00:00:00+00:00"
    c = driver.coordinator
    with monkeypatch.context() as m:
        _die_before_the_pending_record(driver, m)
        with pytest.raises(Killed) as held:
            trigger_for_run(driver, run)  # as far as the savepoint run can tell: alive
    admitted = held.value.args[0]
    with pytest.raises(TriggerRefused):
        trigger_for_run(driver, run, CheckpointType.SAVEPOINT)
    assert c.get_outcome(admitted) is None
    assert [e.checkpoint_id for e in c.control.load().pending] == [admitted]


@pytest.mark.parametrize("winner", ["finalize", "expiry"])
def test_settle_reports_what_another_settler_decided_meanwhile(driver, clock, winner):
    """Between the cleanup's two reads another actor settled the checkpoint; the cleanup
    said it waited for its base, skipped, and left the staged files or the asset event."""
    pending = trigger_for_run(driver, "r")
    c = driver.coordinator
    if winner == "finalize":
        ack(driver, pending.checkpoint_id, pending.expected_tasks)
    else:
        ack(driver, pending.checkpoint_id, pending.expected_tasks[:1])
        clock.advance(61)
    real = c.get_outcome
    reads = []

    def then_the_other_settles(checkpoint_id):
        found = real(checkpoint_id)
        if not reads:
            finalize(driver, checkpoint_id) if winner == "finalize" else c.settle()
        reads.append(found)
        return found

    monkeypatch = pytest.MonkeyPatch()
    with monkeypatch.context() as patch:
        patch.setattr(c, "get_outcome", then_the_other_settles)
        settled = settle_run(driver, pending.checkpoint_id)
    assert reads[0] is None  # the cleanup read it undecided
    held = c.get_outcome(pending.checkpoint_id)
    assert held is not None and settled.status is held.status
    if winner == "expiry":
        assert settled.discarded_files  # what it staged is gone
    else:
        assert driver.sinks.manifest("alerts").current == pending.checkpoint_id


def test_settling_a_base_publishes_the_checkpoint_that_waited_for_it(tmp_path, clock):
    """Two runs at once: B's finalize waited for its base A; A's cleanup completed B
    (its GC settles) without publishing it, and B's output waited for a third run."""
    ref = StoreRef.of((tmp_path / "store").as_uri())
    config = CheckpointConfig(timeout=60, max_concurrent=2)
    driver = PipelineDriver(build_pipeline(), ref, config, clock=clock)
    a = trigger_for_run(driver, "scheduled__A")
    b = trigger_for_run(driver, "manual__B")
    ack(driver, b.checkpoint_id, b.expected_tasks)
    assert finalize(driver, b.checkpoint_id).outcome is None  # waits for its base
    ack(driver, a.checkpoint_id, a.expected_tasks)
    finalize(driver, a.checkpoint_id)

    settle_run(driver, a.checkpoint_id)
    assert driver.coordinator.control_record().head == b.checkpoint_id
    assert driver.sinks.manifest("alerts").current == b.checkpoint_id
