"""Runs whose colour must tell the truth (a reviewer's findings, invariant 11): a trigger
refused for a lost or damaged control record fails the run instead of skipping it (a
skipped trigger makes a green run, every schedule); a savepoint asked for by hand fails on
any refusal; and the cleanup settles the checkpoint of a trigger that wrote it but died
before its XCom. The task callables on a local root, fake epochs, no scheduler."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from airflow.exceptions import AirflowFailException

from batchpoint.airflow.operators.checkpoint import (
    CheckpointCleanupOperator,
    TriggerCheckpointOperator,
)
from batchpoint.airflow.operators.savepoint import TriggerSavepointOperator
from batchpoint.ops.runs import checkpoint_of_run, trigger_for_run
from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointStatus
from support.cli import fresh_root, payments_driver

REF = "demo.payments:pipeline"


@pytest.fixture
def root(tmp_path, monkeypatch) -> str:
    uri = fresh_root(tmp_path, monkeypatch)
    monkeypatch.setenv("BATCHPOINT_PIPELINE_REF", REF)
    monkeypatch.setenv("BATCHPOINT_SKIP_IDLE_EPOCHS", "false")
    return uri


@pytest.mark.parametrize("operator", [TriggerCheckpointOperator, TriggerSavepointOperator])
def test_a_trigger_refused_for_a_lost_control_record_fails_the_run(root, operator) -> None:
    driver = payments_driver(root, epochs=2)
    driver.store.delete(driver.coordinator.control.key)
    trigger = operator(task_id="trigger", pipeline_ref=REF)
    context = {"run_id": "manual-1", "ti": SimpleNamespace(try_number=1), "params": {}}
    with pytest.raises(AirflowFailException, match="run `batchpoint repair`"):
        trigger.execute(context)


def test_a_savepoint_run_fails_on_every_refusal() -> None:
    assert set(TriggerSavepointOperator.fails_on) == set(CheckpointFailureReason)


class _RunOfADeadTrigger:
    """The run's task instance: no XCom from the trigger, which failed."""

    def __init__(self, run_id: str) -> None:
        self.dag_id, self.run_id, self.try_number = "payments_checkpoint", run_id, 1

    def xcom_pull(self, task_ids: Any = None) -> None:
        return None

    def get_task_states(self, dag_id: str, run_ids: list[str]) -> dict:
        return {self.run_id: {"trigger": "failed", "finalize": "upstream_failed"}}


def test_the_cleanup_settles_the_checkpoint_a_dead_trigger_wrote(root) -> None:
    driver = payments_driver(root, epochs=1)
    run = "scheduled__2026-12-07T13:00:00+00:00"
    orphan = trigger_for_run(driver, run).checkpoint_id  # written; the XCom never was
    assert checkpoint_of_run(driver.coordinator, run) == orphan
    cleanup = CheckpointCleanupOperator(task_id="cleanup", pipeline_ref=REF)
    with pytest.raises(AirflowFailException, match=f"checkpoint {orphan} aborted"):
        cleanup.execute({"run_id": run, "ti": _RunOfADeadTrigger(run)})
    outcome = driver.coordinator.get_outcome(orphan)
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    assert driver.coordinator.pending_checkpoints() == []
    # the next scheduled run is not held back by it (max_concurrent 1)
    trigger = TriggerCheckpointOperator(task_id="trigger", pipeline_ref=REF)
    nxt = {"run_id": "scheduled__2026-12-07T13:05:00+00:00", "ti": SimpleNamespace(try_number=1)}
    assert trigger.execute(nxt)["checkpoint_id"] == orphan + 1


@pytest.mark.parametrize(
    "target",
    ["file:///somewhere/else", "s3://AKIAEXAMPLE:wJalrSECRET@bucket/sp", "../escape"],
    ids=["outside", "keys", "dots"],
)
def test_a_savepoint_run_with_a_bad_target_fails_before_anything_is_triggered(root, target) -> None:
    """A reviewer's finding: the target was checked at the export only, after the
    savepoint's epoch ran (and, asked to stop, after the pipeline stopped); a target with
    keys in it was stored in the checkpoint's record on the way."""
    driver = payments_driver(root, epochs=1)
    before = driver.coordinator.checkpoint_ids()
    trigger = TriggerSavepointOperator(task_id="trigger", pipeline_ref=REF)
    params = {"target": target, "stop_pipeline": False}
    context = {"run_id": "manual-1", "ti": SimpleNamespace(try_number=1), "params": params}
    with pytest.raises(AirflowFailException, match="savepoint target: ") as refused:
        trigger.execute(context)
    assert "wJalrSECRET" not in str(refused.value)
    assert driver.coordinator.checkpoint_ids() == before
    assert driver.coordinator.stopped() is None
