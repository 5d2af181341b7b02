"""A reviewer's findings on the checkpoint DAG's verdicts (invariants 8, 11, 12, 18):

- the cleanup that completed a checkpoint sends its asset events and does not then fail
  for the ack sensor's failure (Airflow sends outlet events only with a success);
- an operator task that fails for good on a configuration mistake declines the
  checkpoint with that mistake, so it aborts at once instead of expiring;
- the ack wait ends by the checkpoint's own deadline, also when storage did not answer
  the sensor's first look, so the run's cleanup runs before its dagrun_timeout.

Real task callables on a local root (fake epochs), the trigger's async loop driven with
asyncio; faults injected by wrapping the real store or launcher. No scheduler, no Spark."""

from __future__ import annotations

import asyncio
import time
import types
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from airflow.sdk.execution_time.context import OutletEventAccessors

from batchpoint.airflow.assets import cleanup_alias
from batchpoint.airflow.compat import AirflowFailException
from batchpoint.airflow.config import AirflowDeployment
from batchpoint.airflow.launchers import SparkJobResult
from batchpoint.airflow.operators import checkpoint as operators
from batchpoint.airflow.operators.checkpoint import CheckpointCleanupOperator, SparkOperatorJob
from batchpoint.airflow.sensors import CheckpointAckSensor
from batchpoint.airflow.triggers import DECLINED, TIMEOUT, CheckpointAckTrigger, ack_event
from batchpoint.errors import StorageUnavailable
from batchpoint.ops.runs import trigger_for_run
from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointStatus
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.runtime.job_status import JobReport, JobStatus
from batchpoint.storage.local import LocalObjectStore
from support import fake_epochs
from support.cli import fresh_root, payments_driver

pytestmark = pytest.mark.airflow

REF = "demo.payments:pipeline"
RUN = "scheduled__2026-12-07T13:00:00+00:00"


@pytest.fixture
def root(tmp_path, monkeypatch) -> str:
    uri = fresh_root(tmp_path, monkeypatch)
    monkeypatch.setenv("BATCHPOINT_PIPELINE_REF", REF)
    monkeypatch.setenv("BATCHPOINT_SKIP_IDLE_EPOCHS", "false")
    monkeypatch.setenv("BATCHPOINT_SPARK_MODE", "local")
    monkeypatch.delenv("AIRFLOW_CONN_BATCHPOINT_STORAGE", raising=False)
    return uri


class _Run:
    """The cleanup's task instance: the trigger's XCom and the run's task states."""

    def __init__(self, checkpoint_id: int, states: dict[str, str]) -> None:
        self.dag_id, self.run_id, self.try_number, self.map_index = "payments", RUN, 1, -1
        self.checkpoint_id, self.states = checkpoint_id, states

    def xcom_pull(self, task_ids: Any = None) -> dict[str, Any]:
        return {"checkpoint_id": self.checkpoint_id}

    def get_task_states(self, dag_id: str, run_ids: list[str]) -> dict:
        return {self.run_id: self.states}


def _cleanup(checkpoint_id: int, states: dict[str, str]) -> tuple[Any, list[Any]]:
    """Run the cleanup: what it returned (or raised), and the asset events it added."""
    events = OutletEventAccessors()
    cleanup = CheckpointCleanupOperator(
        task_id="cleanup", pipeline_ref=REF, outlets=[cleanup_alias("payments")]
    )
    context = {"run_id": RUN, "ti": _Run(checkpoint_id, states), "outlet_events": events}
    try:
        ended: Any = cleanup.execute(context)
    except AirflowFailException as exc:
        ended = exc
    return ended, list(events[cleanup_alias("payments")].asset_alias_events)


# -- the cleanup that completes a checkpoint sends its events ----------------------------


@pytest.mark.parametrize("failed", ["wait_for_acks", "audit"])
def test_a_cleanup_that_completes_the_checkpoint_is_not_failed_by_the_ack_wait(root, failed):
    driver = payments_driver(root, epochs=1)
    pending = trigger_for_run(driver, RUN)
    fake_epochs.ack_all(driver, pending)  # every task acked in time
    # the sensor (or the audit) failed, e.g. an S3 outage at its deadline: finalize never ran
    states = {"trigger": "success", failed: "failed", "finalize": "upstream_failed"}
    ended, events = _cleanup(pending.checkpoint_id, states)
    assert not isinstance(ended, Exception), f"the cleanup failed: {ended}"
    assert ended["checkpoint_id"] == pending.checkpoint_id
    outcome = driver.coordinator.get_outcome(pending.checkpoint_id)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    sent = {(e.dest_asset_key.uri, e.extra["checkpoint_id"]) for e in events}
    assert ("x-batchpoint://payments", pending.checkpoint_id) in sent


def test_a_cleanup_that_sent_events_never_fails_after_them(root):
    driver = payments_driver(root, epochs=1)
    pending = trigger_for_run(driver, RUN)
    fake_epochs.ack_all(driver, pending)
    operator = f"operators.{pending.expected_tasks[0].operator}"  # failed after it acked
    states = {operator: "failed", "wait_for_acks": "success", "finalize": "failed"}
    ended, events = _cleanup(pending.checkpoint_id, states)
    assert events, "a completed checkpoint without its asset events"
    assert not isinstance(ended, Exception), "events added, then failed: Airflow drops them"


def test_a_cleanup_still_fails_the_run_whose_checkpoint_aborted(root):
    driver = payments_driver(root, epochs=1)
    pending = trigger_for_run(driver, RUN)  # nobody acked; the sensor failed
    states = {"wait_for_acks": "failed", "finalize": "upstream_failed"}
    ended, events = _cleanup(pending.checkpoint_id, states)
    assert isinstance(ended, AirflowFailException) and "aborted" in str(ended)
    assert events == []


# -- an operator task that fails for good declines ---------------------------------------


class _BadConfigLauncher:
    """A fault: what the real launcher returns when the job printed bad-config."""

    def launch(self, settings, checkpoint_id, operator, attempt, log) -> SparkJobResult:
        said = "pipeline 'payments' has no operator setting 'x'"
        report = JobReport(JobStatus.BAD_CONFIG, checkpoint_id, operator, said)
        return SparkJobResult(2, 0.1, ["error: bad setting"], report)


def _operator_task(operator: str) -> SparkOperatorJob:
    return SparkOperatorJob(
        task_id=operator,
        pipeline_ref=REF,
        operator=operator,
        deployment=AirflowDeployment.from_env(),
        retries=2,  # retries left: a config mistake fails for good all the same
    )


def _run_operator_task(task: SparkOperatorJob, checkpoint_id: int) -> AirflowFailException:
    ti = types.SimpleNamespace(
        try_number=1, map_index=-1, xcom_pull=lambda task_ids: {"checkpoint_id": checkpoint_id}
    )
    with pytest.raises(AirflowFailException) as failed:
        task.execute({"ti": ti, "run_id": RUN})
    return failed.value


def _declined_at_once(driver: Any, checkpoint_id: int, deadline: float, words: str) -> None:
    event = ack_event(driver.coordinator.progress(checkpoint_id), deadline, time.time())
    assert event is not None and event["status"] == DECLINED, event
    assert words in event["message"]
    outcome = driver.coordinator.get_outcome(checkpoint_id)
    assert outcome is not None and outcome.reason is CheckpointFailureReason.DECLINED
    assert words in outcome.message


def test_a_bad_config_job_declines_with_its_mistake(root, monkeypatch):
    driver = payments_driver(root, epochs=1)
    pending = trigger_for_run(driver, RUN)
    monkeypatch.setattr(operators, "launcher_for", lambda deployment, ref: _BadConfigLauncher())
    task = _operator_task(pending.expected_tasks[0].operator)
    failed = _run_operator_task(task, pending.checkpoint_id)
    assert "exit 2" in str(failed)
    _declined_at_once(driver, pending.checkpoint_id, pending.deadline, "no operator setting 'x'")


def test_a_launcher_config_error_declines_with_its_mistake(root, monkeypatch):
    # the real connect launcher and settings: a connection id that does not exist
    monkeypatch.setenv("BATCHPOINT_SPARK_MODE", "connect")
    monkeypatch.setenv("BATCHPOINT_SPARK_CONN_ID", "bp_spark_typo")
    for name in ("BATCHPOINT_SPARK_REMOTE", "AIRFLOW_CONN_BP_SPARK_TYPO"):
        monkeypatch.delenv(name, raising=False)
    driver = payments_driver(root, epochs=1)
    pending = trigger_for_run(driver, RUN)
    task = _operator_task(pending.expected_tasks[0].operator)
    failed = _run_operator_task(task, pending.checkpoint_id)
    assert "bp_spark_typo" in str(failed)
    _declined_at_once(driver, pending.checkpoint_id, pending.deadline, "bp_spark_typo")


# -- the ack wait ends by the checkpoint's own deadline ----------------------------------


class _OutageStore(LocalObjectStore):
    """The real local store, with S3 restarting while `down`."""

    down = False

    def get(self, key: str, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            raise StorageUnavailable("s3 restarting")
        return super().get(key, *args, **kwargs)


TIMEOUT_S, GRACE_S = 600.0, 120.0  # the settings' default checkpoint timeout; cleanup grace


def _defer_in_an_outage(tmp_path: Path, xcom: dict[str, Any] | None) -> tuple[Any, float]:
    """The sensor as epoch_dag renders it, whose first look meets S3 down: the trigger it
    defers to, and when the run (and its checkpoint) began."""
    store = _OutageStore(tmp_path / "store")
    c = CheckpointCoordinator(store, "p")
    c.register(simple_pipeline("p", [("op", 2)]))
    run_started = time.time()
    pending = c.trigger({}, timeout=TIMEOUT_S)
    sensor = CheckpointAckSensor(
        task_id="wait_for_acks", pipeline="p", deferrable=True, timeout=TIMEOUT_S + GRACE_S
    )
    sensor.coordinator = lambda pipeline, settings=None: c  # type: ignore[method-assign]
    found = {"checkpoint_id": pending.checkpoint_id, **(xcom or {})}
    ti = types.SimpleNamespace(xcom_pull=lambda task_ids: found)
    store.down = True
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({"ti": ti})  # type: ignore[typeddict-item]
    return deferred.value.trigger, run_started


def test_an_unanswered_first_look_waits_no_longer_than_the_checkpoint(root, tmp_path):
    trigger, run_started = _defer_in_an_outage(tmp_path, None)
    # dagrun_timeout is the checkpoint timeout + the cleanup grace from the run's start
    assert trigger.deadline < run_started + TIMEOUT_S + GRACE_S
    assert trigger.deadline <= time.time() + TIMEOUT_S


def test_an_unanswered_first_look_waits_until_the_deadline_its_trigger_returned(root, tmp_path):
    trigger, _ = _defer_in_an_outage(tmp_path, {"deadline": 1234.5})
    assert trigger.deadline == 1234.5


def test_the_trigger_ends_by_the_checkpoints_own_deadline(root):
    # A checkpoint whose deadline has passed (its coordinator's clock an hour behind),
    # and a trigger that guessed a later one: it fires at the checkpoint's, at once.
    store = LocalObjectStore(Path(root.removeprefix("file://")))
    c = CheckpointCoordinator(store, "p", clock=lambda: time.time() - 3600)
    c.register(simple_pipeline("p", [("op", 2)]))
    pending = c.trigger({})
    assert pending.deadline < time.time()
    trigger = CheckpointAckTrigger(
        "p", pending.checkpoint_id, time.time() + 3600, "batchpoint_storage", poll_interval=0.05
    )

    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    event = asyncio.run(asyncio.wait_for(first(), 10))
    assert event["status"] == TIMEOUT
    assert event["missing"] == ["op#0", "op#1"]
