"""`TaskId`, the typed `operator#subtask`: the protocol takes and returns TaskIds, and
records store its text, so they must read back what earlier releases wrote, byte for
byte (the adapters `TASK_ID` and `TASK_IDS` in protocol/layout.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batchpoint.errors import CorruptRecord
from batchpoint.protocol.checkpoint import (
    AckRecord,
    CheckpointOutcome,
    DeclineRecord,
    PendingCheckpoint,
)
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import PipelineLayout, TaskId
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.storage.base import ObjectStore

NAMES = st.from_regex(r"[A-Za-z][A-Za-z0-9_-]{0,20}", fullmatch=True)
RECORDS = Path(__file__).parents[1] / "data" / "records"


@given(operator=NAMES, subtask=st.integers(0, 10_000))
def test_a_task_id_reads_back_from_its_text(operator: str, subtask: int) -> None:
    task = TaskId(operator, subtask)
    assert str(task) == f"{operator}#{subtask}"
    assert TaskId.parse(str(task)) == task


@pytest.mark.parametrize("text", ["dedup", "dedup#", "#3", "dedup#x", "dedup#-1", "dedup#1.0", ""])
def test_text_that_is_no_task_id_is_refused_with_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="is not of the form operator#subtask") as caught:
        TaskId.parse(text)
    assert repr(text) in str(caught.value)


def test_layout_keys_of_a_task_id() -> None:
    layout = PipelineLayout("p")
    task = TaskId("balances", 3)
    assert layout.ack(7, task).endswith("/chk-0000000007/acks/balances/3.json")
    assert layout.decline(7, task, "a1").endswith("/declines/balances/3/a1.json")
    assert layout.task_data_prefix(7, task, "a1").endswith("/data/balances/3/a1/")


@pytest.mark.parametrize("name", ["ack-v1.json", "ack-v1-before-metrics.json", "ack-v2.json"])
def test_an_old_ack_reads_its_task_as_a_task_id_and_writes_the_same_text(name: str) -> None:
    data = (RECORDS / name).read_bytes()
    ack = AckRecord.decode(name, data)
    assert isinstance(ack.task, TaskId)
    stored = json.loads(data)["task"]
    assert ack.task == TaskId.parse(stored)
    assert json.loads(ack.encode())["task"] == stored


def test_old_pending_decline_and_outcome_records_read_task_ids() -> None:
    pending = PendingCheckpoint.decode("p", (RECORDS / "pending-checkpoint-v1.json").read_bytes())
    assert all(isinstance(t, TaskId) for t in pending.expected_tasks)
    data = (RECORDS / "pending-checkpoint-v1.json").read_bytes()
    assert [str(t) for t in pending.expected_tasks] == json.loads(data)["expected_tasks"]
    decline = DeclineRecord.decode("d", (RECORDS / "decline-v1.json").read_bytes())
    assert decline.task == TaskId("alerts", 0)
    name = "checkpoint-outcome-v1-completed.json"
    outcome = CheckpointOutcome.decode(name, (RECORDS / name).read_bytes())
    assert outcome.completed is not None
    assert all(isinstance(a.task, TaskId) for a in outcome.completed.acks)
    assert outcome.completed.ack_for(TaskId("balances", 1)) is not None


@pytest.mark.parametrize("bad", ["balances", "balances#x", 3])
def test_a_stored_task_that_is_no_task_id_is_a_corrupt_record(bad: object) -> None:
    body = json.loads((RECORDS / "decline-v1.json").read_bytes())
    with pytest.raises(CorruptRecord, match="task"):
        DeclineRecord.decode("d", json.dumps({**body, "task": bad}).encode())


def test_stored_records_keep_the_text_form(store: ObjectStore) -> None:
    """An ack and a decline written through the coordinator name the task exactly as
    before TaskId existed: `op#0` in the JSON, under acks/op/0.json."""
    c = CheckpointCoordinator(store, "p")
    c.register(simple_pipeline("p", [("op", 2)]))
    pending = c.trigger({"source": {"p0": 1}})
    cid = pending.checkpoint_id
    assert pending.expected_tasks == (TaskId("op", 0), TaskId("op", 1))
    stored = json.loads(store.get(c.layout.active(cid)).data)
    assert stored["expected_tasks"] == ["op#0", "op#1"]
    c.acknowledge(cid, TaskId("op", 0), "a1", [])
    ack = json.loads(store.get(c.layout.ack(cid, TaskId("op", 0))).data)
    assert ack["task"] == "op#0"
    assert c.acks(cid)[TaskId("op", 0)].task == TaskId("op", 0)
    c.decline(cid, TaskId("op", 1), "a1", "test")
    declines = [o.key for o in store.list(c.layout.declines_prefix(cid))]
    assert declines == [c.layout.decline(cid, TaskId("op", 1), "a1")]
    assert json.loads(store.get(declines[0]).data)["task"] == "op#1"
