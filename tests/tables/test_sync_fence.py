"""A table sync racing GC, fenced by table pins (invariant 14): a sync that planned on a
manifest read before a GC pass never commits an epoch whose files that pass deleted.

Found by the concurrency model (issue 24): the catalog down through the finalizes of 2
and 3 (the table at 1), a sync reads the manifest and plans 2 then 3, and a GC pass
runs before its commit of 2: checkpoint 2 is subsumed, so GC drops its epoch and, with
no pin, deletes its files; the sync then commits a snapshot of 2 that cannot be read.
Forced interleavings on the real SQLite catalog (a hook at a catalog call, no sleep),
and on a Delta table through delta-rs (the hook at the adapter's load and commit), on a
folder and on SeaweedFS."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from batchpoint.ops.maintenance import _TablesOfThePass, gc
from batchpoint.protocol.sinks import SinkPins, SinkPublisher
from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.catalog import file_io_properties, warehouse
from batchpoint.tables.delta import DeltaSinkTable
from batchpoint.tables.iceberg import IcebergSinkTable, TableSync
from batchpoint.tables.service import sync_tables
from batchpoint.tables.sync import SinkTableAdapter
from support.faulty_catalog import CallHooks, SteppedCatalog
from support.hooks import once
from tables.table_epochs import PIPELINE, SINK, TABLE, TableEpochs

pytestmark = pytest.mark.parametrize("table_format", ["iceberg", "delta"])


@pytest.fixture
def epochs(
    table_store: StoreRef, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table_format: str
) -> TableEpochs:
    return TableEpochs(table_store, tmp_path, monkeypatch, table_format=table_format)  # 1 kept


def _lagging(epochs: TableEpochs) -> list[int]:
    """Checkpoints 1-3 published, the table synced to 1 only: the catalog was down
    through the finalizes of 2 and 3. Checkpoint 3 subsumed 2 (one retained)."""
    first = epochs.epoch({"a": 1})
    with epochs.outage():
        later = [epochs.epoch({"a": n}) for n in (2, 3)]
    assert [c.checkpoint_id for c in epochs.table().history()] == [first]
    return [first, *later]


def _hooked_delta(epochs: TableEpochs, hooks: CallHooks) -> DeltaSinkTable:
    """The Delta adapter with the catalog's hook names around its load and commit (the
    calls where Iceberg's meet the catalog)."""
    table = DeltaSinkTable(epochs.binding, PIPELINE, SINK, epochs.store)
    for op, method in (("load_table", "load"), ("commit_table", "commit")):
        real = getattr(table, method)

        def hooked(*args: Any, _op: str = op, _real: Any = real, **kw: Any) -> Any:
            hooks.before(_op, TABLE)
            result = _real(*args, **kw)
            hooks.after(_op, TABLE)
            return result

        setattr(table, method, hooked)
    return table


def _sync(epochs: TableEpochs, hooks: CallHooks) -> TableSync:
    """A sync as `tables.service.sync_tables` builds it, its catalog calls hooked."""
    store = epochs.store
    table: SinkTableAdapter
    if epochs.delta:
        table = _hooked_delta(epochs, hooks)
    else:
        catalog = SteppedCatalog(
            "batchpoint",
            hooks=hooks,
            uri=epochs.catalog,
            warehouse=warehouse(store),
            **file_io_properties(store),
        )
        table = IcebergSinkTable(catalog, TableBinding(TABLE), PIPELINE, SINK, store)
    publisher = SinkPublisher(store, epochs.coordinator.layout)
    return TableSync(table, lambda: publisher.manifest(SINK), SinkPins(publisher, SINK))


def _sink_files(epochs: TableEpochs, checkpoint_id: int) -> list[str]:
    prefix = epochs.coordinator.layout.operator_data_prefix(checkpoint_id, SINK)
    return [i.key for i in epochs.store.list(prefix)]


def _pins(epochs: TableEpochs) -> tuple:
    manifest = SinkPublisher(epochs.store, epochs.coordinator.layout).manifest(SINK)
    assert manifest is not None
    return manifest.pins


def test_gc_between_a_syncs_plan_and_its_commit_keeps_the_pinned_epoch(
    epochs: TableEpochs,
) -> None:
    _one, two, three = _lagging(epochs)
    passes: list = []
    hook = once(
        lambda: passes.append(gc(epochs.coordinator, epochs.coordinator.store)),
        lambda op, _: op == "commit_table",
    )

    report = _sync(epochs, CallHooks(hook)).run()

    assert hook.fired, "GC did not run inside the sync"
    assert report.committed == [two, three]
    # The pass dropped 1. The sync's expiry then let go of it: each format's expiry
    # reads the manifest afresh, after the table (tables/delta.py, tables/iceberg.py).
    assert epochs.assert_every_snapshot_reads() == [two, three]
    # The pass ran between the plan (2, then 3) and the commit of 2: 2 was pinned.
    assert f"{SINK}@{two}" not in passes[0].dropped_epochs
    assert _pins(epochs) == ()  # released after the last commit

    # The next pass lets go of 2: its snapshot expires, then its files go.
    report = gc(epochs.coordinator, epochs.coordinator.store)
    assert f"{SINK}@{two}" in report.dropped_epochs
    assert epochs.assert_every_snapshot_reads() == [three]
    assert not _sink_files(epochs, two) and not epochs.read_files(two)


def test_gc_between_a_syncs_manifest_read_and_its_pin_makes_it_plan_again(
    epochs: TableEpochs,
) -> None:
    """GC dropped 2 after the sync read the manifest: the pin is refused, the sync plans
    again on what is left and rewinds the table to 3, reading nothing GC deleted."""
    _one, two, three = _lagging(epochs)
    hook = once(
        lambda: gc(epochs.coordinator, epochs.coordinator.store), lambda op, _: op == "load_table"
    )

    report = _sync(epochs, CallHooks(hook)).run()

    assert hook.fired
    assert not _sink_files(epochs, two)  # GC deleted them before the sync pinned 2
    assert not epochs.read_files(two)  # Delta: and the copies its failed commits made
    assert report.rounds == 2 and report.committed == [three]
    assert epochs.read() == {"a": 3}
    assert epochs.assert_every_snapshot_reads() == [three]
    assert _pins(epochs) == ()


def test_a_pin_left_by_a_sync_killed_after_its_commit_is_dropped_by_gc(
    epochs: TableEpochs,
) -> None:
    """No clock: the killed sync's pin goes stale because the table moved past the
    snapshot it planned on, and GC drops it; the table's own snapshot keeps the files
    (Delta: its version's copies)."""
    _one, two, _three = _lagging(epochs)

    def killed_after_the_commit_of_two(op: str, _name: str) -> None:
        if op == "commit_table" and epochs.table().history()[-1].checkpoint_id == two:
            raise KeyboardInterrupt("the sync's process is killed")

    sync = _sync(epochs, CallHooks(on_after=killed_after_the_commit_of_two))
    with pytest.raises(KeyboardInterrupt):
        sync.run()
    assert [p.checkpoint_id for p in _pins(epochs)] == [two]  # no process to unpin

    report = gc(epochs.coordinator, epochs.coordinator.store)
    assert _pins(epochs) == ()
    assert f"{SINK}@{two}" in report.dropped_epochs
    assert epochs.read() == {"a": 2}  # the current snapshot, read through the table
    assert epochs.assert_every_snapshot_reads() == [two]

    four = epochs.epoch({"a": 4})  # the next publish's sync catches up
    assert epochs.read() == {"a": 4}
    assert epochs.assert_every_snapshot_reads() == [four]


def test_a_retried_publish_never_brings_back_an_epoch_gc_dropped(epochs: TableEpochs) -> None:
    """Also found by the model: the catalog down from the start (no table yet), GC
    dropped epoch 1 and deleted its files, then a retried finalize of 2 published its
    chain again, 1 included; every sync of the new table then began with 1 and failed
    on its missing file, so the table never caught up."""
    with epochs.outage():
        one, two = (epochs.epoch({"a": n}) for n in (1, 2))
    gc(epochs.coordinator, epochs.coordinator.store)
    assert not _sink_files(epochs, one)

    retried = epochs.coordinator.notify_checkpoint_complete(two, [(SINK, "snapshot", ["k"])])
    sync_tables(epochs.store_ref, PIPELINE, {SINK: epochs.binding})

    assert epochs.assert_every_snapshot_reads() == [two]
    assert retried.published == []


def test_a_retried_publish_never_brings_back_an_ancestor_gc_dropped_with_its_child(
    epochs: TableEpochs,
) -> None:
    """Found by the 1,000-schedule run (seed 88): GC dropped epochs 1 and 2 (3 retained)
    and deleted their files; a retried finalize of 2 walks its chain back to 1. Nothing
    left in the manifest is built on 1 itself (2, its child, is gone too), yet 3 descends
    from it, so 1 was there before and must not come back: a new table's sync would
    take its schema from 1's missing file and never catch up."""
    with epochs.outage():
        one, two, three = (epochs.epoch({"a": n}) for n in (1, 2, 3))
    gc(epochs.coordinator, epochs.coordinator.store)
    assert not _sink_files(epochs, one) and not _sink_files(epochs, two)

    retried = epochs.coordinator.notify_checkpoint_complete(two, [(SINK, "snapshot", ["k"])])
    sync_tables(epochs.store_ref, PIPELINE, {SINK: epochs.binding})

    assert retried.published == []
    assert epochs.assert_every_snapshot_reads() == [three]


def test_a_sync_that_gives_up_leaves_another_syncs_pin_on_the_same_epoch(
    epochs: TableEpochs,
) -> None:
    """Found by the Delta schedules of the concurrency model (seed 72 of the table stress
    schedules with GC and late syncs, while the model was built): sync A pins epoch 2 on
    the table's snapshot and stalls before its commit; sync B planned on the same
    snapshot pins the same epoch, fails before its commit and unpins; a GC pass then
    finds no pin, drops 2 (subsumed by 3) and deletes its files; A's commit lands a
    snapshot that reads a missing file. The same on Iceberg, forced here."""
    _one, two, three = _lagging(epochs)

    def down(op: str, _name: str) -> None:
        if op == "commit_table":
            raise OSError("the catalog is down")

    def b_gives_up_then_gc() -> None:
        with pytest.raises(OSError):
            _sync(epochs, CallHooks(down)).run()
        gc(epochs.coordinator, epochs.coordinator.store)

    hook = once(b_gives_up_then_gc, lambda op, _: op == "commit_table")
    report = _sync(epochs, CallHooks(hook)).run()

    assert hook.fired
    assert report.committed == [two, three]
    # as in the test above: the sync's expiry lets go of 1 a pass earlier
    assert epochs.assert_every_snapshot_reads() == [two, three]


class _Paused:
    """A GC pass's reads of its table sinks (or of its sink manifests) that run `race`
    once they are done, as if the pass were slow right there."""

    def __init__(self, inner: Any, method: str, race: Any) -> None:
        self._inner, self._method, self._race = inner, method, race

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._inner, name)
        if name != self._method:
            return real

        def paused(*args: Any, **kw: Any) -> Any:
            found = real(*args, **kw)
            found = list(found) if name == "stored" else found
            self._race()
            return found

        return paused


@pytest.mark.parametrize("pause", ["after reading the tables", "after reading the manifests"])
def test_two_gc_passes_and_a_killed_sync_never_delete_what_the_table_reads(
    epochs: TableEpochs, pause: str
) -> None:
    """A reviewer's interleaving: pass P1 stalls after one of its reads, a sync that
    pinned 2 commits it and is killed, and pass P2 finds the pin stale and drops 2 (the
    table's own snapshot keeps its files in P2). P1 then deletes 2's files unless
    whichever it reads second still covers them: the tables are read after the
    manifests, and a commit landing after the manifest read was pinned in it."""
    _one, two, _three = _lagging(epochs)
    coordinator = epochs.coordinator
    pinned, go = threading.Event(), threading.Event()

    def held_at_its_commit(op: str, _name: str) -> None:
        if op == "commit_table" and not pinned.is_set():
            pinned.set()  # 2 is pinned: P1 starts now and prunes around it
            go.wait(60)

    def killed_after_the_commit_of_two(op: str, _name: str) -> None:
        if op == "commit_table" and epochs.table().history()[-1].checkpoint_id == two:
            raise KeyboardInterrupt("the sync's process is killed")

    killed: list[BaseException] = []

    def sync() -> None:
        try:
            _sync(epochs, CallHooks(held_at_its_commit, killed_after_the_commit_of_two)).run()
        except KeyboardInterrupt as exc:
            killed.append(exc)

    syncing = threading.Thread(target=sync)
    syncing.start()
    assert pinned.wait(60)
    fired: list[bool] = []

    def race() -> None:  # the sync commits 2 and dies, then P2 drops 2 (its pin stale)
        if not fired:
            fired.append(True)
            go.set()
            syncing.join(60)
            assert killed, "the sync was not killed after its commit of 2"
            assert f"{SINK}@{two}" in gc(coordinator, coordinator.store).dropped_epochs

    tables: Any = _TablesOfThePass(coordinator, coordinator.store)
    if pause == "after reading the tables":
        tables = _Paused(tables, "references", race)
    p1 = coordinator.garbage_collector(tables=tables)
    if pause == "after reading the manifests":
        p1._sinks = _Paused(p1._sinks, "stored", race)  # type: ignore[assignment]
    p1.collect(history_limit=None)

    assert fired
    assert epochs.table().history()[-1].checkpoint_id == two
    assert epochs.read() == {"a": 2}  # not a missing file
    assert epochs.assert_every_snapshot_reads() == [two]
