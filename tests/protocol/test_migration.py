"""Regression tests for issue 24's reproduction 4: the migration from the head-pointer v1
layout never discards. A marker that cannot be read (a bad field, truncated) falls back
to the checkpoint's outcome record; what stays unknowable is held and reported, never
queued for GC. Every test runs on the local store and on SeaweedFS."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from batchpoint.errors import CorruptRecord
from batchpoint.ops.maintenance import gc as ops_gc
from batchpoint.protocol.checkpoint import CheckpointType
from batchpoint.protocol.control import RetainedEntry
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.head import HeadMoveCause, HeadPointer
from batchpoint.protocol.migration import RetainedMarker
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.storage.base import ObjectStore
from support.clock import FakeClock
from support.protocol_steps import complete, coordinator, intact

KEPT = {
    "savepoint": {"kind": CheckpointType.SAVEPOINT},
    "checkpoint kept forever": {"properties": CheckpointProperties(retain_forever=True)},
}


def to_old_layout(c: CheckpointCoordinator) -> None:
    """The pipeline as the head-pointer v1 layout stored it: a head pointer, and one
    marker per retained checkpoint."""
    control = c.control.load()
    pointer = HeadPointer(control.head, control.restore_generation, 0.0, HeadMoveCause.COMPLETED)
    c.store.put(c.layout.head, pointer.encode())
    for entry in control.retained:
        c.store.put(c.layout.retained(entry.checkpoint_id), RetainedMarker.of(entry).encode())


def bad_field(data: bytes) -> bytes:
    document = json.loads(data)
    document["completed_at"] = "yesterday"  # valid JSON, a field no reader can use
    return json.dumps(document).encode()


def truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


DAMAGE: dict[str, Callable[[bytes], bytes]] = {"bad field": bad_field, "truncated": truncated}


@pytest.mark.parametrize("kept", list(KEPT))
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_marker_falls_back_to_the_outcome(
    store: ObjectStore, damage: str, kept: str
) -> None:
    clock = FakeClock()
    c = coordinator(store, clock, num_retained=1)
    keeper = complete(c, **KEPT[kept])  # type: ignore[arg-type]
    complete(c)
    head = complete(c)  # the checkpoint between them is subsumed: GC has work to do
    to_old_layout(c)
    marker = c.layout.retained(keeper)
    store.put(marker, DAMAGE[damage](store.get(marker).data))

    control = c.control.load()  # no raw JSONDecodeError, and nothing is dropped
    assert control.head == head and not control.is_discarded(keeper)
    entry = control.retained_entry(keeper)
    assert entry is not None and not entry.subsumable  # as its outcome record says
    assert entry.completed_at == c.completed.get(keeper).completed_at
    note = next(f for f in control.findings if f.checkpoint_id == keeper)
    assert marker in note.problem and not note.hold
    if damage == "truncated":
        assert "truncated JSON" in note.problem

    complete(c)  # the next write migrates the record (and subsumes the old head)
    assert not list(store.list(c.layout.retained_prefix))  # the markers said all they could
    clock.advance(1e6)  # past every grace period
    report = ops_gc(c, c.store)
    assert report.deleted_files  # the subsumed checkpoints went
    assert intact(c, keeper) and keeper in c.completed.retained_ids()
    assert any(f.checkpoint_id == keeper and marker in f.problem for f in report.findings)


def test_a_folder_nothing_can_judge_is_held_and_reported(store: ObjectStore) -> None:
    clock = FakeClock()
    c = coordinator(store, clock, num_retained=1)
    savepoint = complete(c, CheckpointType.SAVEPOINT)
    complete(c)
    head = complete(c)
    to_old_layout(c)
    for key in (c.layout.retained(savepoint), c.layout.outcome(savepoint)):
        store.put(key, truncated(store.get(key).data))
    files = sorted(i.key for i in store.list(c.layout.data_prefix(savepoint)))

    control = c.control.load()
    assert control.head == head and control.held_ids() == {savepoint}
    assert savepoint not in control.retained_ids() and not control.is_discarded(savepoint)
    complete(c)  # the next write migrates the record
    clock.advance(1e6)
    report = ops_gc(c, c.store)
    assert report.deleted_files  # the subsumed checkpoints went
    assert sorted(i.key for i in store.list(c.layout.data_prefix(savepoint))) == files
    held = [f for f in report.findings if f.checkpoint_id == savepoint]
    assert held and "batchpoint repair" in str(held[0]) and "kept" in str(held[0])
    after = c.control.load()
    assert after.held_ids() == {savepoint} and not after.is_discarded(savepoint)
    # a later queueing (subsumption, a sink's pruning) never takes it either
    assert not after.with_discarded([savepoint], clock()).is_discarded(savepoint)


def test_a_truncated_marker_is_a_corrupt_record_naming_repair() -> None:
    entry = RetainedEntry(3, CheckpointType.SAVEPOINT, 1_000_000.0)
    key = "pipelines/p/retained/chk-0000000003.json"
    with pytest.raises(CorruptRecord, match="truncated JSON") as caught:
        RetainedMarker.decode(key, truncated(RetainedMarker.of(entry).encode()))
    assert key in str(caught.value) and "batchpoint repair" in str(caught.value)
