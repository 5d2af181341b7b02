"""Other writers of a Delta table sink's table (issue 41): syncs racing each other, and
another engine writing to the table. Racing syncs leave exactly one batchpoint commit
per (generation, checkpoint) in the Delta log; another engine's data commit on top of
batchpoint's is never overwritten nor claimed by the next batchpoint commit: the sync
refuses (a finding says why) until their change is undone. Real delta-rs on a folder
and on SeaweedFS (commits are conditional puts there: AWS_CONDITIONAL_PUT=etag)."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from batchpoint.errors import BatchpointError
from batchpoint.ops.maintenance import gc, table_findings
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.storage import StoreRef
from batchpoint.tables.delta import DeltaSinkTable, txn_version
from batchpoint.tables.service import sync_tables
from batchpoint.tables.sync import TableError
from tables.table_epochs import PIPELINE, SINK, TableEpochs


@pytest.fixture
def epochs(table_store: StoreRef, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TableEpochs:
    config = CheckpointConfig(num_retained=3)
    return TableEpochs(table_store, tmp_path, monkeypatch, config, table_format="delta")


def _table(epochs: TableEpochs) -> DeltaSinkTable:
    table = epochs.table()
    assert isinstance(table, DeltaSinkTable)
    return table


def _sync(epochs: TableEpochs) -> Any:
    return sync_tables(epochs.store_ref, PIPELINE, {SINK: epochs.binding})


def _assert_one_commit_per_checkpoint(epochs: TableEpochs, newest: int) -> None:
    """The Delta log: one batchpoint commit per (generation, checkpoint), and the sink's
    transaction at the newest checkpoint."""
    table = _table(epochs)
    delta = table.require()
    commits = Counter((c.generation, c.checkpoint_id) for c in table.history(delta))
    assert commits and set(commits.values()) == {1}, commits
    assert delta.transaction_version(table.app_id) == txn_version(0, newest)


def _published(epochs: TableEpochs) -> list[int]:
    """1 synced; 2 and 3 published with the table behind (their log commits failed)."""
    one = epochs.epoch({"a": 1})
    with epochs.outage():
        rest = [epochs.epoch({"a": n}) for n in (2, 3)]
    assert [c.checkpoint_id for c in _table(epochs).history()] == [one]
    return [one, *rest]


def test_two_syncs_racing_commit_each_checkpoint_once(epochs: TableEpochs) -> None:
    """Both plan 2 then 3 on the same version; both commit 2 at once (a barrier): the log's
    conditional put takes one, the other plans again. Whichever commits what, the log
    holds one commit of each."""
    _one, _two, three = _published(epochs)
    barrier = threading.Barrier(2, timeout=30)
    real = DeltaSinkTable.commit
    errors: list[BaseException] = []
    reports: list[Any] = []

    def together(self: DeltaSinkTable, table: Any, step: Any, generation: int) -> None:
        if step.checkpoint_id == 2 and threading.current_thread().name.startswith("racer"):
            with contextlib.suppress(threading.BrokenBarrierError):  # planned past 2
                barrier.wait()
        real(self, table, step, generation)

    def race() -> None:
        try:
            reports.extend(_sync(epochs))
        except BaseException as exc:
            errors.append(exc)

    epochs.monkeypatch.setattr(DeltaSinkTable, "commit", together)
    racers = [threading.Thread(target=race, name=f"racer-{n}") for n in (1, 2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=120)
    assert not errors, errors
    # they did collide: one lost the commit of 2 and planned again
    assert sorted(r.rounds for r in reports)[-1] >= 2, reports
    assert sorted(c for r in reports for c in r.committed) == [2, 3]
    _assert_one_commit_per_checkpoint(epochs, three)
    assert epochs.assert_every_snapshot_reads() == [1, 2, 3]


def test_a_sync_that_refreshed_past_a_racers_commit_does_not_commit_it_again(
    epochs: TableEpochs,
) -> None:
    """Interleaving: A commits 2; before A's refresh, B syncs and commits 3; A's refresh
    reads B's commit, so A's commit of 3 would land on the head it read (no conditional
    put fails): only the sink's transaction version tells A that 3 is in."""
    _one, _two, three = _published(epochs)
    racer = _table(epochs)
    real_refresh = racer.refresh
    b_ran: list[Any] = []

    def refresh_after_b(table: Any) -> Any:
        if not b_ran:
            b_ran.append(_sync(epochs))  # B, all of it
        return real_refresh(table)

    racer.refresh = refresh_after_b  # type: ignore[method-assign]
    from batchpoint.protocol.sinks import SinkPins, SinkPublisher
    from batchpoint.tables.sync import TableSync

    publisher = SinkPublisher(epochs.store, epochs.coordinator.layout)
    report = TableSync(racer, lambda: publisher.manifest(SINK), SinkPins(publisher, SINK)).run()
    assert [r.committed for r in b_ran[0]] == [[three]]
    assert report.committed == [2] and report.rounds == 2
    _assert_one_commit_per_checkpoint(epochs, three)
    assert epochs.assert_every_snapshot_reads() == [1, 2, 3]


def _append_theirs(table: DeltaSinkTable, rows: dict[str, int], mode: str = "append") -> None:
    """Another engine's write to the table (delta-rs's, as any engine's would be)."""
    from deltalake import write_deltalake

    data = pa.table({"account_id": list(rows), "balance": list(rows.values())})
    write_deltalake(table.uri, data, mode=mode, storage_options=table.options)


def test_another_engines_rows_are_neither_lost_nor_claimed(epochs: TableEpochs) -> None:
    """Someone appends to the table (a snapshot sink's: its next commit would overwrite
    them). The sync refuses, saying so; the findings say it too; once their append is
    undone (a restore of the table to batchpoint's version), the sync goes on."""
    one = epochs.epoch({"a": 1})
    table = _table(epochs)
    _append_theirs(table, {"z": 99})
    (foreign,) = [str(f) for f in table_findings(epochs.coordinator, epochs.store)]
    said = (
        f"delta table pay.balances at {table.uri} has commits not made by "
        "batchpoint since batchpoint's version 1: version 2 (WRITE); batchpoint commits "
        "nothing over them (it would lose or claim their rows): undo them "
        "(DeltaTable.restore(1))"
    )
    assert foreign.startswith(f"sink {SINK}: {said}"), foreign

    two = epochs.epoch({"a": 2})  # its sync fails: TableEpochs swallows it, as a finalize
    with pytest.raises(TableError, match=r"has commits not made by batchpoint") as caught:
        _sync(epochs)
    assert str(caught.value).startswith(f"sink '{SINK}': {said}")
    assert [c.checkpoint_id for c in table.history()] == [one]  # nothing committed over them
    assert epochs.read() == {"a": 1, "z": 99}  # their row still there, ours at 1
    problems = [str(f) for f in table_findings(epochs.coordinator, epochs.store)]
    assert any("lags its manifest" in p for p in problems)
    assert f"sink {SINK}: {said}" in [p[: len(said) + len(SINK) + 7] for p in problems]

    table.require().restore(1)  # their append undone
    (synced,) = _sync(epochs)
    assert synced.committed == [two]
    assert epochs.read() == {"a": 2}
    assert table_findings(epochs.coordinator, epochs.store) == []


def test_another_engines_append_racing_a_commit_is_not_claimed(epochs: TableEpochs) -> None:
    """Interleaving: the sync checked the log (batchpoint's head) and copied its file;
    another engine appends before the log commit. The commit is a conditional put with
    no retry: it fails, and the sync's next round sees their commit and refuses, rather
    than rebasing its commit over their rows (which would claim them for checkpoint 2)."""
    one = epochs.epoch({"a": 1})
    real_add = DeltaSinkTable._add
    appended: list[bool] = []

    def add_then_theirs(self: DeltaSinkTable, staged: Any, wanted: Any, step: Any) -> Any:
        action = real_add(self, staged, wanted, step)
        if not appended:
            appended.append(True)
            _append_theirs(self, {"z": 99})
        return action

    epochs.monkeypatch.setattr(DeltaSinkTable, "_add", add_then_theirs)
    epochs.epoch({"a": 2})
    assert appended
    table = _table(epochs)
    assert [c.checkpoint_id for c in table.history()] == [one]
    assert epochs.read() == {"a": 1, "z": 99}
    with pytest.raises(BatchpointError, match="has commits not made by batchpoint"):
        _sync(epochs)


def test_the_undo_the_finding_says_reads_after_gc_dropped_its_checkpoint(
    table_store: StoreRef, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone overwrites the table with rows of their own; the sync refuses, the
    pipeline goes on and GC drops checkpoint 1 (one retained). Batchpoint's newest version
    (of 1) is what the finding says to restore: its copies must still be there, so that
    the table reads once restored, and the next sync rewinds it to the pipeline's."""
    epochs = TableEpochs(table_store, tmp_path, monkeypatch, table_format="delta")
    one = epochs.epoch({"a": 1})
    table = _table(epochs)
    _append_theirs(table, {"z": 99}, mode="overwrite")
    two = epochs.epoch({"a": 2})  # refused
    report = gc(epochs.coordinator, epochs.coordinator.store)
    assert f"{SINK}@{one}" in report.dropped_epochs
    assert any("DeltaTable.restore(1)" in str(f) for f in report.findings)
    assert epochs.read() == {"z": 99}

    table.require().restore(1)
    assert epochs.read() == {"a": 1}  # batchpoint's version of 1 reads
    (synced,) = _sync(epochs)
    assert synced.committed == [two] and epochs.read() == {"a": 2}
    assert table_findings(epochs.coordinator, epochs.store) == []
