"""An operator task that met an outage of its Connect server or S3 waits for the endpoint
to answer again, then asks for a retry at once (airflow/outages.py): the wait is bounded,
says how long it has waited, and the retry policy that Airflow 3.3 evaluates in the task
retries OutageEnded after a second while any other failure keeps the task's delay."""

from __future__ import annotations

import logging

import pytest

from batchpoint.airflow.outages import (
    RETRY_AT_ONCE,
    OutageEnded,
    endpoint_probe,
    outage_over,
    outage_retry_policy,
    wait_until_answers,
)
from batchpoint.runtime.job_status import JobStatus
from batchpoint.settings import Settings
from devstack.seaweed import free_ports


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
