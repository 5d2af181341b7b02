"""`settle_run` reports what happened, not what it planned (found by a reviewer): a
finalize that ended expired reported 'finalized', and an abort that found another
actor's COMPLETED reported 'aborted'. And a run's checkpoint a stop-with-savepoint
abandoned is settled STOPPED (never counted), not expired or "ended early"."""

from __future__ import annotations

import hashlib

import pytest

from batchpoint.ops.runs import settle_run, trigger_for_run
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointStatus,
    CheckpointType,
    FileHandle,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.protocol.reads import AckProgress
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
    config = CheckpointConfig(timeout=60, tolerable_failed_checkpoints=0)
    return PipelineDriver(build_pipeline(), ref, config, clock=clock)


def ack(driver: PipelineDriver, checkpoint_id: int, tasks: list[TaskId]) -> None:
    c = driver.coordinator
    for task in tasks:
        key = c.layout.task_data_prefix(checkpoint_id, task, "a") + "f"
        c.store.put(key, b"x")
        handle = FileHandle(key, 1, hashlib.sha256(b"x").hexdigest())
        c.acknowledge(checkpoint_id, task, "a", [handle])


def test_a_finalize_that_ends_expired_reports_expired(driver, clock) -> None:
    """Every ack is in, one written after the deadline: the finalize expires it."""
    pending = trigger_for_run(driver, "r")
    ack(driver, pending.checkpoint_id, list(pending.expected_tasks[:-1]))
    clock.advance(61)
    ack(driver, pending.checkpoint_id, list(pending.expected_tasks[-1:]))  # a straggler

    settled = settle_run(driver, pending.checkpoint_id)
    assert settled.outcome is not None
    assert settled.outcome.reason is CheckpointFailureReason.EXPIRED
    assert settled.action is SettlementAction.EXPIRED
    assert settled.to_json()["action"] == "expired"


def test_an_abort_that_finds_another_actors_completion_reports_none(driver, monkeypatch) -> None:
    """The run ended early as the cleanup read it; then the last ack landed and the
    finalize task completed it: the cleanup's abort found that outcome."""
    pending = trigger_for_run(driver, "r")
    c, cid = driver.coordinator, pending.checkpoint_id
    ack(driver, cid, list(pending.expected_tasks[:-1]))
    real_progress = c.progress

    def read_then_the_finalize_task_completes_it(checkpoint_id: int) -> AckProgress:
        seen = real_progress(checkpoint_id)  # one task missing
        ack(driver, checkpoint_id, list(pending.expected_tasks[-1:]))
        c.try_finalize(checkpoint_id)
        return seen

    monkeypatch.setattr(c, "progress", read_then_the_finalize_task_completes_it)
    settled = settle_run(driver, cid)
    monkeypatch.undo()

    assert settled.status is CheckpointStatus.COMPLETED
    assert settled.action is SettlementAction.NONE
    assert settled.message == f"checkpoint {cid} completed"


def test_a_run_that_finalizes_it_reports_finalized(driver) -> None:
    pending = trigger_for_run(driver, "r")
    ack(driver, pending.checkpoint_id, list(pending.expected_tasks))
    settled = settle_run(driver, pending.checkpoint_id)
    assert (settled.status, settled.action) == (
        CheckpointStatus.COMPLETED,
        SettlementAction.FINALIZED,
    )


@pytest.mark.parametrize("past_deadline", [False, True], ids=["ended-early", "expired"])
def test_a_run_whose_checkpoint_a_stop_abandoned_settles_it_stopped(
    driver, clock, past_deadline: bool
) -> None:
    pending = trigger_for_run(driver, "r")  # its tasks still running
    c = driver.coordinator
    stop = driver.trigger(
        CheckpointType.SAVEPOINT, CheckpointProperties(stop_pipeline=True), timeout=600
    )
    stopping = c.control_record().stopping
    assert stopping is not None and stopping.abandoned == (pending.checkpoint_id,)
    if past_deadline:
        clock.advance(61)

    settled = settle_run(driver, pending.checkpoint_id)
    assert settled.outcome is not None
    assert settled.outcome.reason is CheckpointFailureReason.STOPPED, settled.message
    assert settled.action is SettlementAction.ABORTED
    assert c.failures.state().failed_ids == ()  # not counted: the pipeline is not FAILED
    assert stop.checkpoint_id > pending.checkpoint_id
