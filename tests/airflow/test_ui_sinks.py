"""The Checkpoints UI's table sinks page: each table sink's commits, Iceberg snapshots
and Delta versions each in their own words, newest first, linked to the checkpoint
pages; a restore's rewind among them. Real Airflow app and plugin, SeaweedFS, pyiceberg
on a SQLite catalog and delta-rs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sinks import SinkPublisher
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.service import sync_tables
from demo.payments import BALANCES_TABLE, build_pipeline
from tables.sinkfiles import SINK, manifest, save, staged_file

pytestmark = [pytest.mark.airflow, pytest.mark.s3]

PIPELINE = "payments"


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
