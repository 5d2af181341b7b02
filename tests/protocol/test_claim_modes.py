"""Restore modes, as Flink's RestoreMode: NO_CLAIM (the default) leaves the restored
checkpoint as retained as it was; CLAIM hands it to retention, so a savepoint is then
subsumed by newer checkpoints and its files collected. Runs on every backend, no Spark."""

from __future__ import annotations

import hashlib

import pytest

from batchpoint.ops.maintenance import gc
from batchpoint.protocol.checkpoint import CheckpointStatus, CheckpointType, FileHandle
from batchpoint.protocol.claim_mode import ClaimMode
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline import simple_pipeline
from support.restoring import restore


def complete(c: CheckpointCoordinator, kind: CheckpointType = CheckpointType.CHECKPOINT) -> int:
    pending = c.trigger({"source": {"p0": 1}}, checkpoint_type=kind)
    cid = pending.checkpoint_id
    for task in pending.expected_tasks:
        key = c.layout.task_data_prefix(cid, task, "a1") + "state-x/part-0.parquet"
        data = f"{task} of {cid}".encode()
        c.store.put(key, data)
        handle = FileHandle(key, len(data), hashlib.sha256(data).hexdigest(), rows=1, name="s")
        c.acknowledge(cid, task, "a1", [handle])
    assert c.try_finalize(cid).status is CheckpointStatus.COMPLETED
    return cid


def files_of(c: CheckpointCoordinator, cid: int) -> list[str]:
    return [o.key for o in c.store.list(c.layout.data_prefix(cid))]


@pytest.mark.parametrize("mode", list(ClaimMode), ids=["claim", "no-claim"])
def test_a_restored_savepoint_is_kept_unless_claimed(store, mode: ClaimMode) -> None:
    claim = mode is ClaimMode.CLAIM
    c = CheckpointCoordinator(store, "p", CheckpointConfig(num_retained=1))
    c.register(simple_pipeline("p", [("op", 2)]))
    savepoint = complete(c, CheckpointType.SAVEPOINT)
    complete(c)
    restore(c, savepoint, mode=mode)
    entry = c.control.load().retained_entry(savepoint)
    assert entry is not None and entry.claimed is claim
    assert files_of(c, savepoint)

    newer = [complete(c) for _ in range(2)]  # the head moves on past the savepoint
    gc(c, c.store)
    retained = c.control.load().retained_ids()
    if claim:
        assert retained == [newer[-1]]  # subsumed like any checkpoint beyond num_retained
        assert files_of(c, savepoint) == []  # and collected
    else:
        assert retained == [savepoint, newer[-1]]
        assert len(files_of(c, savepoint)) == 2


def test_claiming_the_head_keeps_it_until_a_newer_checkpoint_completes(store) -> None:
    c = CheckpointCoordinator(store, "p", CheckpointConfig(num_retained=1))
    c.register(simple_pipeline("p", [("op", 1)]))
    savepoint = complete(c, CheckpointType.SAVEPOINT)
    restore(c, savepoint, mode=ClaimMode.CLAIM)
    gc(c, c.store)
    assert c.control.load().retained_ids() == [savepoint]  # the head is never subsumed
    assert files_of(c, savepoint)
    # a restore of it again without claim does not take the claim back
    restore(c, savepoint)
    assert c.control.load().retained_entry(savepoint).claimed
