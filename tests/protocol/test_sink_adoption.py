"""Sink manifests an older release kept under the sink's name are adopted at its uid's
key (issue 36, invariants 16 and 17), on both stores, without Spark:

- a publish adopts them (the sink declared with another uid, or renamed in the same
  deploy: the base checkpoint recorded the old name; a history the defect cut in two at
  a rename: both parts), the history whole and the old manifests removed; a reader
  before that reads the old ones and writes nothing;
- two actors at once (a retried notify, a GC pass, a restore), let in at each step of
  the adoption (HookStore), neither lose nor repeat an epoch, and GC deletes no file the
  adopted history reads;
- a manifest under a name that another sink had, or that is another sink's uid, is
  never adopted.

The old layout is written as the release before did (`old_publish`: the staged output of
the tasks called by the name, into the manifest at the name's key); the real thing is
tests/data/sinks-by-name.tar.gz (tests/runtime/test_sink_identity.py)."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from batchpoint.protocol.cas import read_record
from batchpoint.protocol.checkpoint import CompletedCheckpoint, FileHandle
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.pipeline import OperatorKind, OperatorSpec, PipelineSpec
from batchpoint.protocol.publish import SinkTarget
from batchpoint.protocol.sink_keys import ManifestKeys, SinkRef
from batchpoint.protocol.sink_manifest import SinkMode
from batchpoint.protocol.sinks import PublishedEpoch, SinkManifest, SinkPublisher, read_sink_table
from batchpoint.protocol.table_pins import TablePin
from batchpoint.protocol.topology import NodeTopology, Topology
from batchpoint.storage.base import ObjectStore
from support.hooks import HookStore, once
from support.restoring import restore

PIPELINE = "p"
UID = "out-log"


def _spec(name: str) -> PipelineSpec:
    sink = OperatorSpec(name, OperatorKind.SINK, ("src",), properties={"mode": "append"})
    return PipelineSpec(PIPELINE, (OperatorSpec("src", OperatorKind.SOURCE), sink))


def _topology(name: str, uid: str) -> Topology:
    source = NodeTopology("src", "src", OperatorKind.SOURCE)
    return Topology(
        (source, NodeTopology(uid, name, OperatorKind.SINK, properties={"mode": "append"}))
    )


class Sinks:
    """One pipeline on a store whose one sink stages 3 rows per checkpoint."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.config = CheckpointConfig(num_retained=2)
        self.c = CheckpointCoordinator(store, PIPELINE, self.config)
        self.rows: list[str] = []  # everything every checkpoint staged, in order

    def coordinator(self, store: ObjectStore | None = None) -> CheckpointCoordinator:
        return CheckpointCoordinator(store or self.store, PIPELINE, self.config)

    def epoch(self, name: str, uid: str = UID) -> CompletedCheckpoint:
        """A completed checkpoint of the code that calls the sink `name`."""
        pending = self.c.trigger({"src": {}}, spec=_spec(name), topology=_topology(name, uid))
        cid = pending.checkpoint_id
        rows = [f"r{cid}-{i}" for i in range(3)]
        buffer = io.BytesIO()
        pq.write_table(pa.table({"k": rows}), buffer)
        data = buffer.getvalue()
        key = self.c.layout.task_data_prefix(cid, TaskId(name, 0), "a1") + "sink/part-0.parquet"
        self.store.put(key, data)
        handle = FileHandle(key, len(data), hashlib.sha256(data).hexdigest(), 3, name="sink")
        self.c.acknowledge(cid, TaskId(name, 0), "a1", [handle])
        outcome = self.c.try_finalize(cid)
        assert outcome is not None and outcome.completed is not None
        self.rows += rows
        return outcome.completed

    def old_publish(self, completed: CompletedCheckpoint, name: str) -> None:
        """What the release before issue 36 did on completion: the output of the tasks
        called `name`, into the manifest at the name's key, the sink called by name."""
        files = tuple(h for a in completed.acks if a.task.operator == name for h in a.handles)
        key = self.c.layout.sink_manifest(name)
        found = read_record(self.store, key, SinkManifest.decode)
        current = found[0] if found else SinkManifest(name, SinkMode.APPEND, ("k",), None, {}, 0)
        epoch = PublishedEpoch(completed.checkpoint_id, completed.pending.base_checkpoint_id, files)
        epochs = {**current.epochs, completed.checkpoint_id: epoch}
        self.store.put(
            key, replace(current, current=completed.checkpoint_id, epochs=epochs).encode()
        )

    def notify(self, cid: int, name: str, store: ObjectStore | None = None) -> list[str]:
        target = SinkTarget(UID, "append", ["k"], name)
        return self.coordinator(store).notify_checkpoint_complete(cid, [target]).published

    def keys(self) -> list[str]:
        return ManifestKeys(self.store, self.c.layout).keys()

    def read(self, name: str = "out", as_of: int | None = None) -> list[str]:
        ref = SinkRef(UID, name, (name,))
        return sorted(read_sink_table(self.store, PIPELINE, ref, as_of).column("k").to_pylist())


@pytest.fixture
def by_name(store: ObjectStore) -> Sinks:
    """Two checkpoints published the old way: the manifest at `out`, the sink's name."""
    sinks = Sinks(store)
    for _ in range(2):
        sinks.old_publish(sinks.epoch("out"), "out")
    assert sinks.keys() == ["out"]
    return sinks


@pytest.mark.parametrize("name", ["out", "renamed"])
def test_a_publish_adopts_the_manifest_kept_under_the_name(by_name: Sinks, name: str) -> None:
    """`renamed`: the deploy renamed the sink too; its base recorded the old name."""
    third = by_name.epoch(name)
    assert by_name.notify(third.checkpoint_id, name) == [f"{name}@3"]
    assert by_name.keys() == [UID]  # adopted, and the name's manifest removed
    manifest = by_name.c.sinks.manifest(UID)
    assert manifest is not None and manifest.sink == UID and manifest.moved_to is None
    assert [e.checkpoint_id for e in manifest.chain()] == [1, 2, 3]
    assert by_name.read(name) == sorted(by_name.rows)  # 9 rows, not 3
    assert by_name.read(name, as_of=2) == sorted(by_name.rows[:6])


def test_a_checkpoint_left_unpublished_under_the_old_name_is_published_by_uid(
    by_name: Sinks,
) -> None:
    """Checkpoint 3 completed under the old name and was never published (its finalize
    died); the renamed code's notify of 4 publishes 3 too: the sink's acks by uid."""
    by_name.epoch("out")
    fourth = by_name.epoch("renamed")
    assert by_name.notify(fourth.checkpoint_id, "renamed") == ["renamed@3", "renamed@4"]
    manifest = by_name.c.sinks.manifest(UID)
    assert manifest is not None and [e.checkpoint_id for e in manifest.chain()] == [1, 2, 3, 4]
    assert by_name.read("renamed") == sorted(by_name.rows)


def test_a_history_a_rename_cut_in_two_before_issue_36_is_made_whole(store: ObjectStore) -> None:
    """The release before kept the uid but started a manifest under the new name at the
    rename (the defect: 1-2 under `out`, 3-4 under `renamed`); the first write by uid
    follows the chain back through the name checkpoint 2 recorded, and adopts both."""
    sinks = Sinks(store)
    for name in ("out", "out", "renamed", "renamed"):
        sinks.old_publish(sinks.epoch(name), name)
    assert sinks.keys() == ["out", "renamed"]
    assert sinks.read("renamed") == sorted(sinks.rows)  # a reader sees it whole already
    fifth = sinks.epoch("renamed")
    assert sinks.notify(fifth.checkpoint_id, "renamed") == ["renamed@5"]
    assert sinks.keys() == [UID]
    manifest = sinks.c.sinks.manifest(UID)
    assert manifest is not None and [e.checkpoint_id for e in manifest.chain()] == [1, 2, 3, 4, 5]
    assert sinks.read("renamed") == sorted(sinks.rows)


def test_a_reader_reads_the_old_manifest_and_writes_nothing(by_name: Sinks) -> None:
    before = {i.key: i.etag for i in by_name.store.list(by_name.c.layout.root + "sinks/")}
    assert by_name.read() == sorted(by_name.rows)
    after = {i.key: i.etag for i in by_name.store.list(by_name.c.layout.root + "sinks/")}
    assert after == before


def _when(sinks: Sinks, op: str, key: str) -> Callable[[str, str], bool]:
    path = sinks.c.layout.sink_manifest(key)
    return lambda o, k: o == op and k == path


#: Where the adopting actor is paused: before freezing the old manifest, before creating
#: the uid's one from it (frozen, not merged), and before its first write there.
STEPS = {
    "freeze": ("replace", "out"),
    "merge": ("create", UID),
}


@pytest.mark.parametrize("step", sorted(STEPS))
@pytest.mark.parametrize("other", ["notify", "gc", "restore"])
def test_two_actors_adopting_at_once_neither_lose_nor_repeat_an_epoch(
    by_name: Sinks, step: str, other: str
) -> None:
    sinks = by_name
    third = sinks.epoch("out")

    def meanwhile() -> None:
        if other == "notify":  # a retried notify of the same checkpoint
            sinks.notify(third.checkpoint_id, "out")
        elif other == "gc":
            sinks.coordinator().garbage_collector(grace=0).collect()
        else:
            restore(sinks.coordinator(), 2)

    hook = once(meanwhile, _when(sinks, *STEPS[step]))
    sinks.notify(third.checkpoint_id, "out", HookStore(sinks.store, hook))
    assert hook.fired, "the other actor ran"
    assert sinks.keys() == [UID]
    manifest = sinks.c.sinks.manifest(UID)
    assert manifest is not None
    if other == "restore":  # rewound, whichever got there first; 3 never after it
        assert manifest.current == 2 and sinks.read() == sorted(sinks.rows[:6])
        return
    assert [e.checkpoint_id for e in manifest.chain()] == [1, 2, 3]
    assert sinks.read() == sorted(sinks.rows)  # every file there: GC deleted none read


def test_a_manifest_under_a_name_another_sink_had_is_not_adopted(by_name: Sinks) -> None:
    """The sink that published under `out` (uid out-log) is dropped; a new sink called
    `out` (uid fresh) starts empty, and out-log's history stays where it is."""
    new = by_name.epoch("out", uid="fresh")
    target = SinkTarget("fresh", "append", ["k"], "out")
    by_name.coordinator().notify_checkpoint_complete(new.checkpoint_id, [target])
    assert by_name.keys() == ["fresh", "out"]
    fresh = read_sink_table(by_name.store, PIPELINE, SinkRef("fresh", "out", ("out",)))
    assert sorted(fresh.column("k").to_pylist()) == sorted(by_name.rows[6:])  # its own only
    # nor by a sink whose uid it is not, when a checkpoint recorded whose uid it is
    keys = ManifestKeys(by_name.store, by_name.c.layout)
    keys.update(SinkRef("other", "out", ("out",)), lambda m: m)
    assert keys.read("out") is not None and keys.read("out").moved_to is None


def test_gc_finishes_an_adoption_left_half_way(by_name: Sinks) -> None:
    """An adopter that died between freezing the old manifest and merging it: GC meets
    the frozen manifest, finishes the adoption (merged, then removed), and keeps every
    file the history reads."""
    keys = ManifestKeys(by_name.store, by_name.c.layout)
    old = keys.read("out")
    assert old is not None
    by_name.store.put(by_name.c.layout.sink_manifest("out"), replace(old, moved_to=UID).encode())
    report = by_name.coordinator().garbage_collector(grace=0).collect()
    assert not report.findings, report.findings
    assert by_name.keys() == [UID]
    assert by_name.read() == sorted(by_name.rows)


def test_gc_that_listed_a_manifest_adopted_before_it_read_it_keeps_its_files(
    by_name: Sinks,
) -> None:
    """GC lists the manifest under the name; an adoption copies it to the uid's key and
    removes it before GC reads it (for the references, its second read): GC lists
    again, so checkpoint 1's files, which only the manifest keeps, are not deleted."""
    third = by_name.epoch("out")
    hook = once(
        lambda: by_name.notify(third.checkpoint_id, "out"), _when(by_name, "get", "out"), nth=2
    )
    report = (
        by_name.coordinator(HookStore(by_name.store, hook)).garbage_collector(grace=0).collect()
    )
    assert hook.fired and not report.findings
    assert report.dequeued == [1]  # subsumed, its folder judged: its file is read still
    assert by_name.keys() == [UID]
    assert by_name.read() == sorted(by_name.rows)


def test_an_adopter_that_only_pins_keeps_what_another_published_meanwhile(
    by_name: Sinks,
) -> None:
    """A table sync's pin adopts too: paused with the old manifest frozen, while a
    notify adopts it and publishes 3; its merge then adds nothing and drops nothing."""
    third = by_name.epoch("out")
    hook = once(lambda: by_name.notify(third.checkpoint_id, "out"), _when(by_name, *STEPS["merge"]))
    pins = SinkPublisher(HookStore(by_name.store, hook), by_name.c.layout)
    assert pins.pin(SinkRef(UID, "out", ("out",)), TablePin(2, None))
    assert hook.fired
    manifest = by_name.c.sinks.manifest(UID)
    assert manifest is not None and manifest.pins == (TablePin(2, None),)
    assert [e.checkpoint_id for e in manifest.chain()] == [1, 2, 3]
