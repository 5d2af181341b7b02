"""Savepoint export and import: self-contained, relocatable folders, imported under a
new checkpoint id through the coordinator's own checks. Runs on every backend."""

from __future__ import annotations

import hashlib
import json

import pytest

from batchpoint.errors import CheckpointError, CorruptRecord, RestoreRefused
from batchpoint.protocol.checkpoint import (
    CheckpointStatus,
    CheckpointType,
    FileHandle,
)
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.protocol.savepoints import (
    METADATA,
    SavepointLocation,
    check_savepoint,
    copy_objects,
    export_savepoint,
    import_savepoint,
    read_savepoint,
)
from batchpoint.storage.local import LocalObjectStore

SPEC = simple_pipeline("p", [("keyed", 2), ("sink", 1)])


def coordinator(store, name: str = "p") -> CheckpointCoordinator:
    c = CheckpointCoordinator(store, name)
    c.register(simple_pipeline(name, [("keyed", 2), ("sink", 1)]))
    return c


def complete(c: CheckpointCoordinator, kind=CheckpointType.CHECKPOINT, barrier=None) -> int:
    """A checkpoint whose every task acked one small file of its own (no Spark)."""
    pending = c.trigger(barrier or {"source": {"p0": 3}}, checkpoint_type=kind)
    cid = pending.checkpoint_id
    for task in pending.expected_tasks:
        key = c.layout.task_data_prefix(cid, task, "a1") + "state-x/part-0.parquet"
        data = f"{task} of {cid}".encode() * 10
        c.store.put(key, data)
        handle = FileHandle(key, len(data), hashlib.sha256(data).hexdigest(), rows=10, name="s")
        c.acknowledge(cid, task, "a1", [handle])
    assert c.try_finalize(cid).status is CheckpointStatus.COMPLETED
    return cid


def test_export_writes_every_file_relative_to_the_folder_and_metadata_last(store):
    c = coordinator(store)
    complete(c)
    cid = complete(c, CheckpointType.SAVEPOINT, {"source": {"p0": 7}})
    target = SavepointLocation(store, "savepoints/sp1")
    report = export_savepoint(c, cid, target, description="before v2")

    completed = c.completed.get(cid)
    assert report.files == len(completed.handles) == 3
    keys = {i.key for i in store.list("savepoints/sp1/")}
    assert f"savepoints/sp1/{METADATA}" in keys
    metadata = read_savepoint(target)
    assert metadata.checkpoint_id == cid and metadata.description == "before v2"
    assert metadata.pending.barrier == {"source": {"p0": 7}}
    for original, relative in zip(completed.handles, metadata.handles, strict=True):
        assert relative.path.startswith("data/keyed/") or relative.path.startswith("data/sink/")
        assert f"savepoints/sp1/{relative.path}" in keys
        assert store.get(f"savepoints/sp1/{relative.path}").data == store.get(original.path).data
        assert (relative.size, relative.sha256) == (original.size, original.sha256)
    body = json.loads(store.get(f"savepoints/sp1/{METADATA}").data)
    assert body["kind"] == "savepoint" and body["version"] == 1
    assert "pipelines/" not in json.dumps(body["acks"])  # nothing names where it came from
    assert check_savepoint(target, checksums=True) == []


def test_a_moved_savepoint_restores_into_another_deployment(store, tmp_path):
    c = coordinator(store)
    cid = complete(c, CheckpointType.SAVEPOINT, {"source": {"p0": 5}})
    original = SavepointLocation(store, "savepoints/sp")
    export_savepoint(c, cid, original)

    moved = SavepointLocation(LocalObjectStore(tmp_path / "usb-stick"), "somewhere/else")
    folder = "savepoints/sp/"
    pairs = [(i.key, moved.key(i.key[len(folder) :])) for i in store.list(folder)]
    copy_objects(store, moved.store, pairs)
    store.delete_many(i.key for i in store.list("savepoints/sp/"))  # the original folder is gone

    other = coordinator(LocalObjectStore(tmp_path / "other-deployment"))
    imported = import_savepoint(
        other, moved, checksums=True, roots=[moved.store.child("somewhere/")]
    )
    assert imported.checkpoint_id == 1  # the first id of that deployment
    assert imported.pending.type is CheckpointType.SAVEPOINT
    assert imported.pending.barrier == {"source": {"p0": 5}}
    assert imported.pending.properties["imported_from"] == moved.uri
    assert imported.pending.properties["savepoint_checkpoint_id"] == cid
    assert other.completed.is_retained(1)
    assert not next(m for m in other.completed.markers()).subsumable
    for handle in imported.handles:
        assert handle.path.startswith(other.layout.data_prefix(1))
        assert other.store.head(handle.path).size == handle.size
    assert other.head.get().checkpoint_id is None  # only a restore moves the head to it
    assert other.restore(1).checkpoint_id == 1


def test_importing_into_the_same_pipeline_takes_a_new_id(store):
    c = coordinator(store)
    cid = complete(c, CheckpointType.SAVEPOINT)
    complete(c)
    export_savepoint(c, cid, SavepointLocation(store, "savepoints/sp"))
    imported = import_savepoint(c, SavepointLocation(store, "savepoints/sp"))
    assert imported.checkpoint_id == 3  # never a reused id
    assert c.ids.get_and_increment() == 4


def test_a_damaged_savepoint_is_refused_before_anything_is_written(store):
    c = coordinator(store)
    cid = complete(c, CheckpointType.SAVEPOINT)
    location = SavepointLocation(store, "savepoints/sp")
    export_savepoint(c, cid, location)
    victim = read_savepoint(location).handles[1]
    store.put(location.key(victim.path), b"truncated")

    problems = check_savepoint(location)
    assert [p.path for p in problems] == [victim.path]
    assert "recorded" in problems[0].problem
    before = c.checkpoint_ids()
    with pytest.raises(RestoreRefused, match="damaged"):
        import_savepoint(c, location)
    assert c.checkpoint_ids() == before


def test_wrong_pipeline_and_missing_metadata_are_refused(store):
    c = coordinator(store)
    cid = complete(c, CheckpointType.SAVEPOINT)
    export_savepoint(c, cid, SavepointLocation(store, "savepoints/sp"))
    with pytest.raises(RestoreRefused, match="of pipeline 'p', not of 'q'"):
        import_savepoint(coordinator(store, "q"), SavepointLocation(store, "savepoints/sp"))
    with pytest.raises(RestoreRefused, match="no _metadata"):
        read_savepoint(SavepointLocation(store, "nothing-here"))


def test_export_refuses_an_occupied_target_and_an_unfinished_checkpoint(store):
    c = coordinator(store)
    cid = complete(c)
    export_savepoint(c, cid, SavepointLocation(store, "savepoints/sp"))
    with pytest.raises(CheckpointError, match="already holds a savepoint"):
        export_savepoint(c, cid, SavepointLocation(store, "savepoints/sp"))
    pending = c.trigger({})
    with pytest.raises(CheckpointError):
        export_savepoint(c, pending.checkpoint_id, SavepointLocation(store, "savepoints/sp2"))


def test_metadata_paths_cannot_leave_the_folder(tmp_path):
    store = LocalObjectStore(tmp_path)
    c = coordinator(store)
    cid = complete(c)
    location = SavepointLocation(store, "savepoints/sp")
    export_savepoint(c, cid, location)
    body = json.loads(store.get(location.metadata_key).data)
    body["acks"][0]["handles"][0]["path"] = "data/../../pipelines/p/head.json"
    store.put(location.metadata_key, json.dumps(body).encode())
    with pytest.raises(CorruptRecord, match="not inside the savepoint folder"):
        read_savepoint(location)
