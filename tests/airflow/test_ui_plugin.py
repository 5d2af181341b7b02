"""The plugin in plugins/ puts the checkpoint history into the Airflow UI: Airflow's own
plugin manager loads it from the project's plugins folder, and Airflow's own API app
serves it under /batchpoint, reading the records a real checkpoint run wrote."""

from __future__ import annotations

import re
import time

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.s3]


@pytest.fixture
def anonymous(bp, monkeypatch):
    """Airflow's own API app, with no credentials."""
    from airflow.api_fastapi.app import create_app

    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "tests-only-" * 8)
    from fastapi.testclient import TestClient

    with TestClient(create_app()) as client:
        yield client


def token(role: str | None) -> str:
    """A JWT from Airflow's auth manager (the simple one) for a user with `role`."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="u", role=role))


@pytest.fixture
def api(anonymous):
    """The same app as a logged-in viewer: the Bearer token an API client sends."""
    anonymous.headers["Authorization"] = f"Bearer {token('viewer')}"
    return anonymous


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
    page = api.get("/batchpoint/api/payments/checkpoints").json()
    assert page["older"] is None
    rows = page["checkpoints"]
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
    rows = api.get("/batchpoint/api/payments/checkpoints").json()["checkpoints"]
    assert [r["quarantined"] for r in rows] == [False, True]
    assert "<td>quarantined</td>" in api.get("/batchpoint/").text


def test_unknown_pipeline_and_unreachable_storage_are_clear_errors(bp, api, monkeypatch):
    missing = api.get("/batchpoint/api/nope/checkpoints")
    assert missing.status_code == 404 and "nope" in missing.json()["detail"]

    monkeypatch.setenv("BATCHPOINT_ROOT", "ftp://nowhere")
    broken = api.get("/batchpoint/api/pipelines")
    assert broken.status_code == 503 and "BATCHPOINT_ROOT" in broken.json()["detail"]
    assert "BATCHPOINT_ROOT" in api.get("/batchpoint/").text


def test_every_endpoint_needs_an_airflow_user(bp, anonymous, write_epoch):
    write_epoch(0)
    assert bp.run("payments_checkpoint")[0].state == "success"
    urls = [
        "/batchpoint/",
        "/batchpoint/payments",
        "/batchpoint/api/pipelines",
        "/batchpoint/api/payments/checkpoints",
    ]
    # like Airflow's own API: 401, and nothing about the storage in the answer
    assert anonymous.get("/api/v2/dags").status_code == 401
    for url in urls:
        answer = anonymous.get(url)
        assert answer.status_code == 401, (url, answer.status_code)
        assert bp.root not in answer.text
    forged = anonymous.get(urls[2], headers={"Authorization": "Bearer not-a-jwt"})
    assert forged.status_code in (401, 403) and bp.root not in forged.text

    # the UI's session cookie is a credential too (the page is opened from the UI)
    anonymous.cookies.set("_token", token("viewer"))
    for url in urls:
        assert anonymous.get(url).status_code == 200, url
    assert "checkpoint 1" in anonymous.get("/batchpoint/").text
    anonymous.cookies.clear()

    # a user who may not read the pipeline's DAGs sees no pipeline and none of its pages
    nobody = {"Authorization": f"Bearer {token(None)}"}
    assert anonymous.get(urls[2], headers=nobody).json() == []
    assert anonymous.get(urls[3], headers=nobody).status_code == 403
    assert anonymous.get(urls[1], headers=nobody).status_code == 403
    assert "No pipelines you may read" in anonymous.get(urls[0], headers=nobody).text


def test_the_history_is_paged_with_relative_links(bp, api):
    from support.fake_epochs import epoch

    driver = bp.driver()
    for _ in range(5):
        epoch(driver)
    first = api.get("/batchpoint/api/payments/checkpoints?limit=2").json()
    assert [r["checkpoint_id"] for r in first["checkpoints"]] == [5, 4]
    assert first["older"] == 4
    second = api.get("/batchpoint/api/payments/checkpoints?limit=2&before=4").json()
    assert [r["checkpoint_id"] for r in second["checkpoints"]] == [3, 2]
    last = api.get("/batchpoint/api/payments/checkpoints?limit=2&before=2").json()
    assert ([r["checkpoint_id"] for r in last["checkpoints"]], last["older"]) == ([1], None)
    assert api.get("/batchpoint/api/payments/checkpoints?limit=0").status_code == 422

    page = api.get("/batchpoint/payments").text
    assert "checkpoint 5" in page and "older checkpoints" not in page  # 5 fit on a page
    hrefs = re.findall(r"href='([^']*)'", api.get("/batchpoint/").text + page)
    assert hrefs and not [h for h in hrefs if h.startswith(("/", "http"))], hrefs
    assert api.get("/batchpoint/nope").status_code == 404
