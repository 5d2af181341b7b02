"""The plugin in plugins/ puts the checkpoint history into the Airflow UI: Airflow's own
plugin manager loads it from the project's plugins folder, and Airflow's own API app
serves it under /batchpoint, reading the records a real checkpoint run wrote."""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.s3]


@pytest.fixture
def api(bp, monkeypatch):
    from airflow.api_fastapi.app import create_app

    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "tests-only")
    from fastapi.testclient import TestClient

    with TestClient(create_app()) as client:
        yield client


def test_airflow_loads_the_plugin_from_the_plugins_folder(airflow_home):
    from airflow import plugins_manager

    assert plugins_manager.get_import_errors() == {}
    apps, _ = plugins_manager.get_fastapi_plugins()
    assert [a["url_prefix"] for a in apps if a["name"] == "batchpoint"] == ["/batchpoint"]
    views = [v for p in plugins_manager.get_plugin_info() for v in p.get("external_views", [])]
    assert any(v["name"] == "Checkpoints" and v["href"] == "batchpoint/" for v in views), views


def test_the_history_page_shows_completed_and_aborted_checkpoints(
    bp, write_epoch, monkeypatch, api
):
    write_epoch(0)
    assert bp.run("payments_checkpoint")[0].state == "success"
    write_epoch(1)
    monkeypatch.setenv("FAKE_JOB_FAIL", "balances")
    assert bp.run("payments_checkpoint")[0].state == "failed"

    assert api.get("/batchpoint/api/pipelines").json() == [
        {"pipeline": "payments", "root": bp.root, "head": 1}
    ]
    rows = api.get("/batchpoint/api/payments/checkpoints").json()
    assert [(r["checkpoint_id"], r["status"]) for r in rows] == [(2, "ABORTED"), (1, "COMPLETED")]
    assert rows[0]["failure_reason"] and "injected failure" in rows[0]["failure_message"]
    assert rows[1]["acknowledged"] == rows[1]["expected"] > 0
    assert [r["quarantined"] for r in rows] == [False, False]

    page = api.get("/batchpoint/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "head: checkpoint 1" in page.text
    assert "<tr class='aborted'>" in page.text and "injected failure" in page.text

    # the quality gate quarantines checkpoint 1: the history says so
    from batchpoint.protocol.layout import PipelineLayout
    from batchpoint.quality.quarantine import QuarantineStore
    from batchpoint.quality.report import CandidateReport, GateMode

    report = CandidateReport("payments", 1, "checkpoint", GateMode.RESTORE, time.time())
    QuarantineStore(bp.store, PipelineLayout("payments")).add(report, time.time())
    rows = api.get("/batchpoint/api/payments/checkpoints").json()
    assert [r["quarantined"] for r in rows] == [False, True]
    assert "<td>quarantined</td>" in api.get("/batchpoint/").text


def test_unknown_pipeline_and_unreachable_storage_are_clear_errors(bp, api, monkeypatch):
    missing = api.get("/batchpoint/api/nope/checkpoints")
    assert missing.status_code == 404 and "nope" in missing.json()["detail"]

    monkeypatch.setenv("BATCHPOINT_ROOT", "ftp://nowhere")
    broken = api.get("/batchpoint/api/pipelines")
    assert broken.status_code == 503 and "BATCHPOINT_ROOT" in broken.json()["detail"]
    assert "BATCHPOINT_ROOT" in api.get("/batchpoint/").text
