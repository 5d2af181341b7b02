"""The Checkpoints pages in Airflow's UI say when a table sink's table lags its manifest
(its catalog was down while checkpoints published): in the pipelines' JSON, on the
index beside the status, and on the pipeline's page; and not once the table caught up.
The table sinks page lists each table's commits, Iceberg snapshots and Delta versions
each in their own words, newest first, linked to the checkpoint pages.
Real Airflow app and plugin, SeaweedFS, pyiceberg on a SQLite catalog, or delta-rs (a
Delta table named by its path)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sinks import SinkPublisher
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.delta_location import table_uri
from batchpoint.tables.service import sync_tables
from demo.payments import BALANCES_TABLE, build_pipeline, delta_table_pipeline, table_pipeline
from tables.sinkfiles import SINK, manifest, save, staged_file

pytestmark = [pytest.mark.airflow, pytest.mark.s3]

PIPELINE = "payments"
LAGS = (
    "lags its manifest: the table is at checkpoint 1 (generation 0), the manifest at "
    "checkpoint 3 (generation 0)"
)


@pytest.fixture
def api(bp, monkeypatch):
    """Airflow's own API app, as a logged-in viewer."""
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "tests-only-" * 8)
    with TestClient(create_app()) as client:
        user = SimpleAuthManagerUser(username="u", role="viewer")
        client.headers["Authorization"] = f"Bearer {get_auth_manager().generate_jwt(user)}"
        yield client


@pytest.mark.parametrize("table_format", ["iceberg", "delta"])
def test_a_lagging_table_is_a_finding_on_the_pipelines_pages(
    bp, api, tmp_path: Path, table_format: str
) -> None:
    store = bp.store
    pipeline = delta_table_pipeline if table_format == "delta" else table_pipeline
    CheckpointCoordinator(store, PIPELINE).register(pipeline.spec())
    bp.set(table_catalog=f"sqlite:///{tmp_path / 'catalog.db'}")
    files = [staged_file(store, c, {"a": c}, pipeline=PIPELINE) for c in (1, 2, 3)]
    epochs = [(1, None, [files[0]]), (2, 1, [files[1]]), (3, 2, [files[2]])]
    save(store, manifest(epochs[:1], 1), PIPELINE)
    table = TableBinding(BALANCES_TABLE, format=table_format)
    binding = {SINK: table}
    where = (
        f"{table} at {table_uri(store, table)}"
        if table.is_delta
        else f"iceberg table {BALANCES_TABLE} (catalog batchpoint)"
    )
    lag = f"sink {SINK}: {where} {LAGS}"
    sync_tables(bp.settings.store_ref, PIPELINE, binding)  # the table at checkpoint 1
    save(store, manifest(epochs, 3), PIPELINE)  # 2 and 3 published, the catalog down

    (listed,) = api.get("/batchpoint/api/pipelines").json()
    overview = listed["overview"]
    # It lags; it is not stopped. (Its checkpoints are made by hand, with no control
    # record: the CLI's NEEDS_REPAIR, said as a finding of its own beside the lag.)
    assert overview["status"] in ("running", "needs_repair")
    assert [f for f in overview["findings"] if f.startswith(lag)], overview
    assert "finding(s))" in api.get("/batchpoint/").text
    page = api.get(f"/batchpoint/{PIPELINE}").text
    assert f"<dt>finding</dt><dd>{lag}" in page

    sync_tables(bp.settings.store_ref, PIPELINE, binding)  # the catalog is back
    (listed,) = api.get("/batchpoint/api/pipelines").json()
    assert not [f for f in listed["overview"]["findings"] if LAGS in f], listed
    assert LAGS not in api.get(f"/batchpoint/{PIPELINE}").text


@pytest.mark.parametrize(("table_format", "noun"), [("iceberg", "snapshot"), ("delta", "version")])
def test_the_sinks_page_lists_each_tables_commits(
    bp, api, tmp_path: Path, table_format: str, noun: str
) -> None:
    store = bp.store
    pipeline = build_pipeline(balances_table=BALANCES_TABLE, table_format=table_format)
    CheckpointCoordinator(store, PIPELINE).register(pipeline.spec())
    bp.set(table_catalog=f"sqlite:///{tmp_path / 'catalog.db'}")
    files = [staged_file(store, c, {"a": c}, pipeline=PIPELINE) for c in (1, 2, 3)]
    save(
        store,
        manifest([(1, None, [files[0]]), (2, 1, [files[1]]), (3, 2, [files[2]])], 3),
        PIPELINE,
    )
    binding = {SINK: TableBinding(BALANCES_TABLE, format=table_format)}
    sync_tables(bp.settings.store_ref, PIPELINE, binding)
    SinkPublisher(store, PipelineLayout(PIPELINE)).rewind(SINK, 2, generation=1)  # a restore
    sync_tables(bp.settings.store_ref, PIPELINE, binding)

    response = api.get(f"/batchpoint/{PIPELINE}/sinks")
    assert response.status_code == 200, response.text
    page = response.text
    assert f"{SINK}: {table_format} table {BALANCES_TABLE}" in page
    assert f"<th>{noun}</th>" in page
    rows = re.findall(r"<a href='checkpoints/(\d+)'>\d+</a></td><td>(\d+)</td><td>(\w+)</td>", page)
    # newest first: the restore's rewind to 2 in generation 1, then 3, 2, 1 as published
    assert rows == [("2", "1", "rewind"), ("3", "0", "publish"), ("2", "0", "publish"),
                    ("1", "0", "publish")]  # fmt: skip
    assert "alerts" not in page  # not a table sink
    assert f"href='{PIPELINE}/sinks'" in api.get(f"/batchpoint/{PIPELINE}").text
