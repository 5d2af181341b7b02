"""A small pipeline (a keyed operator of two subtasks, a sink) driven through the
protocol alone, no Spark: trigger, ack stand-in files, finalize, publish to an append
sink; and the quarantine the quality gate writes, through its own store."""

from __future__ import annotations

import hashlib
from typing import Any

from batchpoint.protocol.checkpoint import (
    CheckpointStatus,
    CheckpointType,
    FileHandle,
    TaskAcknowledgeResult,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.protocol.sinks import SinkManifest, SinkPublisher
from batchpoint.protocol.verify import check_handles
from batchpoint.quality.quarantine import QuarantineStore
from batchpoint.quality.report import CandidateReport, GateMode
from support.clock import FakeClock

NAME = "steps"
SINKS = [("sink", "append", ["k"])]


def coordinator(store: Any, clock: FakeClock | None = None, **config: Any) -> CheckpointCoordinator:
    c = CheckpointCoordinator(store, NAME, CheckpointConfig(**config), clock or FakeClock())
    c.register(simple_pipeline(NAME, [("keyed", 2), ("sink", 1)]))
    return c


def ack_all(c: CheckpointCoordinator, cid: int) -> None:
    for task in c.get_checkpoint(cid).expected_tasks:
        key = c.layout.task_data_prefix(cid, task, "a1") + "part-0.parquet"
        data = f"{task} of {cid}".encode() * 8
        c.store.put(key, data)
        stream = "sink" if task.operator == "sink" else "s"  # a sink stages its output
        handle = FileHandle(key, len(data), hashlib.sha256(data).hexdigest(), rows=1, name=stream)
        assert c.acknowledge(cid, task, "a1", (handle,)) is TaskAcknowledgeResult.SUCCESS


def complete(
    c: CheckpointCoordinator,
    kind: CheckpointType = CheckpointType.CHECKPOINT,
    publish: bool = True,
    properties: CheckpointProperties | None = None,
) -> int:
    """One checkpoint triggered, acknowledged, finalized (settled) and published."""
    cid = c.trigger({"src": {"p0": 1}}, checkpoint_type=kind, properties=properties).checkpoint_id
    ack_all(c, cid)
    outcome = c.try_finalize(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED, outcome
    if publish:
        c.notify_checkpoint_complete(cid, SINKS)
    return cid


def manifest(c: CheckpointCoordinator) -> SinkManifest:
    found = SinkPublisher(c.store, c.layout).manifest("sink")
    assert found is not None
    return found


def sink_epochs(c: CheckpointCoordinator) -> list[int]:
    """The checkpoints whose output the sink's readers see, oldest first."""
    return [e.checkpoint_id for e in manifest(c).chain()]


def intact(c: CheckpointCoordinator, cid: int) -> bool:
    return not check_handles(c.store, c.completed.get(cid).handles, checksums=True)


def quarantine(c: CheckpointCoordinator, cid: int) -> None:
    """What the quality gate does to a checkpoint it refuses."""
    report = CandidateReport(c.pipeline, cid, "checkpoint", GateMode.RESTORE, c.clock())
    assert QuarantineStore(c.store, c.layout).add(report, c.clock())
