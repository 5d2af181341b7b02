"""What a table sink's table must refuse or leave alone, in each format on real storage
(Iceberg on a real SQLite catalog, Delta through delta-rs). Found by review and
reproduced first: a sync's plan made before a restore landing after the restore's own
sync (invariant 10), another engine's rows overwritten or claimed by an Iceberg sync,
read-only commands adopting an empty table by a commit, a dropped table said to have
had nothing published, and a table format given to a sink with no table."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from batchpoint.errors import CheckpointError, PipelineSpecError
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sinks import SinkPins, SinkPublisher
from batchpoint.runtime.api import Pipeline
from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.references import PipelineTables
from batchpoint.tables.sync import SinkTableAdapter, SyncReport, TableError, TableSync
from tables.sinkfiles import PIPELINE, SCHEMA, SINK, manifest, save, staged_file

Opener = Callable[..., SinkTableAdapter]
both_formats = pytest.mark.parametrize("table_format", ["iceberg", "delta"])


def _sync(table: SinkTableAdapter) -> SyncReport:
    publisher = SinkPublisher(table.store, PipelineLayout(PIPELINE))  # type: ignore[attr-defined]
    read = lambda: publisher.manifest(SINK)  # noqa: E731
    return TableSync(table, read, SinkPins(publisher, SINK)).run()


def _rows(table: SinkTableAdapter, checkpoint_id: int | None = None) -> dict[str, int]:
    data = table.read(checkpoint_id).to_pydict()
    return dict(zip(data["account_id"], data["balance"], strict=True))


def _tables(table_store: StoreRef, tmp_path: Path, table_format: str) -> PipelineTables:
    binding = TableBinding("pay.balances", format=table_format)
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    return PipelineTables(table_store.open(), PIPELINE, {SINK: binding}, catalog)


# -- invariant 10: the rest of a plan made before a restore never lands after it -------


@both_formats
@pytest.mark.parametrize("mode", ["snapshot", "append"])
def test_a_plan_made_before_a_restore_stops_at_the_restores_sync(
    table_store: StoreRef, open_table: Opener, mode: str
) -> None:
    """Interleaving: sync A read the manifest at 3 (generation 0) with the table at 1
    and plans 2 and 3; after its commit of 2, a restore to 2 (generation 1) and the
    restore's own sync rewind the table. A's commit of 3 landed on top (Iceberg), so the
    table read 3 after the restore to 2."""
    store = table_store.open()
    files = {i: staged_file(store, i, {k: i}) for i, k in ((1, "a"), (2, "b"), (3, "c"))}
    epochs = [(1, None, [files[1]]), (2, 1, [files[2]]), (3, 2, [files[3]])]
    save(store, manifest(epochs[:1], 1, mode=mode))
    _sync(open_table())
    save(store, manifest(epochs, 3, mode=mode))
    a = open_table()
    real_commit = a.commit
    restored: list[SyncReport] = []

    def restore_after_the_first(table: Any, step: Any, generation: int) -> None:
        real_commit(table, step, generation)
        if not restored:
            save(store, manifest(epochs, 2, mode=mode, generation=1))
            restored.append(_sync(open_table()))

    a.commit = restore_after_the_first  # type: ignore[method-assign]
    report = _sync(a)
    assert [r.committed for r in restored] == [[2]] and report.committed == [2]
    table = open_table()
    history = [(c.checkpoint_id, c.generation, c.operation) for c in table.history()]
    assert history == [(1, 0, "publish"), (2, 0, "publish"), (2, 1, "rewind")]
    assert _rows(table) == ({"b": 2} if mode == "snapshot" else {"a": 1, "b": 2})
    assert _sync(table).committed == []


# -- another engine's commits on an Iceberg table ------------------------------------


def _theirs(table: SinkTableAdapter, rows: dict[str, int]) -> None:
    data = pa.table({"account_id": list(rows), "balance": list(rows.values())}, schema=SCHEMA)
    table.require().append(data)


@pytest.mark.parametrize("mode", ["snapshot", "append"])
def test_another_engines_rows_in_an_iceberg_table_are_neither_lost_nor_claimed(
    table_store: StoreRef, open_table: Opener, tmp_path: Path, mode: str
) -> None:
    """Someone appends to the table: a snapshot sink's next commit overwrote their rows,
    an append sink's claimed them as its checkpoint's. The sync refuses, naming their
    snapshot; the findings say it too; rolled back to batchpoint's snapshot, it goes on."""
    store = table_store.open()
    one, two = staged_file(store, 1, {"a": 1}), staged_file(store, 2, {"b": 2})
    save(store, manifest([(1, None, [one])], 1, mode=mode))
    _sync(open_table())
    table = open_table()
    ours = table.require().current_snapshot().snapshot_id  # type: ignore[attr-defined]
    _theirs(table, {"z": 99})
    theirs = table.require().current_snapshot().snapshot_id  # type: ignore[attr-defined]
    said = (
        f"iceberg table pay.balances (catalog batchpoint) has commits not made by batchpoint "
        f"since batchpoint's snapshot {ours}: snapshot {theirs} (append); batchpoint commits "
        "nothing over them (it would lose or claim their rows): undo them "
        f"(manage_snapshots().rollback_to_snapshot({ours}))"
    )
    save(store, manifest([(1, None, [one]), (2, 1, [two])], 2, mode=mode))
    with pytest.raises(TableError) as caught:
        _sync(open_table())
    assert str(caught.value).startswith(f"sink '{SINK}': {said}"), str(caught.value)
    assert [c.checkpoint_id for c in table.history()] == [1]
    assert _rows(table) == {"a": 1, "z": 99}
    problems = [f.problem for f in _tables(table_store, tmp_path, "iceberg").findings()]
    assert any(p.startswith(said) for p in problems), problems

    table.require().manage_snapshots().rollback_to_snapshot(ours).commit()  # type: ignore[attr-defined]
    assert _sync(open_table()).committed == [2]
    assert _rows(open_table()) == ({"b": 2} if mode == "snapshot" else {"a": 1, "b": 2})
    assert _tables(table_store, tmp_path, "iceberg").findings() == []


def test_rows_another_engine_wrote_into_an_adopted_iceberg_table_are_not_overwritten(
    table_store: StoreRef, open_table: Opener
) -> None:
    """An empty table made for the sink is adopted (as the sync's load does); another
    engine appends before batchpoint's first commit. The table read as one whose history
    was expired, and the sync's rewind replaced their rows. Expired history is told from
    this by the oldest snapshot left: the table's first (sequence number 1) here."""
    table = open_table()
    _empty_table(table, "iceberg")
    table.load(claim=True)  # type: ignore[call-arg]
    _theirs(table, {"z": 99})
    store = table_store.open()
    save(store, manifest([(1, None, [staged_file(store, 1, {"a": 1})])], 1))
    with pytest.raises(TableError, match=r"not made by batchpoint since its creation: snapshot"):
        _sync(open_table())
    assert _rows(open_table()) == {"z": 99} and open_table().history() == []


def test_another_engines_append_racing_an_iceberg_commit_is_not_claimed(
    table_store: StoreRef, open_table: Opener
) -> None:
    """Interleaving: the sync planned on batchpoint's head; another engine appends before
    its commit. The commit's compare-and-set fails, and the next round refuses."""
    store = table_store.open()
    one, two = staged_file(store, 1, {"a": 1}), staged_file(store, 2, {"b": 2})
    save(store, manifest([(1, None, [one])], 1, mode="append"))
    _sync(open_table())
    save(store, manifest([(1, None, [one]), (2, 1, [two])], 2, mode="append"))
    racer = open_table()
    real_commit = racer.commit

    def theirs_first(table: Any, step: Any, generation: int) -> None:
        if len(table.snapshots()) == 1:  # only batchpoint's commit of 1 so far
            _theirs(open_table(), {"z": 99})
        real_commit(table, step, generation)

    racer.commit = theirs_first  # type: ignore[method-assign]
    with pytest.raises(TableError, match="has commits not made by batchpoint"):
        _sync(racer)
    assert [c.checkpoint_id for c in open_table().history()] == [1]
    assert _rows(open_table()) == {"a": 1, "z": 99}


# -- read-only paths write nothing ---------------------------------------------------


def _empty_table(table: SinkTableAdapter, table_format: str) -> Callable[[], Any]:
    """An empty table made for the sink by hand, with none of batchpoint's properties;
    returns what says whether it was written to since (its metadata's versions)."""
    if table_format == "delta":
        from deltalake import DeltaTable

        uri, options = table.uri, table.options  # type: ignore[attr-defined]
        DeltaTable.create(uri, schema=SCHEMA, storage_options=options)
        return lambda: DeltaTable(uri, storage_options=options).version()
    catalog = table.catalog  # type: ignore[attr-defined]
    catalog.create_namespace("pay")
    catalog.create_table("pay.balances", schema=SCHEMA)
    return lambda: len(catalog.load_table("pay.balances").metadata.metadata_log)


@both_formats
def test_reading_an_empty_table_made_for_the_sink_writes_nothing(
    table_store: StoreRef, open_table: Opener, tmp_path: Path, table_format: str
) -> None:
    """verify's and the UI's findings, GC's head and `sink show` read the table: they
    adopted an empty table by a commit of its properties. Only the sync adopts it."""
    table = open_table()
    version = _empty_table(table, table_format)
    before = version()
    store = table_store.open()
    save(store, manifest([(1, None, [staged_file(store, 1, {"a": 1})])], 1))
    tables = _tables(table_store, tmp_path, table_format)
    (lags,) = tables.findings()
    assert "lags its manifest: the table has no batchpoint commit" in lags.problem
    tables.head(SINK)
    assert _rows(open_table()) == {}
    assert version() == before  # nothing written

    assert _sync(open_table()).committed == [1]  # the sync adopts it
    assert version() > before and _rows(open_table()) == {"a": 1}
    assert _tables(table_store, tmp_path, table_format).findings() == []


# -- a table that is gone --------------------------------------------------------------


@both_formats
def test_a_table_dropped_after_publishes_is_said_gone_and_the_sync_makes_it_again(
    table_store: StoreRef, open_table: Opener, table_format: str
) -> None:
    table = open_table()
    with pytest.raises(CheckpointError, match=r"does not exist yet.*nothing was published"):
        table.read()
    store = table_store.open()
    save(store, manifest([(1, None, [staged_file(store, 1, {"a": 1})])], 1))
    _sync(table)
    if table_format == "delta":
        if not table.uri.startswith("file://"):  # type: ignore[attr-defined]
            pytest.skip("a Delta table is deleted here by removing its folder")
        shutil.rmtree(table.uri.removeprefix("file://"))  # type: ignore[attr-defined]
    else:
        table.catalog.drop_table("pay.balances")  # type: ignore[attr-defined]
    with pytest.raises(CheckpointError) as caught:
        open_table().read(1)
    said = str(caught.value)
    assert "does not exist" in said and "nothing was published" not in said
    assert "though the sink published up to checkpoint 1: it was dropped or deleted" in said
    assert "next publish or restore creates it again" in said
    assert _sync(open_table()).committed == [1]
    assert _rows(open_table(), 1) == {"a": 1}


# -- a table format with no table ----------------------------------------------------


def _pipeline() -> Pipeline:
    pipeline = Pipeline(PIPELINE)
    pipeline.source("events", root="src", schema=pa.schema([("account_id", pa.string())]))
    return pipeline


@pytest.mark.parametrize(
    "given", [{"table_format": "delta"}, {"catalog": "lake"}], ids=["format", "catalog"]
)
def test_a_sink_given_a_table_format_or_catalog_but_no_table_is_refused(
    given: dict[str, str],
) -> None:
    """It was a plain sink, silently: no table was ever written."""
    with pytest.raises(PipelineSpecError, match=rf"sink '{SINK}': .* given without table="):
        _pipeline().sink(SINK, inputs=["events"], key=["account_id"], **given)  # type: ignore[arg-type]
    binding = TableBinding("pay.balances")
    with pytest.raises(PipelineSpecError, match="beside a TableBinding"):
        _pipeline().sink(SINK, inputs=["events"], key=["account_id"], table=binding, **given)  # type: ignore[arg-type]
    plain = _pipeline().sink(SINK, inputs=["events"], key=["account_id"], table_format="iceberg")
    assert plain.table is None  # the defaults, passed through, change nothing
    delta = _pipeline().sink(
        SINK, inputs=["events"], key=["account_id"], table="pay.balances", **given
    )
    assert delta.table is not None and delta.table.identifier == "pay.balances"


@pytest.mark.parametrize(
    "given", [{"table_format": "delta"}, {"catalog": "lake"}], ids=["format", "catalog"]
)
def test_a_source_given_a_table_format_or_catalog_but_no_table_is_refused(
    given: dict[str, str],
) -> None:
    """A files source read its files, the table named nowhere, silently."""
    schema = pa.schema([("id", pa.string())])
    with pytest.raises(PipelineSpecError, match=r"source 'orders': .* given without table="):
        _pipeline().source("orders", root="orders", schema=schema, **given)  # type: ignore[arg-type]
    read = _pipeline().source("orders", table="shop.orders", schema=schema, **given)  # type: ignore[arg-type]
    assert read.table is not None and read.table.identifier == "shop.orders"
