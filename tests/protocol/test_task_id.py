"""`TaskId`, the typed `operator#subtask`: its text is the stored form (acks, declines,
expected tasks), so it must read back what earlier releases wrote, byte for byte."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import PipelineLayout, TaskId, split_task_name, task_name
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.storage.base import ObjectStore

NAMES = st.from_regex(r"[A-Za-z][A-Za-z0-9_-]{0,20}", fullmatch=True)


@given(operator=NAMES, subtask=st.integers(0, 10_000))
def test_a_task_id_reads_back_from_its_text(operator: str, subtask: int) -> None:
    task = TaskId(operator, subtask)
    assert str(task) == f"{operator}#{subtask}" == task_name(operator, subtask)
    assert TaskId.parse(str(task)) == task == TaskId.of(str(task)) == TaskId.of(task)
    assert split_task_name(str(task)) == (operator, subtask)


@pytest.mark.parametrize("text", ["dedup", "dedup#", "#3", "dedup#x", "dedup#-1", "dedup#1.0", ""])
def test_text_that_is_no_task_id_is_refused_with_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="is not of the form operator#subtask") as caught:
        TaskId.parse(text)
    assert repr(text) in str(caught.value)


def test_layout_keys_are_the_same_from_text_and_from_a_task_id() -> None:
    layout = PipelineLayout("p")
    task = TaskId("balances", 3)
    assert layout.ack(7, task) == layout.ack(7, "balances#3")
    assert layout.ack(7, task).endswith("/acks/balances/3.json")
    assert layout.decline(7, task, "a1") == layout.decline(7, "balances#3", "a1")
    assert layout.task_data_prefix(7, task, "a1") == layout.task_data_prefix(7, "balances#3", "a1")


def test_stored_records_keep_the_text_form(store: ObjectStore) -> None:
    """An ack and a decline written through the coordinator name the task exactly as
    before TaskId existed: `op#0` in the JSON, under acks/op/0.json."""
    c = CheckpointCoordinator(store, "p")
    c.register(simple_pipeline("p", [("op", 2)]))
    pending = c.trigger({"source": {"p0": 1}})
    cid = pending.checkpoint_id
    assert pending.expected_tasks == ("op#0", "op#1")
    c.acknowledge(cid, str(TaskId("op", 0)), "a1", [])
    ack = json.loads(store.get(c.layout.ack(cid, TaskId("op", 0))).data)
    assert ack["task"] == "op#0"
    c.decline(cid, str(TaskId("op", 1)), "a1", "test")
    declines = [o.key for o in store.list(c.layout.declines_prefix(cid))]
    assert declines == [c.layout.decline(cid, "op#1", "a1")]
    assert json.loads(store.get(declines[0]).data)["task"] == "op#1"
