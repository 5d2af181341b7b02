"""Checkpoints of the payments pipeline whose tasks ack small stand-in files, laid out so
that the quality gate's integrity checks pass (each state file records its subtask's
key-group range), without Spark. Good for everything about the gate but the content of
the state: the restore form, dry runs, how far back, the audit guard, `verify` tables.
"""

from __future__ import annotations

import hashlib

from batchpoint.ops.epoch import finalize
from batchpoint.protocol.checkpoint import CheckpointType, FileHandle, PendingCheckpoint
from batchpoint.protocol.metrics import StorageRequests, TaskMetrics
from batchpoint.protocol.pipeline import OperatorKind
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.streams import SINK_STREAM, state_stream
from batchpoint.state.keygroups import key_group_range_for_subtask
from batchpoint.storage.base import ObjectStore

ATTEMPT = "fake"


def ack_all(driver: PipelineDriver, pending: PendingCheckpoint, *, requests: bool = False) -> None:
    """Every expected task acks: one file per state (with its key groups), else one;
    with `requests`, each ack records the put of each of its files."""
    c = driver.coordinator
    spec = c.load_spec()
    cid = pending.checkpoint_id
    for task in pending.expected_tasks:
        name, subtask = task.operator, task.subtask
        op = spec.operator(name)
        out = SINK_STREAM if op.kind is OperatorKind.SINK else "out"  # a sink stages its output
        streams: list[tuple[str, tuple[int, int] | None]] = [(out, None)]
        if op.kind is OperatorKind.OPERATOR and op.states:
            groups = key_group_range_for_subtask(op.max_parallelism, op.parallelism, subtask)
            streams = [(state_stream(s), (groups.start, groups.end)) for s in op.states]
        handles = []
        for stream, groups in streams:
            data = f"{task} {stream} checkpoint {cid}\n".encode()
            key = c.layout.task_data_prefix(cid, task, ATTEMPT) + f"{stream}/part-0.bin"
            c.store.put(key, data)
            digest = hashlib.sha256(data).hexdigest()
            handles.append(FileHandle(key, len(data), digest, 1, groups, stream))
        puts = StorageRequests(put=len(handles)) if requests else None
        c.acknowledge(cid, task, ATTEMPT, handles, TaskMetrics(storage_requests=puts))


def land_a_file(driver: PipelineDriver) -> None:
    """One new (empty) file in each source, so that the trigger sees new input: a
    deployment skips idle epochs."""
    for source in driver.pipeline.sources.values():
        prefix = f"{source.root}/p0/"
        count = sum(1 for _ in driver.store.list(prefix))
        driver.store.put(f"{prefix}fake-{count:06d}.{source.format}", b"")


def epoch(
    driver: PipelineDriver,
    kind: CheckpointType = CheckpointType.CHECKPOINT,
    *,
    requests: bool = False,
) -> int:
    """One completed (and published) checkpoint with new input; its id."""
    land_a_file(driver)
    pending = driver.trigger(kind)
    ack_all(driver, pending, requests=requests)
    outcome = finalize(driver, pending.checkpoint_id).outcome
    assert outcome is not None and outcome.completed is not None, outcome
    return pending.checkpoint_id


def break_a_file(driver: PipelineDriver, checkpoint_id: int) -> str:
    """Flip a byte of one of the checkpoint's state files (same size: only a checksum
    sees it); its path."""
    completed = driver.coordinator.completed.get(checkpoint_id)
    path = next(h.path for h in completed.handles if h.name.startswith("state-"))
    data = bytearray(driver.store.get(path).data)
    data[0] ^= 0xFF
    driver.store.put(path, bytes(data))
    return path


def listing(store: ObjectStore, prefix: str = "") -> dict[str, str]:
    """Every object and its etag: equal before and after means nothing was written."""
    return {info.key: info.etag for info in store.list(prefix)}
