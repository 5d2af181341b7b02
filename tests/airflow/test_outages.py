"""An operator task that met an outage of its Connect server or S3, or a trigger task that
met one of S3, waits for the endpoint to answer again, then asks for a retry at once
(airflow/outages.py): the wait is bounded, says how long it has waited, and the retry
policy that Airflow 3.3 evaluates in the task retries OutageEnded after a second while any
other failure keeps the task's delay."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace

import pytest
import structlog.testing
from botocore.exceptions import EndpointConnectionError

from batchpoint.airflow.operators.checkpoint import TriggerCheckpointOperator
from batchpoint.airflow.outages import (
    RETRY_AT_ONCE,
    OutageEnded,
    endpoint_probe,
    may_be_store_outage,
    outage_over,
    outage_retry_policy,
    wait_until_answers,
)
from batchpoint.errors import ConfigError, StorageUnavailable
from batchpoint.runtime.job_status import JobStatus
from batchpoint.settings import Settings
from devstack.seaweed import SeaweedServer, free_ports
from support.storage_env import use_seaweed


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_wait_ends_when_the_endpoint_answers():
    clock, said = Clock(), []
    answers = iter([False] * 40 + [True])
    waited = wait_until_answers(lambda: next(answers), said.append, 300, clock, clock.sleep)
    assert waited == 40.0
    assert said == [
        "still waiting for it to answer (15s of 300s)",
        "still waiting for it to answer (30s of 300s)",
    ]


def test_the_wait_gives_up_at_its_limit():
    clock = Clock()
    assert wait_until_answers(lambda: False, lambda _: None, 30, clock, clock.sleep) is None
    assert clock.now == 30.0


def test_the_probe_is_the_endpoint_of_the_outage(tmp_path):
    (port,) = free_ports(1)  # nothing listens there
    settings = Settings(f"file://{tmp_path}/root", spark_remote=f"sc://127.0.0.1:{port}")
    down = endpoint_probe(settings, JobStatus.SPARK_UNREACHABLE)
    assert down is not None and down() is False
    assert endpoint_probe(settings, JobStatus.STORAGE_UNAVAILABLE)() is True  # a local store
    # a classic session's master is nothing to watch: the task fails as before
    assert endpoint_probe(Settings(f"file://{tmp_path}"), JobStatus.SPARK_UNREACHABLE) is None
    assert endpoint_probe(settings, JobStatus.OPERATOR_FAILED) is None
    log = logging.getLogger("test")
    assert outage_over(Settings(f"file://{tmp_path}"), JobStatus.SPARK_UNREACHABLE, log) is False


def test_an_ended_outage_is_retried_at_once_and_nothing_else():
    kwargs = outage_retry_policy()
    if not kwargs:
        pytest.skip("this Airflow has no retry policies (3.3 and newer)")
    from airflow.sdk.definitions.retry_policy import RetryAction

    policy = kwargs["retry_policy"]
    ended = policy.evaluate(OutageEnded("the server answers again"), 1, 3)
    assert (ended.action, ended.retry_delay) == (RetryAction.RETRY, RETRY_AT_ONCE)
    other = policy.evaluate(RuntimeError("the operator failed"), 1, 3)
    assert other.action is RetryAction.DEFAULT and other.retry_delay is None
    # it survives DAG serialization, as the scheduler stores the task
    again = type(policy).deserialize(policy.serialize())
    assert again.evaluate(OutageEnded("x"), 1, 3).retry_delay == RETRY_AT_ONCE


def test_what_may_be_a_store_outage():
    assert may_be_store_outage(StorageUnavailable("S3 did not answer"))
    assert may_be_store_outage(ConnectionRefusedError(111, "Connection refused"))
    assert may_be_store_outage(EndpointConnectionError(endpoint_url="http://s3:8333"))
    # batchpoint's own judgements and plain bugs are not: they fail as before
    assert not may_be_store_outage(ConfigError("no such pipeline"))
    assert not may_be_store_outage(KeyError("x"))


@pytest.mark.s3
def test_a_trigger_that_met_an_s3_outage_waits_for_it_then_its_retry_triggers_once(
    tmp_path, monkeypatch
):
    """S3 down when the run's trigger runs (the stack test's restart): the try fails only
    once S3 answers again, with OutageEnded (retried at once), and the retry triggers the
    run's checkpoint; a try with no retry left fails with the store's error at once."""
    server = SeaweedServer(tmp_path / "s3", s3_port=free_ports(1)[0]).start()
    try:
        use_seaweed(monkeypatch, server, "trigger")
        monkeypatch.setenv("BATCHPOINT_SKIP_IDLE_EPOCHS", "false")  # no input is written
        trigger = TriggerCheckpointOperator(
            task_id="trigger", pipeline_ref="demo.payments:pipeline", retries=2
        )
        server.stop()
        last_try = {"run_id": "run-1", "ti": SimpleNamespace(try_number=3)}
        with pytest.raises(StorageUnavailable):
            trigger.execute(last_try)
        failed: list[BaseException] = []

        def first_try() -> None:
            try:
                trigger.execute({"run_id": "run-1", "ti": SimpleNamespace(try_number=1)})
            except BaseException as exc:
                failed.append(exc)

        with structlog.testing.capture_logs() as seen:
            attempt = threading.Thread(target=first_try)
            attempt.start()
            deadline = time.monotonic() + 120
            while not any("waiting for it to answer" in str(e.get("event")) for e in seen):
                assert attempt.is_alive(), failed
                assert time.monotonic() < deadline, "the try did not wait for S3"
                time.sleep(0.05)
            assert attempt.is_alive()  # waiting, not failed
            server.start()
            attempt.join(120)
        assert len(failed) == 1 and isinstance(failed[0], OutageEnded), failed
        done = trigger.execute({"run_id": "run-1", "ti": SimpleNamespace(try_number=2)})
        again = trigger.execute({"run_id": "run-1", "ti": SimpleNamespace(try_number=3)})
        assert again["checkpoint_id"] == done["checkpoint_id"]  # one checkpoint per run
    finally:
        server.stop()
