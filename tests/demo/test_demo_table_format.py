"""`./dev demo --table-format iceberg|delta`, without running the demo: the flag parses
(Iceberg by default), picks the versions of payments whose balances are a table of that
format, deploys them (BATCHPOINT_PIPELINE_REF, no Iceberg catalog for Delta), and the
demo's check reads a Delta table the way a user does, with deltalake: its rows now and
as of each checkpoint's version, batchpoint's commits from the Delta log."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sinks import SinkPublisher
from batchpoint.runtime.loader import load_pipeline
from batchpoint.settings import Settings
from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.service import sink_table
from batchpoint.tables.sync import TableSync
from demo import run
from demo.checks import DeltaBalances, PublishedChecks
from demo.deployment import FORMATS, VERSIONS, deployment_env
from demo.leftovers import MARKER
from demo.payments import BALANCES_TABLE
from tables.sinkfiles import PIPELINE, SINK, manifest, save, staged_file


def test_the_flag_parses_and_iceberg_stays_the_default() -> None:
    assert run.parse_args([]).table_format == "iceberg"
    assert run.parse_args(["--table-format", "delta"]).table_format == "delta"
    with pytest.raises(SystemExit):
        run.parse_args(["--table-format", "hudi"])


def test_main_runs_the_story_with_the_delta_versions(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    told: list[Any] = []
    monkeypatch.setenv(MARKER, "")  # mark_run's, put back after the test
    monkeypatch.setattr(run, "run_story", lambda *args: told.append(args) or 0)
    assert run.main(["--table-format", "delta", "--keep", str(tmp_path / "demo")]) == 0
    [(workdir, epochs, mode, versions)] = told
    assert (workdir, epochs, mode) == ((tmp_path / "demo").resolve(), 3, "connect")
    assert versions == VERSIONS["delta"]


@pytest.mark.parametrize("table_format", FORMATS)
def test_every_version_deployed_publishes_the_balances_in_the_format(table_format: str) -> None:
    versions = VERSIONS[table_format]
    refs = (versions.good, versions.buggy, versions.evolved)
    assert len(set(refs)) == 3
    for ref in refs:
        sink = load_pipeline(ref).sinks["balances_table"]
        assert sink.table == TableBinding(BALANCES_TABLE, format=table_format), ref


@pytest.mark.parametrize("table_format", FORMATS)
def test_the_deployment_names_the_formats_pipeline(table_format: str, tmp_path: Path) -> None:
    s3 = SimpleNamespace(bucket="b", storage_options=lambda: {"endpoint_url": "http://x:1"})
    env = deployment_env(s3, tmp_path, "sc://127.0.0.1:1", VERSIONS[table_format])  # type: ignore[arg-type]
    assert env["BATCHPOINT_PIPELINE_REF"] == f"{VERSIONS[table_format].good},demo.reports:pipeline"
    # A Delta table's log is in its folder: no Iceberg catalog in a Delta deployment.
    assert ("BATCHPOINT_TABLE_CATALOG" in env) == (table_format == "iceberg")


def test_the_check_reads_the_delta_table_with_deltalake(table_store: StoreRef) -> None:
    store = table_store.open()
    epochs = [(1, None, {"a": 1, "b": 2}), (2, 1, {"a": 5}), (3, 2, {"c": 7})]
    files = {cid: staged_file(store, cid, rows) for cid, _, rows in epochs}
    save(store, manifest([(cid, base, [files[cid]]) for cid, base, _ in epochs], 3))
    binding = TableBinding(BALANCES_TABLE, format="delta")
    publisher = SinkPublisher(store, PipelineLayout(PIPELINE))
    table = sink_table(table_store, PIPELINE, SINK, binding)
    assert TableSync(table, lambda: publisher.manifest(SINK)).run().committed == [1, 2, 3]

    settings = Settings(table_store.uri, dict(table_store.options))
    balances = PublishedChecks(settings, store, "delta").balances()
    assert isinstance(balances, DeltaBalances)
    assert balances.uri == f"{table_store.uri}/delta/payments/balances"
    commits = balances.commits()
    assert [(c.checkpoint_id, c.operation, c.generation) for c in commits] == [
        (1, "publish", 0),
        (2, "publish", 0),
        (3, "publish", 0),
    ]
    assert [c.id for c in commits] == [1, 2, 3]  # Delta versions: version 0 created it

    def rows(frame: Any) -> dict[str, int]:
        return dict(zip(frame["account_id"], frame["balance"], strict=True))

    assert rows(balances.read()) == {"c": 7}
    assert rows(balances.read(1)) == {"a": 1, "b": 2}
    assert rows(balances.read(2)) == {"a": 5}
