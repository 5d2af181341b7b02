"""A pipeline's sink as another's source, without Spark: the barrier is the upstream's
published position, an epoch reads what was published between its two barriers, and a
restore of the upstream that takes back either end stops it, naming the restore. The
upstream's records are the real protocol's: a registered spec, completed checkpoints,
notify's publication, a restore, GC's pruning."""

from __future__ import annotations

import hashlib

import pytest

from batchpoint.errors import ConfigError, StorageError
from batchpoint.protocol.checkpoint import FileHandle, TaskMetrics
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.pipeline import OperatorKind, OperatorSpec, PipelineSpec
from batchpoint.protocol.sink_manifest import SinkManifest, SinkMode
from batchpoint.protocol.sinks import SinkPublisher
from batchpoint.sources.barrier import PartitionOffset, SourceBarrier
from batchpoint.sources.errors import SourceOffsetError
from batchpoint.sources.upstream import (
    PipelineSinkSource,
    UpstreamBinding,
    UpstreamPosition,
    UpstreamRestored,
)
from batchpoint.storage.base import ObjectStore
from support.fake_epochs import listing
from support.restoring import restore

UPSTREAM = "ledger"
SPEC = PipelineSpec(
    UPSTREAM,
    (
        OperatorSpec("src", OperatorKind.SOURCE),
        OperatorSpec("out", OperatorKind.SINK, ("src",)),
        OperatorSpec("audit", OperatorKind.SINK, ("src",)),
    ),
)
#: What the error tells the downstream pipeline to do.
FOLLOW = "pipeline 'reports' must follow: `batchpoint restore --pipeline reports`"


class Upstream:
    """The upstream pipeline: each epoch stages one file for sink `out`, completes, and
    is published by notify (as the runtime does after a finalize)."""

    def __init__(self, store: ObjectStore, mode: SinkMode) -> None:
        self.store, self.mode = store, mode
        self.c = CheckpointCoordinator(store, SPEC)
        self.c.register(SPEC)
        self.sinks = SinkPublisher(store, self.c.layout)
        self.files: dict[int, str] = {}

    def epoch(self) -> int:
        pending = self.c.trigger({"src": {"p0": len(self.files) + 1}})
        cid = pending.checkpoint_id
        task = TaskId("out", 0)
        key = self.c.layout.task_data_prefix(cid, task, "a1") + "sink/part-0.parquet"
        data = f"rows of {cid}".encode()
        self.store.put(key, data)
        handle = FileHandle(key, len(data), hashlib.sha256(data).hexdigest(), 1, name="sink")
        self.c.acknowledge(cid, task, "a1", [handle], TaskMetrics())
        self.c.acknowledge(cid, TaskId("audit", 0), "a1", [], TaskMetrics())
        outcome = self.c.try_finalize(cid)
        assert outcome is not None and outcome.completed is not None, outcome
        report = self.c.notify_checkpoint_complete(cid, [("out", self.mode, ["k"])])
        assert report.published == [f"out@{cid}"], report
        self.files[cid] = key
        return cid


def source(store: ObjectStore, pipeline: str = UPSTREAM, sink: str = "out") -> PipelineSinkSource:
    return PipelineSinkSource(store, UpstreamBinding(pipeline, sink, reader="reports"))


def barrier(offset: int, generation: int | None = None) -> SourceBarrier:
    return SourceBarrier({f"{UPSTREAM}/out": PartitionOffset(offset, generation=generation)})


# -- barriers ---------------------------------------------------------------------------


def test_an_unregistered_upstream_pipeline_is_named(local_store: ObjectStore) -> None:
    with pytest.raises(ConfigError, match="upstream pipeline 'nobody' is not registered in"):
        source(local_store, pipeline="nobody").capture_barrier()


def test_an_unknown_sink_is_named_with_the_sinks_there_are(local_store: ObjectStore) -> None:
    Upstream(local_store, SinkMode.APPEND)
    with pytest.raises(
        ConfigError, match=r"pipeline 'ledger' has no sink 'nope' \(its sinks: audit, out\)"
    ):
        source(local_store, sink="nope").capture_barrier()


def test_before_anything_is_published_the_barrier_is_offset_0(local_store: ObjectStore) -> None:
    Upstream(local_store, SinkMode.APPEND)
    got = source(local_store).capture_barrier()
    assert got == SourceBarrier({"ledger/out": PartitionOffset(0)})
    assert source(local_store).read_between(None, got).unchanged


def test_the_barrier_is_the_published_checkpoint_and_its_generation(
    store: ObjectStore,
) -> None:
    up = Upstream(store, SinkMode.APPEND)
    up.epoch()
    second = up.epoch()
    assert source(store).capture_barrier() == barrier(second, generation=0)
    source(store).verify_barrier(barrier(second, 0))


# -- what an epoch reads ----------------------------------------------------------------


def test_append_reads_the_epochs_after_the_base_oldest_first(local_store: ObjectStore) -> None:
    up = Upstream(local_store, SinkMode.APPEND)
    first = up.epoch()
    read_first = source(local_store).capture_barrier()
    second, third = up.epoch(), up.epoch()
    read_third = source(local_store).capture_barrier()

    read = source(local_store).read_between(read_first, read_third)

    assert read.mode is SinkMode.APPEND and read.before == ()
    assert [s.key for s in read.after] == [up.files[second], up.files[third]]
    from_nothing = source(local_store).read_between(None, read_first)
    assert [s.key for s in from_nothing.after] == [up.files[first]]
    unchanged = source(local_store).read_between(read_third, read_third)
    assert unchanged.unchanged and unchanged.splits == 0


def test_the_base_offset_of_another_sink_stops_the_epoch(local_store: ObjectStore) -> None:
    """A source kept by uid that now reads another sink: read as this sink's, the base's
    offset skipped everything this sink published up to it (a reviewer's demonstration).
    The sink is matched by uid, so one renamed keeping its uid is the same partition."""
    up = Upstream(local_store, SinkMode.APPEND)
    up.epoch()
    base = source(local_store).capture_barrier()
    second = up.epoch()
    other = SourceBarrier({f"{UPSTREAM}/audit": PartitionOffset(second, generation=0)})
    with pytest.raises(SourceOffsetError, match=r"read ledger/out under this source's uid, and "):
        source(local_store, sink="audit").read_between(base, other)
    read = source(local_store).read_between(base, source(local_store).capture_barrier())
    assert [s.key for s in read.after] == [up.files[second]]


def test_snapshot_reads_the_content_before_and_after(local_store: ObjectStore) -> None:
    up = Upstream(local_store, SinkMode.SNAPSHOT)
    first = up.epoch()
    read_first = source(local_store).capture_barrier()
    up.epoch()
    third = up.epoch()
    read_third = source(local_store).capture_barrier()

    read = source(local_store).read_between(read_first, read_third)

    assert read.mode is SinkMode.SNAPSHOT and read.key_columns == ("k",)
    assert [s.key for s in read.before] == [up.files[first]]
    assert [s.key for s in read.after] == [up.files[third]]
    assert not read.unchanged
    from_nothing = source(local_store).read_between(None, read_first)
    assert from_nothing.before == () and [s.key for s in from_nothing.after] == [up.files[first]]


def test_a_snapshot_base_gc_pruned_asks_for_more_retention(local_store: ObjectStore) -> None:
    up = Upstream(local_store, SinkMode.SNAPSHOT)
    first = up.epoch()
    read_first = source(local_store).capture_barrier()
    third = [up.epoch(), up.epoch()][-1]
    assert up.sinks.prune_unreachable("out", lambda: [third]) == [first, third - 1]

    with pytest.raises(SourceOffsetError) as raised:
        source(local_store).read_between(read_first, source(local_store).capture_barrier())

    assert not isinstance(raised.value, UpstreamRestored)  # nothing was taken back
    assert f"the upstream's checkpoint {first}, which the base checkpoint read" in str(raised.value)
    assert "retain more upstream checkpoints than this pipeline lags behind" in str(raised.value)


# -- an upstream restore ----------------------------------------------------------------


@pytest.mark.parametrize("mode", list(SinkMode))
def test_a_restore_taking_back_the_barrier_names_the_restore(
    local_store: ObjectStore, mode: SinkMode
) -> None:
    up = Upstream(local_store, mode)
    first = up.epoch()
    read_first = source(local_store).capture_barrier()
    up.epoch()
    read_second = source(local_store).capture_barrier()
    restore(up.c, first)

    named = (
        rf"'ledger' was restored to checkpoint {first} \(restore generation 1, at .*\), "
        rf"and its checkpoint {first + 1}, which the barrier read up to, was taken back"
    )
    with pytest.raises(UpstreamRestored, match=named) as raised:
        source(local_store).verify_barrier(read_second)
    assert FOLLOW in str(raised.value)
    with pytest.raises(UpstreamRestored, match="which this epoch's barrier read up to"):
        source(local_store).read_between(read_first, read_second)
    # what the restore kept still verifies, and reading on from it works
    source(local_store).verify_barrier(read_first)
    after = up.epoch()
    read = source(local_store).read_between(read_first, source(local_store).capture_barrier())
    assert [s.key for s in read.after] == [up.files[after]]


def _restore_not_rewound(up: Upstream, checkpoint_id: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The upstream restored to `checkpoint_id`: its compare-and-swap committed, then its
    process lost the storage before rewinding the sinks (the real rewind, made to fail)."""
    with monkeypatch.context() as patched:

        def outage(*args: object, **kwargs: object) -> None:
            raise StorageError("the storage went away before the sinks were rewound")

        patched.setattr(SinkPublisher, "rewind_all", outage)
        with pytest.raises(StorageError):
            restore(up.c, checkpoint_id)
    restore_in_flight = up.c.control_record().restore
    assert restore_in_flight is not None and not restore_in_flight.sinks_rewound


def test_a_restore_not_rewound_yet_is_read_as_its_rewind_will_leave_the_sink(
    local_store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Until its sinks are rewound, the manifest as stored still shows what the restore
    took back: the trigger captured it and the epoch read it (a reviewer's
    demonstration). The reader applies the committed restore to what it reads, and
    writes nothing of the upstream's."""
    up = Upstream(local_store, SinkMode.APPEND)
    first = up.epoch()
    read_first = source(local_store).capture_barrier()
    up.epoch()
    read_second = source(local_store).capture_barrier()
    _restore_not_rewound(up, first, monkeypatch)
    before = listing(local_store)

    barrier = source(local_store).capture_barrier()
    assert UpstreamPosition.of(barrier).checkpoint_id == first
    assert source(local_store).read_between(read_first, barrier).unchanged
    with pytest.raises(UpstreamRestored, match="which the barrier read up to, was taken back"):
        source(local_store).verify_barrier(read_second)
    source(local_store).verify_barrier(read_first)
    assert listing(local_store) == before, "a reader wrote the upstream's records"


def test_with_the_upstreams_control_record_damaged_nothing_is_read(
    local_store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a restore took the output back is in the control record: without it the
    reader used to fall back to the manifest as stored, and read what a restore not yet
    rewound had taken back (found by a reviewer)."""
    up = Upstream(local_store, SinkMode.APPEND)
    first = up.epoch()
    read_first = source(local_store).capture_barrier()
    up.epoch()
    _restore_not_rewound(up, first, monkeypatch)
    local_store.put(up.c.control.key, b"{not json")
    for read in (
        lambda s: s.capture_barrier(),
        lambda s: s.verify_barrier(read_first),
        lambda s: s.read_between(None, read_first),
    ):
        with pytest.raises(SourceOffsetError, match=r"cannot be told.*batchpoint repair"):
            read(source(local_store))


@pytest.mark.parametrize("rewound", [False, True])
def test_a_restore_committed_while_the_manifest_is_read_is_applied(
    local_store: ObjectStore, monkeypatch: pytest.MonkeyPatch, rewound: bool
) -> None:
    """The interleaving: the restore's compare-and-swap commits while the reader reads
    the manifest as it was before (then, or not yet, the rewind). The control record,
    read after the manifest, names the restore: what was read is read as it leaves it."""
    up = Upstream(local_store, SinkMode.APPEND)
    first = up.epoch()
    read_first = source(local_store).capture_barrier()
    second = up.epoch()
    read_second = source(local_store).capture_barrier()
    real = SinkPublisher.manifest

    def restored_meanwhile(self: SinkPublisher, sink: object) -> SinkManifest | None:
        monkeypatch.setattr(SinkPublisher, "manifest", real)
        before = real(self, sink)
        if rewound:
            restore(up.c, first)
        else:
            _restore_not_rewound(up, first, monkeypatch)
        return before

    monkeypatch.setattr(SinkPublisher, "manifest", restored_meanwhile)
    with pytest.raises(UpstreamRestored, match=f"its checkpoint {second}, which this epoch"):
        source(local_store).read_between(read_first, read_second)


@pytest.mark.parametrize("mode", list(SinkMode))
def test_a_restore_taking_back_the_base_names_the_restore(
    local_store: ObjectStore, mode: SinkMode
) -> None:
    up = Upstream(local_store, mode)
    first = up.epoch()
    up.epoch()
    read_second = source(local_store).capture_barrier()
    restore(up.c, first)
    up.epoch()  # generation 1, on the first
    now = source(local_store).capture_barrier()
    assert now[f"{UPSTREAM}/out"].generation == 1

    with pytest.raises(
        UpstreamRestored,
        match=rf"restored to checkpoint {first} \(restore generation 1, .*which the base "
        "checkpoint read up to, was taken back",
    ):
        source(local_store).read_between(read_second, now)


def test_without_its_restore_record_the_error_names_the_generation(
    local_store: ObjectStore,
) -> None:
    up = Upstream(local_store, SinkMode.APPEND)
    first = up.epoch()
    up.epoch()
    read_second = source(local_store).capture_barrier()
    restore(up.c, first)
    local_store.delete(up.c.layout.restore(1))

    with pytest.raises(
        UpstreamRestored, match=r"'ledger' was restored \(its sink is in restore generation 1\)"
    ):
        source(local_store).verify_barrier(read_second)
