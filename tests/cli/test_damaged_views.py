"""The read-only CLI views and the Checkpoints pages under damage (invariant 11: damage
is a finding, never a blocker and never silent): one damaged record of the payments
history (support/status_history.py) on a real local store is reported beside the rest,
by `checkpoints list`, `stats`, `checkpoints show`, `verify` and the plugin's app (as a
viewer, in-process: no Airflow API server)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from batchpoint.protocol.layout import PipelineLayout
from batchpoint.quality.report import CandidateReport, GateMode
from batchpoint.settings import Settings
from support.cli import payments_driver
from support.status_history import every_status

HEAD = 6
HISTORY_ROW = re.compile(r"href='payments/checkpoints/(\d+)'")
Client = Callable[..., Any]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root with the payments pipeline's every_status history (written once)."""
    root = tmp_path_factory.mktemp("history") / "root"
    every_status(payments_driver(root.as_uri()))
    return root


@pytest.fixture
def damaged(history: Path, root: str) -> Path:
    """A copy of the history at the CLI's root (BATCHPOINT_ROOT), for a test to damage."""
    copy = Path(root.removeprefix("file://"))
    shutil.copytree(history, copy)
    return copy


def garble(root: Path, record: str) -> str:
    """Overwrite one of the pipeline's records with garbage; its key."""
    (root / "pipelines/payments" / record).write_bytes(b"{garbage")
    return f"pipelines/payments/{record}"


def test_checkpoints_list_shows_the_history_and_an_unreadable_control_record(damaged, cli):
    key = garble(damaged, "head.json")
    run = cli("checkpoints", "list")
    assert run.code == 0 and run.err == ""
    assert [line.split()[0] for line in run.out.splitlines()[3:11]] == list("12345678")
    assert "findings (records that could not be read):" in run.out and key in run.out

    body = cli("--json", "checkpoints", "list").json
    assert len(body["checkpoints"]) == 8
    assert len(body["findings"]) == 1 and key in body["findings"][0]


@pytest.mark.parametrize("record", ["ids.json", "failures.json"])
def test_stats_shows_the_summary_and_an_unreadable_counter(damaged, cli, record):
    key = garble(damaged, record)
    run = cli("stats")
    assert run.code == 0 and run.err == ""
    assert "checkpoints: 8 (6 completed, 1 failed, 1 in progress)" in run.out
    assert "findings (records that could not be read):" in run.out and key in run.out

    body = cli("--json", "stats").json
    assert body["count"] == 8 and body["pipeline_status"] == "RUNNING"
    assert len(body["findings"]) == 1 and key in body["findings"][0]


def test_intact_views_list_no_findings(damaged, cli):
    for argv in (("checkpoints", "list"), ("stats",)):
        assert "findings" not in cli(*argv).out
        assert cli("--json", *argv).json["findings"] == []


def lose_head_outcome(root: Path) -> None:
    (root / f"pipelines/payments/checkpoints/chk-{HEAD:010d}/outcome.json").unlink()


def test_a_head_whose_outcome_is_lost_is_shown_unreadable_not_unknown(damaged, cli):
    lose_head_outcome(damaged)
    run = cli("checkpoints", "show", str(HEAD))
    assert run.code == 0 and run.err == ""
    assert "is the head in the control record, but its outcome record is missing" in run.out
    assert "status: unreadable" in run.out


@pytest.mark.parametrize("target", [str(HEAD), "head"])
def test_verify_reports_a_head_whose_outcome_is_lost_as_a_problem(damaged, cli, target):
    lose_head_outcome(damaged)
    run = cli("verify", target, "--integrity-only")
    assert run.code == 1 and run.err == "", run.err
    assert f"checkpoint {HEAD}: 0 file(s), 1 problem(s)" in run.out
    assert "its outcome record is missing" in run.out
    body = cli("--json", "verify", target, "--integrity-only").json
    assert body["checkpoint_id"] == HEAD and "outcome record is missing" in body["problems"][0]


# == the Checkpoints pages ===============================================================


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    """The plugin's app reading `uri`, for a viewer who may read every pipeline."""
    pytest.importorskip("airflow")
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    import batchpoint.airflow.ui_reader as reader
    from batchpoint.airflow.ui import create_app

    def no_code(name: str) -> Any:
        raise RuntimeError("no pipeline code here")

    monkeypatch.setattr(reader.CheckpointPages.__init__, "__defaults__", (no_code, lambda _: set()))
    clients = []

    def make(uri: str) -> Any:
        app = create_app(lambda: Settings(uri), lambda: ["payments"], lambda user, p: True)
        app.dependency_overrides[get_user] = lambda: "viewer"
        clients.append(TestClient(app, raise_server_exceptions=False))
        return clients[-1]

    yield make
    for c in clients:
        c.close()


@pytest.mark.airflow
def test_an_unreadable_failure_counter_hides_no_history_of_the_pages(damaged, client):
    key = garble(damaged, "failures.json")
    api = client(damaged.as_uri())
    page = api.get("/payments")
    assert page.status_code == 200
    assert len(set(HISTORY_ROW.findall(page.text))) == 8
    assert key in page.text

    listed = api.get("/api/payments/checkpoints")
    assert listed.status_code == 200, listed.text
    assert any(key in f for f in listed.json()["overview"]["findings"])
    (entry,) = api.get("/api/pipelines").json()
    overview = entry["overview"]
    assert (overview["status"], overview["head"]) == ("running", HEAD)
    assert any(key in f for f in overview["findings"])


@pytest.mark.airflow
@pytest.mark.parametrize("version", [None, 999])
def test_an_unreadable_quality_report_is_a_finding_of_the_checkpoint_page(damaged, client, version):
    store = Settings(damaged.as_uri()).store_ref.open()
    key = PipelineLayout("payments").quality_report(4)
    report = CandidateReport("payments", 4, "checkpoint", GateMode.RESTORE, 1.7e9).encode()
    if version is None:
        report = b"{garbage"
    else:  # as a newer release would write it
        report = json.dumps({**json.loads(report), "version": version}).encode()
    store.put(key, report)
    api = client(damaged.as_uri())

    html = api.get("/payments/checkpoints/4")
    assert html.status_code == 200, html.text[-300:]
    assert "id='restore'" in html.text and key in html.text
    assert "No quality-gate report that can be read" in html.text
    body = api.get("/api/payments/checkpoints/4")
    assert body.status_code == 200, body.text
    detail = body.json()
    assert detail["status"] == "retained" and detail["quality_report"] is None
    (finding,) = detail["findings"]
    assert "quality-gate report cannot be read" in finding and key in finding
