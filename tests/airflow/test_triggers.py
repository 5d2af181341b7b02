"""CheckpointAckTrigger: serialization round trip (what the triggerer stores and
re-creates) and each event it can fire, driven against a local store."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from typing import Any

import pytest
import structlog.testing

from batchpoint.airflow.sensors import CheckpointAckSensor
from batchpoint.airflow.triggers import CheckpointAckTrigger, ack_event
from batchpoint.protocol.checkpoint import CheckpointFailureReason, FileHandle
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.storage.local import LocalObjectStore
from batchpoint.storage.s3 import S3ObjectStore, S3Settings
from devstack.seaweed import SeaweedServer, free_ports
from support.storage_env import use_seaweed

pytestmark = pytest.mark.airflow


@pytest.fixture
def coordinator(tmp_path, monkeypatch):
    store = LocalObjectStore(tmp_path / "store")
    monkeypatch.setenv("BATCHPOINT_ROOT", store.uri)
    monkeypatch.delenv("AIRFLOW_CONN_BATCHPOINT_STORAGE", raising=False)
    c = CheckpointCoordinator(store, "p")
    c.register(simple_pipeline("p", [("op", 2)]))
    return c


def ack(c: CheckpointCoordinator, checkpoint_id: int, task: TaskId) -> None:
    key = c.layout.task_data_prefix(checkpoint_id, task, "a1") + "f"
    c.store.put(key, b"x")
    c.acknowledge(checkpoint_id, task, "a1", [FileHandle(key, 1, hashlib.sha256(b"x").hexdigest())])


def fire(trigger: CheckpointAckTrigger, timeout: float = 20) -> dict:
    async def first():
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(asyncio.wait_for(first(), timeout))


def trigger_for(c, checkpoint_id, deadline=None):
    return CheckpointAckTrigger(
        "p", checkpoint_id, deadline or time.time() + 30, "batchpoint_storage", poll_interval=0.05
    )


def test_serialization_round_trip():
    trigger = CheckpointAckTrigger("payments", 7, 1234.5, "my_conn", poll_interval=2)
    classpath, kwargs = trigger.serialize()
    assert classpath == "batchpoint.airflow.triggers.CheckpointAckTrigger"
    from airflow.sdk.serde import deserialize, serialize

    # what the triggerer does: serde-encode the kwargs, import the class, rebuild it
    restored_kwargs = deserialize(serialize(kwargs))
    module, _, name = classpath.rpartition(".")
    cls = getattr(__import__(module, fromlist=[name]), name)
    again = cls(**restored_kwargs)
    assert again.serialize() == (classpath, kwargs)
    assert (again.checkpoint_id, again.deadline, again.poll_interval) == (7, 1234.5, 2.0)


def test_fires_done_once_every_task_acked(coordinator):
    pending = coordinator.trigger({})
    trigger = trigger_for(coordinator, pending.checkpoint_id)
    ack(coordinator, pending.checkpoint_id, TaskId("op", 0))
    assert ack_event(coordinator.progress(1), pending.deadline, time.time()) is None
    ack(coordinator, pending.checkpoint_id, TaskId("op", 1))
    event = fire(trigger)
    assert event["status"] == "done" and event["acknowledged"] == event["expected"] == 2


def test_fires_declined_with_the_reason(coordinator):
    pending = coordinator.trigger({})
    coordinator.decline(pending.checkpoint_id, TaskId("op", 1), "a1", "disk full")
    event = fire(trigger_for(coordinator, pending.checkpoint_id))
    assert event["status"] == "declined"
    assert event["task"] == "op#1" and "disk full" in event["message"]


def test_fires_aborted_for_an_aborted_checkpoint(coordinator):
    pending = coordinator.trigger({})
    coordinator.abort(pending.checkpoint_id, CheckpointFailureReason.RESTORED, "restore")
    event = fire(trigger_for(coordinator, pending.checkpoint_id))
    assert event == {**event, "status": "aborted", "reason": "restored"}


def test_fires_timeout_at_its_own_deadline(coordinator):
    """dag.test() ignores the deferral timeout: the trigger must end the wait itself."""
    pending = coordinator.trigger({})
    ack(coordinator, pending.checkpoint_id, TaskId("op", 0))
    started = time.monotonic()
    event = fire(trigger_for(coordinator, pending.checkpoint_id, deadline=time.time() + 0.3))
    assert event["status"] == "timeout" and event["missing"] == ["op#1"]
    assert time.monotonic() - started < 5


def test_fires_error_when_the_storage_is_unusable(coordinator, monkeypatch):
    monkeypatch.setenv("BATCHPOINT_ROOT", "s3a://nope/x")
    event = fire(trigger_for(coordinator, 1))
    assert event["status"] == "error" and "s3a" in event["message"]


class _TriggerXCom:
    """The one thing the sensor reads from its context: the trigger task's XCom."""

    def __init__(self, checkpoint_id: int) -> None:
        self.checkpoint_id = checkpoint_id

    def xcom_pull(self, task_ids: str) -> dict[str, Any]:
        return {"checkpoint_id": self.checkpoint_id}


def _until_logged(seen: list[dict[str, Any]], words: str, fired: dict[str, Any]) -> None:
    """Until the trigger logs `words`; fails as soon as it fired instead."""
    deadline = time.monotonic() + 120
    while not any(words in str(e.get("event")) for e in seen):
        assert not fired, f"the trigger fired {fired} before logging {words!r}"
        assert time.monotonic() < deadline, f"no log saying {words!r} in 120s"
        time.sleep(0.05)


@pytest.mark.s3
def test_the_wait_goes_on_through_a_storage_restart(tmp_path, monkeypatch):
    """SeaweedFS stopped while the sensor and its trigger wait (as the stack test's
    restart does mid-epoch): a look that gets no answer, after the store's own retries,
    is "not yet", not a failed sensor that leaves the checkpoint to expire; once the
    server is back and the tasks (retried by Airflow) ack, the trigger fires done."""
    server = SeaweedServer(tmp_path / "s3", s3_port=free_ports(1)[0]).start()
    try:
        use_seaweed(monkeypatch, server, "restart")
        store = S3ObjectStore(
            server.bucket, "restart", S3Settings.from_options(server.storage_options())
        )
        c = CheckpointCoordinator(store, "p")
        c.register(simple_pipeline("p", [("op", 2)]))
        pending = c.trigger({})
        sensor = CheckpointAckSensor(task_id="wait_for_acks", pipeline="p", poll_interval=0.05)
        context: Any = {"ti": _TriggerXCom(pending.checkpoint_id)}
        assert sensor.poke(context) is False  # up, nothing acked yet

        fired: dict[str, Any] = {}
        with structlog.testing.capture_logs() as seen:
            server.stop()
            trigger = trigger_for(c, pending.checkpoint_id, deadline=time.time() + 600)
            waiting = threading.Thread(target=lambda: fired.update(fire(trigger, 600)))
            waiting.start()
            _until_logged(seen, "looking again until its deadline", fired)  # the outage met
            assert sensor.poke(context) is False  # so does a poke: not yet, no failure
            server.start()
            ack(c, pending.checkpoint_id, TaskId("op", 0))
            ack(c, pending.checkpoint_id, TaskId("op", 1))
            waiting.join(600)
        assert fired["status"] == "done" and fired["acknowledged"] == 2, fired
        done = sensor.poke(context)
        assert not isinstance(done, bool) and done.is_done
    finally:
        server.stop()
