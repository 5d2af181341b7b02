"""GC and a Delta table sink's own files (issue 41): a Delta version reads copies of the
staged files in the table's folder (tables/delta.py), so GC's checkpoint files and the
table's copies are kept by different rules, and the table can be left by a commit that
failed mid-way (copies made, no log commit) or VACUUMed by someone else. Whatever of
these happened, nothing a retained checkpoint reads is deleted: its staged files (a
restore's rewind reads them) and its Delta version's copies. Real delta-rs on a folder and
on SeaweedFS, a storage fault at the log commit by a wrapped commit (table_epochs.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from batchpoint.errors import CheckpointError
from batchpoint.ops.maintenance import gc, table_findings
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.sinks import SinkManifest, SinkPublisher, visible_files
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import restore_checkpoint
from batchpoint.storage import StoreRef
from batchpoint.tables.delta import DeltaSinkTable
from batchpoint.tables.service import sync_tables
from support.counting_store import CountingStore
from tables.table_epochs import SINK, TableEpochs


def _epochs(
    table_store: StoreRef, tmp_path: Path, mp: pytest.MonkeyPatch, kept: int
) -> TableEpochs:
    config = CheckpointConfig(num_retained=kept)
    return TableEpochs(table_store, tmp_path, mp, config, table_format="delta")


def _manifest(epochs: TableEpochs) -> SinkManifest:
    manifest = SinkPublisher(epochs.store, epochs.coordinator.layout).manifest(SINK)
    assert manifest is not None
    return manifest


def _table(epochs: TableEpochs) -> DeltaSinkTable:
    table = epochs.table()
    assert isinstance(table, DeltaSinkTable)
    return table


def _present(epochs: TableEpochs) -> set[str]:
    return {o.key for o in epochs.store.list("")}


def _read_by_retained(epochs: TableEpochs) -> set[str]:
    """What the retained checkpoints read: each one's staged files (what a restore's
    rewind copies from), the files its newest Delta version reads that are still there
    (a VACUUM may have taken others), and the current version's."""
    table = _table(epochs)
    manifest = _manifest(epochs)
    present = _present(epochs)
    retained = set(epochs.coordinator.completed.retained_ids()) & set(manifest.epochs)
    keys = {f.path for cid in retained for f in visible_files(manifest, cid)}
    versions = {c.checkpoint_id: c.snapshot_id for c in table.history() if c.checkpoint_id}
    for cid in retained:
        if cid in versions:
            keys |= table.version_keys(versions[cid]) & present
    current = table.require().version()
    assert table.version_keys(current) <= present, "the current version reads what is gone"
    return keys | table.version_keys(current)


def _findings(epochs: TableEpochs) -> list[str]:
    return [str(f) for f in table_findings(epochs.coordinator, epochs.store)]


def test_a_commit_that_failed_mid_way_is_completed_by_the_next_sync(
    table_store: StoreRef, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log commit of 2 failed after its copy was made: the table lags (a finding
    naming the Delta table and its path), GC keeps what the next sync needs, and the next
    sync commits 2 with the copy that is there."""
    epochs = _epochs(table_store, tmp_path, monkeypatch, kept=2)
    one = epochs.epoch({"a": 1})
    with epochs.outage():
        two = epochs.epoch({"a": 2, "b": 2})
    table = _table(epochs)
    assert [c.checkpoint_id for c in table.history()] == [one]
    copies = epochs.read_files(two)
    assert copies  # made before the log commit failed

    (lag,) = _findings(epochs)
    assert lag.startswith(
        f"sink {SINK}: delta table pay.balances at {table.uri} lags its manifest: the table "
        f"is at checkpoint {one} (generation 0), the manifest at checkpoint {two}"
    ), lag
    assert table.uri.endswith("/delta/pay/balances")

    needed = _read_by_retained(epochs)
    report = gc(epochs.coordinator, epochs.coordinator.store)
    assert not set(report.deleted_files) & needed
    assert needed <= _present(epochs) and epochs.read_files(two) == copies

    counting = CountingStore(epochs.store)
    monkeypatch.setattr(StoreRef, "open", lambda _ref: counting)
    (synced,) = sync_tables(epochs.store_ref, "pay", {SINK: epochs.binding})
    assert synced.committed == [two]
    assert not [k for (op, k) in counting.by_key if op == "upload_file"]  # the copy reused
    assert epochs.assert_every_snapshot_reads() == [one, two]
    assert _findings(epochs) == []


def test_orphan_copies_go_only_once_no_retained_checkpoint_needs_them(
    table_store: StoreRef, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log commit of 3 fails after its copy, through the finalizes of 3, 4 and 5 (the
    table stays at 2). While 3 is retained, expiry keeps its copy; once GC drops it, the
    copy goes; the table's own version (of 2) stays readable throughout."""
    epochs = _epochs(table_store, tmp_path, monkeypatch, kept=2)
    epochs.epoch({"a": 1})
    two = epochs.epoch({"a": 2})
    with epochs.outage():
        three = epochs.epoch({"a": 3})
        four = epochs.epoch({"a": 4})
    orphan = epochs.read_files(three)
    assert orphan and not epochs.read_files(four)  # each sync failed at the commit of 3

    report = gc(epochs.coordinator, epochs.coordinator.store)  # keeps 3 and 4
    assert sorted(_manifest(epochs).epochs) == [three, four]
    assert epochs.read_files(three) == orphan  # 3 is retained: its copy is kept
    assert not set(report.deleted_files) & set(orphan)
    assert epochs.read() == {"a": 2} and epochs.read_files(two)

    with epochs.outage():
        five = epochs.epoch({"a": 5})
    gc(epochs.coordinator, epochs.coordinator.store)  # keeps 4 and 5: drops 3
    assert sorted(_manifest(epochs).epochs) == [four, five]
    assert not epochs.read_files(three)  # no retained checkpoint needs it
    assert epochs.read() == {"a": 2} and epochs.read_files(two)  # the lagging version

    six = epochs.epoch({"a": 6})  # storage is back: a rewind to 6
    assert epochs.read() == {"a": 6}
    assert epochs.assert_every_snapshot_reads() == [six]


def test_expiry_reads_the_manifest_after_listing_the_copies(
    table_store: StoreRef, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interleaving: an expiry (GC's) read the manifest before 2 was published; a sync of
    2 pinned it and copied its file; then the expiry lists the copies. It must not take
    2's copy for an orphan: the sync's commit would then read a file that is gone."""
    epochs = _epochs(table_store, tmp_path, monkeypatch, kept=1)
    one = epochs.epoch({"a": 1})
    expirer = _table(epochs)
    stale = _manifest(epochs)  # what the expiry read: 1 only
    loaded = expirer.require()
    real_add = DeltaSinkTable._add
    ran: list[Any] = []

    def add_then_expire(self: DeltaSinkTable, staged: Any, wanted: Any, step: Any) -> Any:
        action = real_add(self, staged, wanted, step)
        if not ran:
            ran.append(expirer.expire(loaded, stale))
        return action

    monkeypatch.setattr(DeltaSinkTable, "_add", add_then_expire)
    two = epochs.epoch({"a": 2})
    assert ran, "the expiry did not run inside the sync"
    assert [c.checkpoint_id for c in _table(epochs).history()] == [one, two]
    assert epochs.read(two) == {"a": 2}


def test_a_vacuumed_table_says_which_retained_checkpoints_cannot_be_read(
    table_store: StoreRef, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone VACUUMs the table with no retention: the versions of checkpoints 1 and 2
    read files that are gone. Time travel to them is the clear error, the findings name
    them, GC deletes none of their own files, the sync goes on over VACUUM's commits, and
    a restore to 2 rewinds the table from 2's own files."""
    epochs = _epochs(table_store, tmp_path, monkeypatch, kept=3)
    one, two, three = (epochs.epoch({"a": n}) for n in (1, 2, 3))
    table = _table(epochs)
    table.require().vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)

    for cid in (one, two):
        with pytest.raises(CheckpointError, match="reads files that are gone") as caught:
            table.read(cid)
        assert f"{table.uri} at version {table.snapshot_of(cid)}" in str(caught.value)
    assert epochs.read(three) == {"a": 3}
    (finding,) = _findings(epochs)
    assert (
        f"sink {SINK}: delta table pay.balances at {table.uri}: the versions of retained "
        f"checkpoint(s) {one}, {two} (version(s) 1, 2) read files that are gone (a VACUUM "
        "removed them)"
    ) in finding

    needed = _read_by_retained(epochs)
    report = gc(epochs.coordinator, epochs.coordinator.store)
    assert not set(report.deleted_files) & needed and needed <= _present(epochs)
    assert [str(f) for f in report.findings] == [finding]  # GC says it too

    four = epochs.epoch({"a": 4})  # over VACUUM START/END: no data changed
    assert epochs.read() == {"a": 4} and epochs.read(four) == {"a": 4}
    gc(epochs.coordinator, epochs.coordinator.store)
    (finding,) = _findings(epochs)  # 1 left the retained checkpoints
    assert f"retained checkpoint(s) {two} (version(s) 2)" in finding

    driver = PipelineDriver(epochs.pipeline, epochs.store_ref, epochs.config)
    assert restore_checkpoint(driver, two).restored
    assert epochs.read() == {"a": 2} and epochs.read(two) == {"a": 2}
    assert _findings(epochs) == []  # 2's newest version (the rewind) reads


def test_gc_of_a_lagging_vacuumed_table_with_a_failed_commit_keeps_what_is_retained(
    table_store: StoreRef, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All at once: 1-3 synced, the table VACUUMed, then the log commits of 4 and 5
    failed after their copies (the table lags at 3). GC deletes nothing a retained
    checkpoint reads; the next sync brings the table to 6 and every retained checkpoint
    whose version VACUUM left reads as of it."""
    epochs = _epochs(table_store, tmp_path, monkeypatch, kept=3)
    for n in (1, 2, 3):
        epochs.epoch({"a": n})
    _table(epochs).require().vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False
    )
    with epochs.outage():
        four, five = (epochs.epoch({"a": n}) for n in (4, 5))
    assert epochs.read() == {"a": 3}
    problems = _findings(epochs)
    assert any("lags its manifest" in p for p in problems)
    assert any("read files that are gone" in p for p in problems)

    needed = _read_by_retained(epochs)
    report = gc(epochs.coordinator, epochs.coordinator.store)
    assert not set(report.deleted_files) & needed and needed <= _present(epochs)
    assert epochs.read() == {"a": 3}

    six = epochs.epoch({"a": 6})  # 4, 5 and 6 in turn, with the copies that are there
    assert epochs.read() == {"a": 6}
    assert epochs.assert_every_snapshot_reads() == [3, four, five, six]


def test_a_check_beside_the_lag_that_fails_is_a_finding_not_a_stop(
    table_store: StoreRef, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The look for other writers' commits and VACUUMed versions reads the log: when it
    cannot, that is a finding, and GC goes on (the table's references do not hang on it)."""
    epochs = _epochs(table_store, tmp_path, monkeypatch, kept=1)
    one = epochs.epoch({"a": 1})
    two = epochs.epoch({"a": 2})

    def unreadable(self: DeltaSinkTable, table: Any, manifest: Any) -> list[str]:
        raise OSError("storage fault reading the _delta_log")

    monkeypatch.setattr(DeltaSinkTable, "problems", unreadable)
    report = gc(epochs.coordinator, epochs.coordinator.store)
    (finding,) = [str(f) for f in report.findings]
    assert f"sink {SINK}: sink '{SINK}': delta table pay.balances cannot be read" in finding
    assert "storage fault reading the _delta_log" in finding
    assert f"{SINK}@{one}" in report.dropped_epochs and report.deleted_files  # not stopped
    assert epochs.assert_every_snapshot_reads() == [two]
