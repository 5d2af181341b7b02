"""The plugin in plugins/ puts the checkpoint history into the Airflow UI: Airflow's own
plugin manager loads it from the project's plugins folder, and Airflow's own API app
serves it under /batchpoint, reading the records a real checkpoint run wrote."""

from __future__ import annotations

import re
import time
from urllib.parse import quote, urljoin

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
    hrefs = {(v["destination"], v["href"]) for v in views if v["name"] == "Checkpoints"}
    assert hrefs == {("nav", "batchpoint/")}, views
    # the run's tab (the extra link's target), relative, with the ids Airflow fills in
    run_tab = [(v["destination"], v["href"]) for v in views if v["name"] == "Checkpoint"]
    assert run_tab == [("dag_run", "batchpoint/dag/{DAG_ID}/runs/{RUN_ID}")], views
    tabs = [a for p in plugins_manager.get_plugin_info() for a in p.get("react_apps", [])]
    assert [(a["name"], a["destination"]) for a in tabs] == [("Checkpoints", "dag")], tabs


def test_the_history_page_shows_completed_and_aborted_checkpoints(
    bp, write_epoch, monkeypatch, api
):
    write_epoch(0)
    assert bp.run("payments_checkpoint")[0].state == "success"
    write_epoch(1)
    monkeypatch.setenv("FAKE_JOB_FAIL", "balances")
    assert bp.run("payments_checkpoint")[0].state == "failed"

    answer = api.get("/batchpoint/api/pipelines")
    assert answer.status_code == 200, answer.text
    (listed,) = answer.json()
    assert (listed["pipeline"], listed["root"], listed["head"]) == ("payments", bp.root, 1)
    overview = listed["overview"]
    assert (overview["status"], overview["latest_checkpoint"]) == ("running", 1)
    assert (overview["latest_savepoint"], overview["consecutive_failures"]) == (None, 1)
    assert overview["triggered"] == 2
    page = api.get("/batchpoint/api/payments/checkpoints").json()
    assert page["older"] is None
    rows = page["checkpoints"]
    assert [(r["checkpoint_id"], r["status"]) for r in rows] == [(2, "aborted"), (1, "head")]
    assert [r["outcome"] for r in rows] == ["ABORTED", "COMPLETED"]
    assert rows[0]["failure_reason"] and "injected failure" in rows[0]["failure_message"]
    assert rows[1]["acknowledged"] == rows[1]["expected"] > 0
    assert [r["quarantined"] for r in rows] == [False, False]

    assert page["summary"]["completed"] == 1 and page["summary"]["failed"] == 1
    assert page["config"]["tolerable_failed_checkpoints"] >= 0

    index = api.get("/batchpoint/")
    assert index.status_code == 200 and "text/html" in index.headers["content-type"]
    assert "<a href='payments'>payments</a>" in index.text and "running" in index.text
    tab = api.get("/batchpoint/payments").text
    assert "<dt>head</dt><dd>checkpoint 1</dd>" in tab
    assert "<dt>triggered in all</dt><dd>2</dd>" in tab
    assert "<tr class='aborted'>" in tab and "injected failure" in tab
    assert "<a href='payments/checkpoints/2'>2</a>" in tab

    # the quality gate quarantines checkpoint 1: the history says so
    from batchpoint.protocol.layout import PipelineLayout
    from batchpoint.quality.quarantine import QuarantineStore
    from batchpoint.quality.report import CandidateReport, GateMode

    report = CandidateReport("payments", 1, "checkpoint", GateMode.RESTORE, time.time())
    QuarantineStore(bp.store, PipelineLayout("payments")).add(report, time.time())
    rows = api.get("/batchpoint/api/payments/checkpoints").json()["checkpoints"]
    assert [r["quarantined"] for r in rows] == [False, True]
    assert [r["status"] for r in rows] == ["aborted", "quarantined"]
    assert "<td>quarantined</td>" in api.get("/batchpoint/payments").text


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
    assert "<td>1</td>" in anonymous.get("/batchpoint/").text  # the head
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


def test_a_checkpoint_drill_down_the_dag_tab_and_a_stopped_pipeline(bp, api):
    from batchpoint.ops.epoch import finalize
    from batchpoint.protocol.checkpoint import CheckpointType
    from batchpoint.protocol.properties import CheckpointProperties
    from batchpoint.quality.findings import Finding
    from batchpoint.quality.report import CandidateReport, GateMode
    from support.fake_epochs import ack_all, epoch

    driver = bp.driver()
    first = epoch(driver)
    bad = Finding("balances/balances", "sample:balance-recompute", "3 of 50 keys differ")
    report = CandidateReport(
        "payments", first, "checkpoint", GateMode.RESTORE, time.time(), findings=[bad]
    )
    bp.store.put(driver.coordinator.layout.quality_report(first), report.encode())

    detail = api.get(f"/batchpoint/api/payments/checkpoints/{first}").json()
    acks = driver.coordinator.get_outcome(first).completed.acks
    assert sorted(t["task"] for t in detail["tasks"]) == sorted(str(a.task) for a in acks)
    assert len(detail["files"]) == sum(len(a.handles) for a in acks)
    assert {f["path"] for f in detail["files"]} == {h.path for a in acks for h in a.handles}
    assert detail["quality_report"]["passed"] is False
    assert any("3 of 50 keys differ" in line for line in detail["quality_report"]["lines"])

    page = api.get(f"/batchpoint/payments/checkpoints/{first}").text
    assert "3 of 50 keys differ" in page and "verdict: FAILED" in page
    assert "data-api='../../../api/v2/dags/payments_restore/dagRuns'" in page
    assert "name='source' data-kind='text' value='1'" in page
    assert api.get("/batchpoint/payments/checkpoints/99").status_code == 404
    assert api.get("/batchpoint/api/payments/checkpoints/99").status_code == 404

    # the DAG tab: a pipeline's DAG goes to its page, any other DAG is told it has none
    tab = api.get("/batchpoint/dag/payments_savepoint", follow_redirects=False)
    assert (tab.status_code, tab.headers["location"]) == (307, "../payments")
    other = api.get("/batchpoint/dag/someone_elses_dag")
    assert other.status_code == 404 and "not a DAG of a batchpoint pipeline" in other.text

    # a savepoint taken with stop_pipeline that is the head: the pipeline is stopped
    stop = CheckpointProperties(stop_pipeline=True)
    pending = driver.trigger(CheckpointType.SAVEPOINT, properties=stop)
    ack_all(driver, pending)
    assert finalize(driver, pending.checkpoint_id).outcome.completed is not None
    (listed,) = api.get("/batchpoint/api/pipelines").json()
    assert listed["overview"]["status"] == "stopped"
    assert listed["overview"]["latest_savepoint"] == pending.checkpoint_id
    assert f"stopped with savepoint {pending.checkpoint_id}" in api.get("/batchpoint/payments").text


def test_a_checkpoint_and_the_run_that_made_it_link_to_each_other(bp, write_epoch, api):
    write_epoch(0)
    run, states = bp.run("payments_checkpoint")
    assert run.state == "success", states
    dag_run = f"dags/payments_checkpoint/runs/{quote(run.run_id, safe='')}"
    tasks = ["trigger", "operators.dedup", "wait_for_acks", "finalize", "cleanup"]
    for task in tasks:
        answer = api.get(
            f"/api/v2/dags/payments_checkpoint/dagRuns/{run.run_id}/taskInstances/{task}/links"
        )
        assert answer.status_code == 200, (task, answer.text)
        link = answer.json()["extra_links"]["Checkpoint"]
        # relative to the UI's base URL: the run's Checkpoint tab, inside Airflow's frame
        assert link == f"{dag_run}/plugin/batchpoint_run", (task, link)
    # the tab's frame opens the plugin's href with the run's ids (plugin.py), which is
    # the page of the checkpoint that run triggered
    href = f"/batchpoint/dag/payments_checkpoint/runs/{quote(run.run_id, safe='')}"
    tab = api.get(href, follow_redirects=False)
    assert (tab.status_code, tab.headers["location"]) == (307, "../../../payments/checkpoints/1")
    page = api.get(href)
    assert str(page.url).endswith("/batchpoint/payments/checkpoints/1")
    assert "payments: checkpoint 1" in page.text

    # and back: the run, and the log of the try of each operator task that acked, are
    # Airflow's own (its REST API knows them by the ids the links name)
    links = re.findall(r"href='([^']*)' target='_top'", page.text)
    resolved = {urljoin(str(page.url), h).removeprefix(f"{api.base_url}/") for h in links}
    assert dag_run in resolved, resolved
    logs = sorted(r for r in resolved if "/tasks/" in r)
    assert [r.rpartition("/tasks/")[2] for r in logs] == [
        f"operators.{op}?try_number=1" for op in ("alerts", "balances", "balances_table", "dedup")
    ], logs
    for log in logs:
        task, _, try_number = log.rpartition("/tasks/")[2].partition("?try_number=")
        answer = api.get(
            f"/api/v2/dags/payments_checkpoint/dagRuns/{run.run_id}/taskInstances/{task}"
        ).json()
        assert (answer["state"], answer["try_number"]) == ("success", int(try_number)), answer

    # a run that triggered nothing, and a DAG that triggers no checkpoint
    none = api.get("/batchpoint/dag/payments_checkpoint/runs/manual__nothing")
    assert none.status_code == 404 and "triggered no checkpoint" in none.text
    restore = api.get("/batchpoint/dag/payments_restore/runs/x")
    assert restore.status_code == 404 and "not a checkpoint or savepoint DAG" in restore.text
