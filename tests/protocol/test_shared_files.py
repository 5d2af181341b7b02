"""Incremental checkpoints share their base's files: GC must keep a shared file as long
as any retained or pending checkpoint references it, wherever it lives, collect it
once none does, and a base held outside retention is never shared. No Spark: the
acks name files the way the runtime's incremental snapshots do. Every backend."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest
from tests.support.hooks import HookStore, once

from batchpoint.protocol.checkpoint import (
    INDEPENDENT_OF_BASE,
    SHARED_FROM_META,
    CheckpointStatus,
    CheckpointType,
    FileHandle,
    TaskAcknowledgeResult,
)
from batchpoint.protocol.claim_mode import ClaimMode
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.protocol.verify import check_handles
from batchpoint.storage.base import ObjectStore
from support.restoring import restore

NAME = "shared"


def coordinator(store: ObjectStore) -> CheckpointCoordinator:
    c = CheckpointCoordinator(store, NAME, CheckpointConfig(num_retained=1))
    c.register(simple_pipeline(NAME, [("op", 2)]))
    return c


def own_file(c: CheckpointCoordinator, cid: int, task: TaskId, layer: int) -> FileHandle:
    key = c.layout.task_data_prefix(cid, task, "a1") + f"state-s/layer-{layer}.parquet"
    data = f"{task} layer {layer} of {cid}".encode()
    c.store.put(key, data)
    digest = hashlib.sha256(data).hexdigest()
    return FileHandle(key, len(data), digest, rows=1, name="state-s", meta={"layer": layer})


def ack_incremental(c: CheckpointCoordinator, cid: int) -> None:
    """Each task shares its base's files of the state and adds one changelog layer, or
    writes a full file when the checkpoint has no base, is a savepoint or must be
    independent of its base (as runtime.incremental.plan_snapshot decides)."""
    pending = c.get_checkpoint(cid)
    base = pending.base_checkpoint_id
    full = pending.is_savepoint or INDEPENDENT_OF_BASE in pending.properties
    for task in pending.expected_tasks:
        shared: list[FileHandle] = []
        if base is not None and not full:
            ack = c.completed.get(base).ack_for(task)
            assert ack is not None
            shared = [
                h
                if SHARED_FROM_META in h.meta
                else replace(h, meta={**h.meta, SHARED_FROM_META: base})
                for h in ack.handles
            ]
        layer = max((h.meta["layer"] for h in shared), default=-1) + 1
        handles = [*shared, own_file(c, cid, task, layer)]
        assert c.acknowledge(cid, task, "a1", handles) is TaskAcknowledgeResult.SUCCESS


def complete(c: CheckpointCoordinator, kind: CheckpointType = CheckpointType.CHECKPOINT) -> int:
    cid = c.trigger({"src": {"p0": 1}}, checkpoint_type=kind).checkpoint_id
    ack_incremental(c, cid)
    outcome = c.try_finalize(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED, outcome
    return cid


def intact(c: CheckpointCoordinator, cid: int) -> bool:
    return not check_handles(c.store, list(c.completed.get(cid).handles), checksums=True)


def folder(c: CheckpointCoordinator, cid: int) -> list[str]:
    return [o.key for o in c.store.list(c.layout.data_prefix(cid))]


def queued(c: CheckpointCoordinator) -> list[int]:
    return [e.checkpoint_id for e in c.control.load().discarded]


def test_shared_files_outlive_their_writer_and_go_once_nothing_shares_them(
    store: ObjectStore,
) -> None:
    c = coordinator(store)
    gc = c.garbage_collector(grace=0)
    first = complete(c)
    chain = [first] + [complete(c) for _ in range(2)]  # two changelogs on `first`
    gc.collect()
    head = chain[-1]
    assert c.control.load().retained_ids() == [head]
    assert intact(c, head), "GC took a file the retained checkpoint shares"
    # Each subsumed folder holds a layer the head still reads: kept, and still queued so
    # that a later pass collects it.
    for cid in chain[:-1]:
        assert len(folder(c, cid)) == 2
    assert set(queued(c)) == set(chain[:-1])
    assert c.completed.get(head).state_size < c.completed.get(head).full_state_size

    # A savepoint is the head now: the next checkpoint may not build on it, so it writes
    # in full and shares nothing.
    savepoint = complete(c, CheckpointType.SAVEPOINT)
    independent = c.trigger({"src": {"p0": 2}})
    assert INDEPENDENT_OF_BASE in independent.properties
    ack_incremental(c, independent.checkpoint_id)
    c.try_finalize(independent.checkpoint_id)
    gc.collect()
    assert c.control.load().retained_ids() == [savepoint, independent.checkpoint_id]
    for cid in chain:
        assert folder(c, cid) == [], f"checkpoint {cid}'s shared files were never collected"
    assert not set(queued(c)) & set(chain)
    assert intact(c, independent.checkpoint_id) and intact(c, savepoint)


@pytest.mark.parametrize("point", ["control read", "pending acks", "base folder listing"])
def test_gc_racing_a_checkpoint_that_shares_its_base(store: ObjectStore, point: str) -> None:
    """The incremental checkpoint acks and completes (subsuming its base, whose files it
    shares) in the middle of a GC pass, at each point of the pass."""
    c = coordinator(store)
    base = complete(c)
    racer = c.trigger({"src": {"p0": 2}}).checkpoint_id

    def ack_and_complete() -> None:
        ack_incremental(c, racer)
        assert c.try_finalize(racer).status is CheckpointStatus.COMPLETED

    at = {
        "control read": lambda op, key: op == "get" and key.endswith("/outcome.json"),
        "pending acks": lambda op, key: op == "list" and "acks" in key,
        "base folder listing": lambda op, key: op == "list" and key == c.layout.data_prefix(base),
    }[point]
    hook = once(ack_and_complete, at)
    coordinator(HookStore(store, hook)).garbage_collector(grace=0).collect()
    assert hook.fired
    assert intact(c, racer), "GC deleted a base file the completing checkpoint shares"
    # And once more, now that the base is subsumed and queued.
    c.garbage_collector(grace=0).collect()
    assert base in queued(c) and intact(c, racer)


def test_a_claimed_savepoint_may_be_shared(store: ObjectStore) -> None:
    c = coordinator(store)
    savepoint = complete(c, CheckpointType.SAVEPOINT)
    complete(c)
    restore(c, savepoint)  # NO_CLAIM: the savepoint stays someone else's
    assert INDEPENDENT_OF_BASE in c.trigger({"src": {"p0": 3}}).properties
    other = CheckpointCoordinator(store, "claimed", CheckpointConfig(num_retained=1))
    other.register(simple_pipeline("claimed", [("op", 2)]))
    kept = complete(other, CheckpointType.SAVEPOINT)
    complete(other)
    restore(other, kept, mode=ClaimMode.CLAIM)
    assert INDEPENDENT_OF_BASE not in other.trigger({"src": {"p0": 3}}).properties
