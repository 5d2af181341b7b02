"""Savepoint export and import: self-contained, relocatable folders, imported under a
new checkpoint id through the coordinator's own checks. Runs on every backend."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

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
    SavepointPathRefused,
    check_savepoint,
    copy_objects,
    read_savepoint,
)
from batchpoint.storage.local import LocalObjectStore
from support.hooks import HookStore, once
from support.restoring import restore

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
    report = c.savepoints.export(cid, target, description="before v2")

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
    assert body["kind"] == "savepoint" and body["version"] == 2
    assert "pipelines/" not in json.dumps(body["acks"])  # nothing names where it came from
    assert check_savepoint(target, checksums=True) == []


def test_a_moved_savepoint_restores_into_another_deployment(store, tmp_path):
    c = coordinator(store)
    cid = complete(c, CheckpointType.SAVEPOINT, {"source": {"p0": 5}})
    original = SavepointLocation(store, "savepoints/sp")
    c.savepoints.export(cid, original)

    moved = SavepointLocation(LocalObjectStore(tmp_path / "usb-stick"), "somewhere/else")
    folder = "savepoints/sp/"
    pairs = [(i.key, moved.key(i.key[len(folder) :])) for i in store.list(folder)]
    copy_objects(store, moved.store, pairs)
    store.delete_many(i.key for i in store.list("savepoints/sp/"))  # the original folder is gone

    other = coordinator(LocalObjectStore(tmp_path / "other-deployment"))
    imported = other.savepoints.import_folder(
        moved, checksums=True, roots=[moved.store.child("somewhere/")]
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
    assert restore(other, 1).checkpoint_id == 1


def test_importing_into_the_same_pipeline_takes_a_new_id(store):
    c = coordinator(store)
    cid = complete(c, CheckpointType.SAVEPOINT)
    complete(c)
    c.savepoints.export(cid, SavepointLocation(store, "savepoints/sp"))
    imported = c.savepoints.import_folder(SavepointLocation(store, "savepoints/sp"))
    assert imported.checkpoint_id == 3  # never a reused id
    assert c.ids.get_and_increment() == 4


def test_a_damaged_savepoint_is_refused_before_anything_is_written(store):
    c = coordinator(store)
    cid = complete(c, CheckpointType.SAVEPOINT)
    location = SavepointLocation(store, "savepoints/sp")
    c.savepoints.export(cid, location)
    victim = read_savepoint(location).handles[1]
    store.put(location.key(victim.path), b"truncated")

    problems = check_savepoint(location)
    assert [p.path for p in problems] == [victim.path]
    assert "recorded" in problems[0].problem
    before = c.checkpoint_ids()
    with pytest.raises(RestoreRefused, match="damaged"):
        c.savepoints.import_folder(location)
    assert c.checkpoint_ids() == before


def test_wrong_pipeline_and_missing_metadata_are_refused(store):
    c = coordinator(store)
    cid = complete(c, CheckpointType.SAVEPOINT)
    c.savepoints.export(cid, SavepointLocation(store, "savepoints/sp"))
    with pytest.raises(RestoreRefused, match="of pipeline 'p', not of 'q'"):
        coordinator(store, "q").savepoints.import_folder(SavepointLocation(store, "savepoints/sp"))
    with pytest.raises(RestoreRefused, match="no _metadata"):
        read_savepoint(SavepointLocation(store, "nothing-here"))
    # damaged: what to do is to export it again, not `batchpoint repair` (a reviewer's)
    store.put("savepoints/sp/_metadata", b"{not json")
    with pytest.raises(CorruptRecord) as damaged:
        read_savepoint(SavepointLocation(store, "savepoints/sp"))
    assert "export the savepoint again" in str(damaged.value)
    assert "repair" not in str(damaged.value)


def test_export_refuses_an_occupied_target_and_an_unfinished_checkpoint(store):
    c = coordinator(store)
    cid = complete(c)
    c.savepoints.export(cid, SavepointLocation(store, "savepoints/sp"))
    with pytest.raises(CheckpointError, match="already holds a savepoint"):
        c.savepoints.export(cid, SavepointLocation(store, "savepoints/sp"))
    pending = c.trigger({})
    with pytest.raises(CheckpointError):
        c.savepoints.export(pending.checkpoint_id, SavepointLocation(store, "savepoints/sp2"))


def test_metadata_paths_cannot_leave_the_folder(tmp_path):
    store = LocalObjectStore(tmp_path)
    c = coordinator(store)
    cid = complete(c)
    location = SavepointLocation(store, "savepoints/sp")
    c.savepoints.export(cid, location)
    body = json.loads(store.get(location.metadata_key).data)
    body["acks"][0]["handles"][0]["path"] = "data/../../pipelines/p/head.json"
    store.put(location.metadata_key, json.dumps(body).encode())
    with pytest.raises(CorruptRecord, match="not inside the savepoint folder"):
        read_savepoint(location)


# == invariant 13: a link under a savepoint root leads nowhere (issue 24, reproduction 6) =


def linked(link: Path, target: Path) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=True)
    return link


def everything_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_an_export_through_a_link_under_the_root_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    store = LocalObjectStore(tmp_path / "store")
    c = coordinator(store)
    cid = complete(c, CheckpointType.SAVEPOINT)
    outside = tmp_path / "outside"
    linked(store.root / "savepoints" / "escape", outside)
    for target in ("savepoints/escape", "savepoints/escape/sp"):
        with pytest.raises(SavepointPathRefused, match="outside the savepoint roots") as info:
            c.savepoints.export(cid, SavepointLocation(store, target))
        assert f"its real path is {outside.as_uri()}" in str(info.value)
        assert store.child("savepoints/") in str(info.value)  # names the roots
    assert everything_under(outside) == []

    # A link that stays inside the root is followed once, to its real path, and the
    # savepoint is written there, under the root.
    linked(store.root / "savepoints" / "latest", store.root / "savepoints" / "real")
    report = c.savepoints.export(cid, SavepointLocation(store, "savepoints/latest/sp"))
    assert report.location.uri == store.child("savepoints/real/sp")
    assert (store.root / "savepoints" / "real" / "sp" / METADATA).is_file()


def test_a_savepoint_root_that_is_a_link_is_its_real_path(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "store")
    c = coordinator(store)
    cid = complete(c, CheckpointType.SAVEPOINT)
    root = linked(tmp_path / "roots" / "current", tmp_path / "disk" / "savepoints")
    folder = SavepointLocation(LocalObjectStore(root), "sp")
    c.savepoints.export(cid, folder, roots=[root.as_uri()])
    assert (tmp_path / "disk" / "savepoints" / "sp" / METADATA).is_file()
    imported = c.savepoints.import_folder(folder, roots=[root.as_uri()])
    assert imported.checkpoint_id > cid


def test_an_import_through_a_link_under_the_root_is_refused_and_reads_nothing(
    tmp_path: Path,
) -> None:
    store = LocalObjectStore(tmp_path / "store")
    c = coordinator(store)
    cid = complete(c, CheckpointType.SAVEPOINT)
    outside = tmp_path / "outside"
    c.savepoints.export(
        cid, SavepointLocation(LocalObjectStore(outside), "sp"), roots=[outside.as_uri()]
    )
    before = c.checkpoint_ids()
    # The whole folder is a link out of the root ...
    linked(store.root / "savepoints" / "incoming", outside / "sp")
    with pytest.raises(SavepointPathRefused, match="outside the savepoint roots"):
        c.savepoints.import_folder(SavepointLocation(store, "savepoints/incoming"))
    # ... or a folder inside it is: the path is under the root, a read through it is not.
    folder = store.root / "savepoints" / "half"
    (folder / "data").mkdir(parents=True)
    (folder / METADATA).write_bytes((outside / "sp" / METADATA).read_bytes())
    linked(folder / "data" / "keyed", outside / "sp" / "data" / "keyed")
    (folder / "data" / "sink").symlink_to(outside / "sp" / "data" / "sink")
    with pytest.raises(SavepointPathRefused, match="is a symbolic link"):
        c.savepoints.import_folder(SavepointLocation(store, "savepoints/half"))
    assert c.checkpoint_ids() == before


def test_a_link_swapped_in_during_an_export_writes_nothing_outside(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "store")
    c = coordinator(store)
    cid = complete(c, CheckpointType.SAVEPOINT)
    sink_file = next(h.path for h in c.completed.get(cid).handles if "/data/sink/" in h.path)
    outside = tmp_path / "outside"
    folder = store.root / "savepoints" / "sp"

    def swap_in_a_link() -> None:
        # After the export checked its target and before the sink's file is written
        # (the keyed files may be written already): data/sink/ becomes a link out.
        (folder / "data").mkdir(parents=True, exist_ok=True)
        linked(folder / "data" / "sink", outside)

    hook = once(swap_in_a_link, lambda op, key: op == "download_file" and key == sink_file)
    exporter = CheckpointCoordinator(HookStore(store, hook), "p")
    with pytest.raises(SavepointPathRefused, match="is a symbolic link") as info:
        exporter.savepoints.export(cid, SavepointLocation(store, "savepoints/sp"))
    assert hook.fired
    assert str(folder / "data" / "sink") in str(info.value)
    assert everything_under(outside) == []
    assert not (folder / METADATA).exists()  # the export did not finish


def test_an_imported_savepoint_keeps_its_topology_and_operator_uids(store):
    """A savepoint taken after a rename that kept its uid (operator `keyed` now called
    `keyed2`) imports with the same identities: the next deploy finds the state."""
    from batchpoint.protocol.pipeline import OperatorKind
    from batchpoint.protocol.topology import NodeTopology, Topology

    c = coordinator(store)
    topology = Topology(
        (
            NodeTopology("source", "source", OperatorKind.SOURCE),
            NodeTopology("keyed-uid", "keyed", OperatorKind.OPERATOR, 2, 128, ()),
            NodeTopology("sink", "sink", OperatorKind.SINK, 1, 128, ()),
        )
    )
    pending = c.trigger(
        {"source": {"p0": 3}}, checkpoint_type=CheckpointType.SAVEPOINT, topology=topology
    )
    for task in pending.expected_tasks:
        key = c.layout.task_data_prefix(pending.checkpoint_id, task, "a1") + "f"
        data = str(task).encode()
        c.store.put(key, data)
        digest = hashlib.sha256(data).hexdigest()
        c.acknowledge(pending.checkpoint_id, task, "a1", [FileHandle(key, len(data), digest)])
    assert c.try_finalize(pending.checkpoint_id).status is CheckpointStatus.COMPLETED
    written = c.acks(pending.checkpoint_id)
    assert {a.operator_uid for a in written.values()} == {"keyed-uid", "sink"}
    location = SavepointLocation(store, "savepoints/sp")
    c.savepoints.export(pending.checkpoint_id, location)
    imported = c.savepoints.import_folder(location)
    assert imported.pending.topology == topology
    assert sorted(a.operator_uid for a in imported.acks) == ["keyed-uid", "keyed-uid", "sink"]


def test_an_import_a_restore_abandoned_while_it_finalized_is_not_reported_imported(tmp_path):
    """A reviewer's interleaving (invariant 9): the import's finalize read the control
    record (the import pending), a restore's CAS then abandoned it, and the finalize
    wrote COMPLETED. The import said it was done, yet its checkpoint sat in GC's queue,
    and GC deleted the files it had copied. It now fails, saying to import again."""
    store = LocalObjectStore(str(tmp_path))
    c = coordinator(store)
    savepoint = complete(c, CheckpointType.SAVEPOINT)
    later = complete(c)
    location = c.savepoints.default_location(savepoint)
    c.savepoints.export(savepoint, location)
    importing = later + 1
    other = coordinator(store)

    def restore_meanwhile() -> None:  # its CAS lands; its roll-forward comes later
        real, other.restorer.finish = other.restorer.finish, lambda: None
        try:
            restore(other, later)
        finally:
            other.restorer.finish = real

    hook = once(
        restore_meanwhile, lambda op, key: (op, key) == ("create", c.layout.outcome(importing))
    )
    with pytest.raises(RestoreRefused, match="a restore ran meanwhile and abandoned checkpoint"):
        coordinator(HookStore(store, hook)).savepoints.import_folder(location)
    assert hook.fired
    c.restorer.finish()
    assert importing not in c.control.load().retained_ids()
    imported = c.savepoints.import_folder(location)  # again, as the error says
    assert imported.checkpoint_id in c.control.load().retained_ids()
    restore(c, imported.checkpoint_id)
