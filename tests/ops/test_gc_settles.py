"""`gc` settles first (ops.maintenance.gc): a checkpoint left pending when its DAG was
paused (no run will finish it, no trigger comes to settle it) expires at its ack or audit
deadline (protocol/settlement.py) instead of staying "in progress" for ever, and its
files go with the same pass once GC's grace allows; a dry run settles nothing. On the
local store and SeaweedFS."""

from __future__ import annotations

import hashlib
from typing import Any

from batchpoint.ops.maintenance import gc, gc_summary
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointStatus,
    CheckpointType,
    FileHandle,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.storage.base import ObjectStore
from support.clock import FakeClock

NAME = "paused"


def coordinator(store: Any, clock: FakeClock, **config: Any) -> CheckpointCoordinator:
    c = CheckpointCoordinator(store, NAME, CheckpointConfig(**config), clock)
    c.register(simple_pipeline(NAME, [("keyed", 2), ("sink", 1)]))
    return c


def ack(c: CheckpointCoordinator, cid: int, task: TaskId) -> str:
    key = c.layout.task_data_prefix(cid, task, "a1") + "part-0.parquet"
    data = f"{task} of {cid}".encode() * 8
    c.store.put(key, data)
    handle = FileHandle(key, len(data), hashlib.sha256(data).hexdigest(), rows=1, name="s")
    c.acknowledge(cid, task, "a1", (handle,))
    return key


def test_gc_expires_a_checkpoint_left_pending_past_its_deadline(store: ObjectStore) -> None:
    clock = FakeClock()
    c = coordinator(store, clock, timeout=60, gc_grace=0)
    first = c.trigger({"src": {"p0": 1}}).checkpoint_id
    for task in c.get_checkpoint(first).expected_tasks:
        ack(c, first, task)
    c.try_finalize(first)
    paused = c.trigger({"src": {"p0": 2}}).checkpoint_id
    staged = ack(c, paused, TaskId("keyed", 0))  # then the DAG was paused: nobody acks the rest

    clock.now += 30  # within its deadline: gc leaves it pending
    report = gc(c, c.store)
    assert report.settled == [] and c.get_outcome(paused) is None
    assert [p.checkpoint_id for p in c.control.load().pending] == [paused]

    clock.now += 60  # past it
    dry = gc(c, c.store, dry_run=True)
    assert dry.settled == [] and c.get_outcome(paused) is None  # a dry run writes nothing

    report = gc(c, c.store)
    outcome = c.get_outcome(paused)
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is CheckpointFailureReason.EXPIRED
    assert "keyed#1" in outcome.message and "sink#0" in outcome.message
    assert [o.checkpoint_id for o in report.settled] == [paused]
    assert gc_summary(report)["settled"] == [
        {
            "checkpoint_id": paused,
            "status": "ABORTED",
            "reason": "expired",
            "message": outcome.message,
        }
    ]
    control = c.control.load()
    assert control.pending == () and control.head == first
    assert staged in report.deleted_files and not c.store.exists(staged)
    rows = {s.checkpoint_id: s.status for s in c.stats.history()}
    assert rows[paused] is CheckpointStatus.ABORTED  # no longer "in progress"


def test_gc_expires_an_audited_checkpoint_whose_audit_never_came(store: ObjectStore) -> None:
    """Every ack in, but only its audit may complete it: past its deadline it expires."""
    clock = FakeClock()
    c = coordinator(store, clock, timeout=60)
    cid = c.trigger(
        {"src": {"p0": 1}},
        checkpoint_type=CheckpointType.CHECKPOINT,
        properties=CheckpointProperties(audit=True),
    ).checkpoint_id
    for task in c.get_checkpoint(cid).expected_tasks:
        ack(c, cid, task)
    assert gc(c, c.store).settled == [] and c.get_outcome(cid) is None  # waits for its audit
    clock.now += 120
    (outcome,) = gc(c, c.store).settled
    assert outcome.checkpoint_id == cid and outcome.reason is CheckpointFailureReason.EXPIRED
    assert "audit gave no verdict" in outcome.message
