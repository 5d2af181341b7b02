"""A sink is its uid (issue 36, invariant 17), through the real runtime on the local
store and SeaweedFS: an append and a snapshot sink, each into a folder and into an
Iceberg table, renamed with their uid kept, keep their whole history. Every reader a
user has sees it equal to the pandas reference: `sink show` (by the new name, the uid,
or the name before the rename), `read_sink` (Spark), and the table read by pyiceberg.

Sinks declared with a uid other than their name by a release that kept manifests under
the name (tests/data/sinks-by-name.tar.gz) are adopted at the uid's key on the first
publish, their history whole, then renamed like any other."""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from batchpoint.ops.dataframes import read_sink
from batchpoint.ops.sinks import show_sink, sink_history
from batchpoint.protocol.deploy_plan import Verdict
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.settings import Settings
from batchpoint.storage import StoreRef
from batchpoint.tables.catalog import open_catalog
from support.cli import Cli
from support.sink_pipelines import (
    FOLDER_SINKS,
    NAMED_SINKS,
    PIPELINE,
    TABLE_SINKS,
    SinkDecl,
    SinkEpochs,
    build,
    copy_tree,
    same,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

FIXTURE = Path(__file__).parent.parent / "data" / "sinks-by-name.tar.gz"
LAYOUT = PipelineLayout(PIPELINE)


@pytest.fixture
def epochs(
    spark: Any, table_store: StoreRef, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., SinkEpochs]:
    """``epochs(copy_from=None)``: on the local store and on SeaweedFS, empty or with a
    copy of a folder's files; the tables' catalog a SQLite file of the test's, as a
    deployment names one (BATCHPOINT_TABLE_CATALOG)."""
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    monkeypatch.setenv("BATCHPOINT_TABLE_CATALOG", catalog)

    def make(copy_from: Path | None = None) -> SinkEpochs:
        if copy_from is not None:
            copy_tree(copy_from, table_store)
        return SinkEpochs(spark, table_store, catalog=catalog)

    return make


def _readers_see_everything(
    run: SinkEpochs, sinks: tuple[SinkDecl, ...], names: dict[str, list[str]]
) -> None:
    """Each sink, by each of `names[uid]`, as every reader reads it: all the events (an
    append sink), the totals over all of them (a snapshot sink)."""
    assert run.runner is not None
    coordinator = run.runner.driver.coordinator
    settings = Settings(root=run.ref.uri, store_options=dict(run.ref.options))
    for sink in sinks:
        expected = run.expected(sink.mode)
        for name in names[sink.uid]:
            view = show_sink(coordinator, run.ref, name)
            same(view.rows, expected, f"sink show {name}")
        current = names[sink.uid][0]
        if sink.table is None:
            rows = read_sink(run.spark, PIPELINE, current, settings=settings).toPandas()
            same(rows, expected, f"read_sink {current}")
            continue
        table = open_catalog("batchpoint", run.store, run.catalog).load_table(sink.table)
        same(table.scan().to_arrow(), expected, f"pyiceberg {sink.table}")
        history = sink_history(coordinator, run.ref, sink.uid)
        assert (history.sink, history.uid) == (current, sink.uid)
        assert [c.operation for c in history.commits] == ["publish"] * run.epochs, history


def test_sinks_renamed_with_their_uid_keep_their_history(
    epochs: Callable[..., SinkEpochs],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = epochs()
    sinks = FOLDER_SINKS + TABLE_SINKS
    run.deploy(build(sinks))
    run.epoch()
    run.epoch()
    renamed = {s.uid: f"{s.uid}_v2" for s in sinks}
    run.deploy(build(sinks, renamed))
    assert run.runner is not None
    plan = run.runner.driver.plan()
    verdicts = {e.uid: e.verdict for e in plan.entries if e.kind == "sink"}
    assert verdicts == dict.fromkeys(renamed, Verdict.RENAMED), plan.render()
    run.epoch()
    run.epoch()
    # by the new name, the uid, the name before the rename: 40 events, not 20
    names = {uid: [name, uid] for uid, name in renamed.items()}
    _readers_see_everything(run, sinks, names)
    stored = {p.rstrip("/").rsplit("/", 1)[-1] for p in run.store.list_dirs(LAYOUT.root + "sinks/")}
    assert stored == set(renamed), "one manifest per sink, at its uid"
    if run.ref.uri.startswith("file://"):  # the command itself, on the local root
        monkeypatch.setenv("BATCHPOINT_ROOT", run.ref.uri)
        shown = Cli(capsys)("sink", "show", PIPELINE, renamed["events_out"], "--json")
        assert shown.code == 0, shown.err
        assert shown.json["total_rows"] == len(run.events()), shown.json


@pytest.fixture
def by_name(epochs: Callable[..., SinkEpochs], tmp_path: Path) -> SinkEpochs:
    """The fixture's store (two epochs, manifests under the sinks' names) on the backend."""
    folder = tmp_path / "sinks-by-name"
    with tarfile.open(FIXTURE) as archive:
        archive.extractall(folder, filter="data")
    run = epochs(copy_from=folder)
    for s in NAMED_SINKS:  # what the fixture is for
        assert run.store.exists(LAYOUT.sink_manifest(s.name))
        assert not run.store.exists(LAYOUT.sink_manifest(s.uid))
    return run


def test_manifests_kept_under_the_name_by_an_older_release_are_adopted(
    by_name: SinkEpochs,
) -> None:
    run = by_name
    assert run.epochs == 2
    run.deploy(build(NAMED_SINKS))
    run.epoch()
    names = {s.uid: [s.name, s.uid] for s in NAMED_SINKS}
    _readers_see_everything(run, NAMED_SINKS, names)  # 30 events, not 10
    for s in NAMED_SINKS:  # adopted at the uid; the name's manifest removed after
        assert run.store.exists(LAYOUT.sink_manifest(s.uid))
        assert not run.store.exists(LAYOUT.sink_manifest(s.name))
    # then renamed like any sink: still the same history
    renamed = {s.uid: f"{s.uid}_v3" for s in NAMED_SINKS}
    run.deploy(build(NAMED_SINKS, renamed))
    run.epoch()
    names = {s.uid: [renamed[s.uid], s.uid, s.name] for s in NAMED_SINKS}
    _readers_see_everything(run, NAMED_SINKS, names)


def test_the_ui_shows_each_retained_table_sink_with_its_own_table(
    epochs: Callable[..., SinkEpochs],
) -> None:
    """A sink given a new uid under its old name (the plan's advice for another mode or
    table): the Checkpoints UI's sinks page found the retained old uid, then looked its
    history up again by that uid, which the declared sink's name matched first, and
    showed the new table's commits under the old one (a reviewer's finding)."""
    from batchpoint.airflow.ui_sinks import table_sinks

    run = epochs()
    run.deploy(build((SinkDecl("events_table", "append", "sinks.events"),)))
    run.epoch()
    run.epoch()
    successor = SinkDecl("events_table_v2", "append", "sinks.events_v2", name="events_table")
    code = build((successor,))
    code.drop_sink("events_table")
    run.deploy(code)
    run.epoch()
    assert run.runner is not None
    settings = Settings(root=run.ref.uri, store_options=dict(run.ref.options))
    shown = {
        e["table"].split()[2]: len(e["commits"])
        for e in table_sinks(settings, run.runner.driver.coordinator)
    }
    assert shown == {"sinks.events": 2, "sinks.events_v2": 1}, shown
