"""GC keeps every file a table sink's snapshots read, wherever the table stands against
its manifest, and deletes nothing while a table cannot be expired or read: real pyiceberg
on a SQLite catalog and real delta-rs, on a folder and on SeaweedFS, through `ops.gc`
(what `batchpoint gc`, the cleanup task and the epoch's settle run). Issue 24,
reproduction 1; issue 41 for Delta, whose versions read their own copies of the staged
files (tables/delta.py): a Delta "outage" is a storage fault at the log commit, after the
commit's copies (tests/tables/table_epochs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchpoint.ops.maintenance import gc
from batchpoint.ops.runs import discard_checkpoint_data
from batchpoint.protocol.checkpoint import CheckpointFailureReason
from batchpoint.protocol.layout import TaskId
from batchpoint.storage import StoreRef
from tables.table_epochs import SINK, TableEpochs


@pytest.fixture(params=["iceberg", "delta"])
def table_format(request: pytest.FixtureRequest) -> str:
    """Each format in turn; a test of the catalog's own sets it to iceberg."""
    return request.param


@pytest.fixture
def epochs(
    table_store: StoreRef, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table_format: str
) -> TableEpochs:
    return TableEpochs(table_store, tmp_path, monkeypatch, table_format=table_format)


def _sink_files(epochs: TableEpochs, checkpoint_id: int) -> list[str]:
    prefix = epochs.coordinator.layout.operator_data_prefix(checkpoint_id, SINK)
    return [i.key for i in epochs.store.list(prefix)]


def test_gc_keeps_the_current_snapshot_of_a_table_that_lags_its_manifest(
    epochs: TableEpochs,
) -> None:
    """1a: the catalog was down through the finalizes of 2-4 (the table still at 1, the
    manifest at 4); GC drops epoch 1 from the manifest, yet the table's current snapshot
    reads its files (Delta: the version's copies; the copies the failed commits left, of
    epochs nothing retains, go)."""
    first = epochs.epoch({"a": 1})
    with epochs.outage():
        later = [epochs.epoch({"a": n}) for n in (2, 3, 4)]
    assert epochs.table().history()[-1].checkpoint_id == first  # the table lags

    report = gc(epochs.coordinator, epochs.coordinator.store)

    assert f"{SINK}@{first}" in report.dropped_epochs  # the manifest let go of it
    assert epochs.assert_every_snapshot_reads() == [first]  # the table did not
    assert epochs.read_files(first)
    assert epochs.read() == {"a": 1}
    (lag,) = [f for f in report.findings if f.subject == f"sink {SINK}"]
    assert "lags its manifest" in lag.problem
    assert f"at checkpoint {first} (generation 0), the manifest at checkpoint {later[-1]}" in (
        lag.problem
    )
    assert not _sink_files(epochs, later[0])  # what nothing reads still goes
    assert not epochs.read_files(later[0])  # Delta: the failed commit's copies too

    # The catalog is back: the next publish syncs the table (one rewind to the current
    # checkpoint, the old snapshot expired), and the next pass frees checkpoint 1.
    fifth = epochs.epoch({"a": 5})
    assert epochs.read() == {"a": 5}
    report = gc(epochs.coordinator, epochs.coordinator.store)
    assert not report.findings
    assert not _sink_files(epochs, first) and not epochs.read_files(first)
    assert epochs.assert_every_snapshot_reads() == [fifth]


def test_gc_deletes_nothing_while_a_table_cannot_be_expired(epochs: TableEpochs) -> None:
    """1b: with the catalog down during GC, the pass drops epochs from the manifest but
    deletes nothing at all; time travel to every snapshot the table lists still reads."""
    ids = [epochs.epoch({"a": n}) for n in (1, 2, 3)]
    c = epochs.coordinator
    aborted = c.trigger({"events": {}}).checkpoint_id
    stray = c.layout.task_data_prefix(aborted, TaskId(SINK, 0), "a1") + "part-0.parquet"
    epochs.store.put(stray, b"staged by an aborted checkpoint")
    c.abort(aborted, CheckpointFailureReason.DECLINED, "declined")

    with epochs.outage(reads=True):
        report = gc(c, c.store)
    assert epochs.assert_every_snapshot_reads() == ids
    assert report.deleted_files == [] and report.dequeued == []
    assert [f.subject for f in report.findings] == ["sink tables"]
    assert "not expired, nothing deleted" in report.findings[0].problem
    assert epochs.store.exists(stray)  # nothing at all, not only the table's files

    report = gc(c, c.store)  # the catalog is back: snapshots of dropped epochs expire, then go
    assert not report.findings
    assert not epochs.store.exists(stray)
    assert not _sink_files(epochs, ids[0]) and not _sink_files(epochs, ids[1])
    assert not epochs.read_files(ids[0]) and not epochs.read_files(ids[1])
    assert epochs.assert_every_snapshot_reads() == [ids[-1]]


def test_a_dry_run_that_cannot_read_a_table_would_delete_nothing(epochs: TableEpochs) -> None:
    """Only the table still reads checkpoint 1's files (the manifest dropped it): a dry
    run that cannot read the table must not count them as garbage."""
    first = epochs.epoch({"a": 1})
    with epochs.outage():
        for n in (2, 3):
            epochs.epoch({"a": n})
    gc(epochs.coordinator, epochs.coordinator.store)
    assert epochs.read_files(first)
    with epochs.outage(reads=True):
        report = gc(epochs.coordinator, epochs.coordinator.store, dry_run=True)
    assert report.deleted_files == []
    assert [f.subject for f in report.findings] == ["sink tables"]
    assert "not read, nothing deleted" in report.findings[0].problem
    assert epochs.assert_every_snapshot_reads() == [first]


@pytest.mark.parametrize("table_format", ["iceberg"])  # Delta tables have no catalog
def test_gc_through_another_catalog_than_the_pipelines_deletes_nothing(
    epochs: TableEpochs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A terminal whose BATCHPOINT_TABLE_CATALOG names another (empty) catalog does not
    take the table's absence there for no table: its metadata is in storage."""
    ids = [epochs.epoch({"a": n}) for n in (1, 2, 3)]
    monkeypatch.setenv("BATCHPOINT_TABLE_CATALOG", f"sqlite:///{tmp_path / 'other.db'}")
    report = gc(epochs.coordinator, epochs.coordinator.store)
    assert report.deleted_files == []
    (finding,) = report.findings
    assert "not in the catalog read here, yet its metadata is in storage" in finding.problem
    assert epochs.assert_every_snapshot_reads() == ids


def test_the_cleanup_of_one_checkpoint_leaves_a_completed_ones_files_to_gc(
    epochs: TableEpochs,
) -> None:
    """The cleanup task's GC of one checkpoint (`discard_checkpoint_data`) asks no table:
    it must not touch a completed checkpoint's folder, which a table may still read."""
    first = epochs.epoch({"a": 1})
    with epochs.outage():
        for n in (2, 3):
            epochs.epoch({"a": n})
    gc(
        epochs.coordinator, epochs.coordinator.store
    )  # the manifest drops epoch 1; the lagging table reads it
    assert discard_checkpoint_data(epochs.coordinator, first) == []
    assert epochs.assert_every_snapshot_reads() == [first]


@pytest.mark.parametrize("table_format", ["iceberg"])  # Delta: tests/tables/test_delta_*.py
def test_a_catalog_that_cannot_be_reached_is_named_without_its_password(
    epochs: TableEpochs, monkeypatch: pytest.MonkeyPatch
) -> None:
    epochs.epoch({"a": 1})
    secret = "s3cret-catalog-pass"
    uri = f"postgresql+psycopg2://batchpoint:{secret}@127.0.0.1:9/catalog"
    monkeypatch.setenv("BATCHPOINT_TABLE_CATALOG", uri)
    report = gc(epochs.coordinator, epochs.coordinator.store)
    (finding,) = report.findings
    assert report.deleted_files == [] and "nothing deleted" in finding.problem
    assert "postgresql+psycopg2://batchpoint:**********@127.0.0.1:9/catalog" in finding.problem
    assert secret not in str(finding)
