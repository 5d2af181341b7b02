"""The Checkpoints pages under damage and hostile records (invariants 11 and 13): one
pipeline's damaged records are a finding in its own row and page, never a blank UI for
every pipeline; a missing outcome record or a failed read is said inside the page, not
as raw JSON; a stored Data Docs link is a link only when it is http(s); the restore form
can restore without the gate; the storage root is shown redacted. The plugin's own app
on a file:// store, as a viewer (no Airflow API server: the pages are what is tested)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from batchpoint.protocol.layout import PipelineLayout
from batchpoint.quality.report import CandidateReport, GateMode
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore_options import GateOptions, ungated_phrase
from batchpoint.settings import Settings
from support.status_history import every_status

pytestmark = [pytest.mark.airflow]

HISTORY_ROW = re.compile(r"href='payments/checkpoints/(\d+)'")
Client = Callable[..., Any]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root with the payments pipeline's every_status history (written once)."""
    from demo.payments import pipeline

    root = tmp_path_factory.mktemp("history") / "root"
    settings = Settings(root.as_uri())
    every_status(PipelineDriver(pipeline, settings.store_ref, settings.checkpoint))
    return root


@pytest.fixture
def root(history: Path, tmp_path: Path) -> Path:
    """A copy of the history that a test may damage."""
    copy = tmp_path / "root"
    shutil.copytree(history, copy)
    return copy


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    """The plugin's app reading `uri`, for a viewer who may read every pipeline."""
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    import batchpoint.airflow.ui_reader as reader
    from batchpoint.airflow.ui import create_app

    def no_code(name: str) -> Any:
        raise RuntimeError("no pipeline code here")

    monkeypatch.setattr(reader.CheckpointPages.__init__, "__defaults__", (no_code, lambda _: set()))
    clients = []

    def make(uri: str, names: tuple[str, ...] = ("payments",)) -> Any:
        app = create_app(lambda: Settings(uri), lambda: list(names), lambda user, p: True)
        app.dependency_overrides[get_user] = lambda: "viewer"
        clients.append(TestClient(app, raise_server_exceptions=False))
        return clients[-1]

    yield make
    for c in clients:
        c.close()


@pytest.mark.parametrize("record", ["head.json", "ids.json"])
def test_one_pipelines_damaged_record_is_a_finding_in_its_own_row(client, root, record):
    (root / "pipelines/payments" / record).write_bytes(b"{garbage")
    api = client(root.as_uri(), ("payments", "other"))

    index = api.get("/").text
    assert "href='payments'" in index and "href='other'" in index, index
    listed = api.get("/api/pipelines")
    assert listed.status_code == 200, listed.text
    overview = {p["pipeline"]: p["overview"] for p in listed.json()}
    key = f"pipelines/payments/{record}"
    assert [f for f in overview["payments"]["findings"] if key in f], overview
    assert (overview["other"]["status"], overview["other"]["findings"]) == ("running", [])

    page = api.get("/payments")
    assert page.status_code == 200 and "<dt>finding</dt>" in page.text, page.text
    if record == "head.json":  # the history reads without the control record
        assert len(set(HISTORY_ROW.findall(page.text))) == 8
        assert overview["payments"]["status"] == "needs_repair"


def test_a_lost_control_record_is_said_as_needs_repair(client, root):
    (root / "pipelines/payments/head.json").unlink()
    api = client(root.as_uri())

    (listed,) = api.get("/api/pipelines").json()
    assert listed["overview"]["status"] == "needs_repair"
    assert "batchpoint repair" in listed["overview"]["status_detail"]
    assert "<tr class='needs_repair'>" in api.get("/").text


def test_a_head_without_its_outcome_record_shows_as_unreadable_in_the_pages(client, root):
    (root / "pipelines/payments/checkpoints/chk-0000000006/outcome.json").unlink()
    api = client(root.as_uri())

    page = api.get("/payments").text
    assert "<tr class='unreadable'><td><a href='payments/checkpoints/6'>" in page, page
    assert "<dt>finding</dt><dd>checkpoint 6 is unreadable" in page
    shown = api.get("/payments/checkpoints/6")
    assert shown.status_code == 200 and "text/html" in shown.headers["content-type"]
    assert "is the head in the control record" in shown.text
    # an id that never was: a 404, said inside a page, not as raw JSON
    absent = api.get("/payments/checkpoints/99")
    assert absent.status_code == 404 and "text/html" in absent.headers["content-type"]
    assert "has no checkpoint 99" in absent.text


def test_the_sinks_page_says_a_failed_read_inside_the_page(client, root):
    (root / "pipelines/payments/spec.json").write_bytes(b"{garbage")
    answer = client(root.as_uri()).get("/payments/sinks")
    assert "text/html" in answer.headers["content-type"], answer.text
    assert "<p class='error'>" in answer.text and "spec" in answer.text


@pytest.mark.parametrize(
    ("link", "linked"),
    [
        ("javascript:fetch('/api/v2/dags')", False),
        ("java\tscript:alert(1)", False),
        (" data:text/html,<script>alert(1)</script>", False),
        ("https://docs.example.com/site/index.html", True),
    ],
)
def test_a_stored_data_docs_link_is_a_link_only_when_it_is_http(client, root, link, linked):
    store = Settings(root.as_uri()).store_ref.open()
    report = CandidateReport(
        "payments", 4, "checkpoint", GateMode.RESTORE, 1_700_000_000.0, data_docs=link
    )
    store.put(PipelineLayout("payments").quality_report(4), report.encode())

    page = client(root.as_uri()).get("/payments/checkpoints/4").text

    anchors = re.findall(r"<a href='([^']*)'>Data Docs</a>", page)
    assert anchors == ([link] if linked else []), anchors
    assert linked or "not a web link" in page


def test_the_restore_form_can_restore_without_the_gate(client, root):
    page = client(root.as_uri()).get("/payments/checkpoints/6").text
    form = page.split("id='restore'", 1)[1].split("</form>", 1)[0]
    phrase = ungated_phrase("payments")
    # shown and required only while the gate is unticked (trigger.js)
    assert f"<label data-unless='quality_gate'>without the gate, type &#34;{phrase}&#34;" in form
    assert "<input name='confirm_ungated' data-kind='text' value=''>" in form
    # what the form posts with the gate unticked and the phrase typed passes the check
    GateOptions.from_form("payments", quality_gate=False, confirm_ungated=phrase)


@pytest.mark.parametrize("secret", ["?token=SECRETSECRET", "?X-Amz-Signature=SECRETSECRET"])
def test_the_storage_root_is_shown_redacted(client, root, secret):
    api = client(root.as_uri() + secret)
    for url in ("/", "/payments", "/api/pipelines"):
        answer = api.get(url)
        assert answer.status_code == 200, (url, answer.text)
        assert "SECRETSECRET" not in answer.text, url
