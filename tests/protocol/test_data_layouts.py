"""A checkpoint's data files in either key layout (issue 42): before it,
``data/<operator>/<stream>/subtask-<i>/<attempt>/``; since, with the spread folder
``<hh>`` after ``data/<operator>/``. A checkpoint of either completes with its files
checked, exports and imports as a savepoint at the same paths below ``data/``, and is
collected whole; a losing attempt deletes its own files and nobody else's. No Spark: the
files are small byte strings at the keys `state.keys` gives. Every backend."""

from __future__ import annotations

import hashlib

import pytest

from batchpoint.protocol.checkpoint import CheckpointStatus, FileHandle, TaskAcknowledgeResult
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.protocol.savepoints import SavepointLocation, check_savepoint, read_savepoint
from batchpoint.state.keys import SubtaskFolder, spread_folder
from batchpoint.storage.base import ObjectStore

LAYOUTS = pytest.mark.parametrize("spread", [True, False], ids=["spread", "before-issue-42"])


def coordinator(store: ObjectStore) -> CheckpointCoordinator:
    c = CheckpointCoordinator(store, "p", CheckpointConfig(num_retained=1))
    c.register(simple_pipeline("p", [("keyed", 2)]))
    return c


def keyed_file(
    c: CheckpointCoordinator, cid: int, task: TaskId, attempt: str, *, spread: bool
) -> FileHandle:
    """The file a keyed write of `attempt` puts at the key of one layout."""
    folder = SubtaskFolder("state-s", task.subtask, attempt, spread)
    key = f"{c.layout.operator_data_prefix(cid, task.operator)}{folder.relative()}part-00000-t1"
    data = f"{task} {attempt} of {cid}".encode() * 10
    c.store.put(key + ".parquet", data)
    digest = hashlib.sha256(data).hexdigest()
    return FileHandle(key + ".parquet", len(data), digest, rows=10, name="state-s")


def complete(c: CheckpointCoordinator, *, spread: bool) -> int:
    pending = c.trigger({"source": {"p0": 3}})
    cid = pending.checkpoint_id
    for task in pending.expected_tasks:
        handle = keyed_file(c, cid, task, "af-1", spread=spread)
        assert c.acknowledge(cid, task, "af-1", [handle]) is TaskAcknowledgeResult.SUCCESS
    assert c.try_finalize(cid).status is CheckpointStatus.COMPLETED
    return cid


@LAYOUTS
def test_a_checkpoint_of_either_layout_exports_imports_and_is_collected(
    store: ObjectStore, spread: bool
) -> None:
    c = coordinator(store)
    cid = complete(c, spread=spread)
    completed = c.completed.get(cid)
    below_data = [h.path.removeprefix(c.layout.data_prefix(cid)) for h in completed.handles]
    assert all(SubtaskFolder.of_key(p.split("/", 1)[1]).spread is spread for p in below_data)
    assert c.completed.check_files(completed, checksums=True) == []

    location = SavepointLocation(store, "savepoints/sp")
    c.savepoints.export(cid, location)
    assert [h.path for h in read_savepoint(location).handles] == [f"data/{p}" for p in below_data]
    assert check_savepoint(location, checksums=True) == []
    imported = c.savepoints.import_folder(location, checksums=True)
    new = imported.pending.checkpoint_id
    assert [h.path for h in imported.handles] == [c.layout.data_prefix(new) + p for p in below_data]
    assert c.completed.check_files(imported, checksums=True) == []

    complete(c, spread=True)  # subsumes cid (one retained, the savepoint aside)
    report = c.garbage_collector().collect(history_limit=0)
    assert sorted(report.deleted_files) == sorted(h.path for h in completed.handles)
    assert not list(store.list(c.layout.data_prefix(cid)))
    assert c.completed.check_files(imported, checksums=True) == []  # the import's own copies


@LAYOUTS
def test_a_losing_attempt_deletes_its_own_files_of_either_layout_and_no_others(
    store: ObjectStore, spread: bool
) -> None:
    c = coordinator(store)
    pending = c.trigger({"source": {"p0": 3}})
    cid, task = pending.checkpoint_id, TaskId("keyed", 0)
    winner = keyed_file(c, cid, task, "af-1", spread=spread)
    assert c.acknowledge(cid, task, "af-1", [winner]) is TaskAcknowledgeResult.SUCCESS
    # The loser's attempt id is the winner's spread folder: two hex digits may read as
    # an attempt id, yet only the attempt folder says whose a file is.
    loser = spread_folder("state-s", 0)
    own = keyed_file(c, cid, task, loser, spread=spread)
    assert c.acknowledge(cid, task, loser, [own, winner]) is TaskAcknowledgeResult.DUPLICATE
    assert not store.exists(own.path)
    assert store.exists(winner.path)
