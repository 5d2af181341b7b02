"""Writers later than GC's grace: a zombie task (a killed Connect client's server job)
that writes into an aborted checkpoint's folder after GC dequeued it. A later pass finds
and deletes the file, the file never blocks the pruning of the checkpoint's records, and
each pass lists a bounded number of folders however long the history. Issue 24,
reproduction 8. Runs on the local store and on SeaweedFS."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointStatus
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.gc import COLLECTED_SWEEP
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.storage.base import ObjectStore
from batchpoint.storage.confined import ConfinedLocalStore
from batchpoint.storage.local import LocalObjectStore
from support.clock import FakeClock
from support.counting_store import CountingStore

NAME = "late"
GRACE = 90.0


def _coordinator(store: Any, clock: FakeClock) -> CheckpointCoordinator:
    config = CheckpointConfig(timeout=60, gc_grace=GRACE, tolerable_failed_checkpoints=100)
    c = CheckpointCoordinator(store, NAME, config, clock)
    c.register(simple_pipeline(NAME, [("keyed", 1)]))
    return c


def _completed(c: CheckpointCoordinator) -> int:
    cid = c.trigger({"src": {"p0": 1}}).checkpoint_id
    c.acknowledge(cid, TaskId("keyed", 0), "a1", [])
    outcome = c.try_finalize(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    return cid


def _collected(c: CheckpointCoordinator, clock: FakeClock, count: int) -> list[int]:
    """`count` aborted checkpoints whose tasks staged a file each, taken through GC's
    queue and out of it (past the grace): their ids are in `collected`."""
    ids = []
    for _ in range(count):
        cid = c.trigger({"src": {"p0": 1}}).checkpoint_id
        c.store.put(c.layout.task_data_prefix(cid, TaskId("keyed", 0), "a1") + "part-0", b"staged")
        c.abort(cid, CheckpointFailureReason.EXPIRED)
        ids.append(cid)
    c.garbage_collector().collect()
    clock.advance(GRACE + 1)
    assert set(c.garbage_collector().collect().dequeued) == set(ids)
    assert set(ids) <= set(c.control.load().collected)
    return ids


def _zombie(c: CheckpointCoordinator, cid: int) -> str:
    key = c.layout.task_data_prefix(cid, TaskId("keyed", 0), "zombie") + "part-0"
    c.store.put(key, b"written by a server job whose client was killed")
    return key


def test_a_write_after_the_dequeue_is_deleted_by_a_later_pass(store: ObjectStore) -> None:
    clock = FakeClock()
    c = _coordinator(store, clock)
    _completed(c)
    (aborted,) = _collected(c, clock, 1)
    late = _zombie(c, aborted)
    for _ in range(5):  # the reproduction ran 5 passes; the first must do
        report = c.garbage_collector().collect(history_limit=100)
        if not store.exists(late):
            break
    assert not store.exists(late) and late in report.deleted_files
    assert aborted in c.control.load().collected  # its records stay in history


def test_a_late_file_never_blocks_the_pruning_of_its_records(store: ObjectStore) -> None:
    """Past the sweep's window (the newest collected ids), a late file goes with its
    checkpoint's records, once `history_limit` newer ids are collected."""
    clock = FakeClock()
    c = _coordinator(store, clock)
    _completed(c)
    ids = _collected(c, clock, COLLECTED_SWEEP + 2)
    oldest = ids[0]
    late = _zombie(c, oldest)
    c.garbage_collector().collect(history_limit=100)
    assert store.exists(late)  # outside the window: it waits for the records' pruning
    report = c.garbage_collector().collect(history_limit=len(ids) - 1)
    assert report.pruned_checkpoints == [oldest]
    assert late in report.deleted_files and not store.exists(late)
    assert not list(store.list(c.layout.checkpoint(oldest)))
    assert oldest not in c.control.load().collected


def test_each_pass_lists_a_bounded_number_of_folders(store: ObjectStore) -> None:
    """However many ids are collected, a pass lists the retained folders and the newest
    COLLECTED_SWEEP collected ones (plus, when it prunes, each pruned id once)."""
    clock = FakeClock()
    counting = CountingStore(store)
    c = _coordinator(counting, clock)
    retained = _completed(c)
    ids = _collected(c, clock, 3 * COLLECTED_SWEEP)
    late = {cid: _zombie(c, cid) for cid in ids}
    counting.listed.clear()
    report = c.garbage_collector().collect(history_limit=len(ids))
    prefix = c.layout.checkpoints_prefix
    folders = [p[len(prefix) :].split("/")[0] for p in counting.listed if p.startswith(prefix)]
    assert sorted(folders) == sorted(
        c.layout.checkpoint(i)[len(prefix) :].rstrip("/")
        for i in [retained, *ids[-COLLECTED_SWEEP:]]
    )
    assert sorted(report.deleted_files) == sorted(late[i] for i in ids[-COLLECTED_SWEEP:])


#: Big enough that hashing a single file would show in the process's read bytes.
_DATA_BYTES = 8 << 20


def _bytes_read() -> int:
    """Bytes this process has read through read() calls so far (page cache included)."""
    io = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(io["rchar"])


@pytest.mark.parametrize("kind", [LocalObjectStore, ConfinedLocalStore])
def test_gc_on_a_folder_store_reads_no_data_file(kind: type, tmp_path: Path) -> None:
    """GC lists data folders for keys and sizes only: on a folder store, where a listed
    object's etag is a hash of the whole file, it must not read each file to list it
    (a pass over a large store would read all of it)."""
    clock = FakeClock()
    store = kind(tmp_path / "store")
    c = _coordinator(store, clock)
    retained = _completed(c)
    ids = _collected(c, clock, 2)
    late = [_zombie(c, cid) for cid in [retained, *ids]]
    aborted = c.trigger({"src": {"p0": 1}}).checkpoint_id
    staged = c.layout.task_data_prefix(aborted, TaskId("keyed", 0), "a1") + "part-0"
    c.abort(aborted, CheckpointFailureReason.EXPIRED)
    for key in [*late, staged]:
        store.put(key, os.urandom(_DATA_BYTES))
    before = _bytes_read()
    discarded = c.garbage_collector().discard_aborted(aborted)
    report = c.garbage_collector().collect(history_limit=1)
    read = _bytes_read() - before
    assert discarded == [staged]
    assert set(late) <= set(report.deleted_files) and ids[0] in report.pruned_checkpoints
    assert report.deleted_bytes >= len(late) * _DATA_BYTES
    assert not any(store.exists(k) for k in [*late, staged])
    assert read < _DATA_BYTES, f"GC read {read:,} bytes"


def test_a_pass_lists_no_more_folders_as_an_append_sinks_history_grows(tmp_path: Path) -> None:
    """A reviewer's finding (invariant 9, GC's work per run): an append sink's manifest
    holds every epoch's files, so each collected id beyond the history limit kept its
    folder referenced; every pass listed each such folder again, to find that out, and
    a steady pass (one epoch since the last) listed more the longer the history was."""
    from support.protocol_steps import complete, coordinator

    counting = CountingStore(LocalObjectStore(tmp_path))
    clock = FakeClock()
    c = coordinator(counting, clock, num_retained=1, gc_grace=0, timeout=1)
    listed: list[int] = []
    for epochs in (20, 40, 80):
        while len(c.control.load().collected) < epochs:
            complete(c)  # its sink publishes in append mode
            clock.advance(2)
            c.garbage_collector().collect(history_limit=5)
        counting.listed.clear()
        complete(c)
        clock.advance(2)
        c.garbage_collector().collect(history_limit=5)
        prefix = c.layout.checkpoints_prefix
        listed.append(sum(1 for p in counting.listed if p.startswith(prefix)))
    assert listed[0] == listed[1] == listed[2], listed
