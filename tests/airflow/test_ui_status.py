"""The plugin's pages, served by Airflow's own API app from real records, show each
checkpoint with the one status vocabulary (head, retained, discarded, quarantined,
aborted, pending), say who quarantined a checkpoint and why, show a checkpoint aborted at
its trigger with its own trigger time, and offer the restore form only on a checkpoint a
restore can go back to, with "new parallelism" empty (unchanged), never `null`."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from support.airflow_ui import on_local_store, viewer_client
from support.status_history import EXPECTED, QUARANTINE_REASON, every_status

pytestmark = [pytest.mark.airflow]

RESTORE_FORM = "<form class='trigger' id='restore'"
ROW = re.compile(
    r"<tr class='([\w ]+)'><td><a href='payments/checkpoints/(\d+)'>\d+</a></td>"
    r"<td>\w+</td><td>(\w+)</td>"
)
FACT = re.compile(r"<dt>([^<]+)</dt><dd>([^<]*)</dd>")


@pytest.fixture
def api(bp, monkeypatch, tmp_path: Path):
    local = on_local_store(bp, monkeypatch, tmp_path)
    every_status(local.driver())
    with viewer_client(monkeypatch) as client:
        yield client


def facts(page: str) -> dict[str, str]:
    return {k: html.unescape(v) for k, v in FACT.findall(page)}


def test_the_pages_show_one_status_and_offer_a_restore_only_where_it_can_succeed(api):
    history = api.get("/batchpoint/payments").text
    rows = {int(cid): (kind, status) for kind, cid, status in ROW.findall(history)}
    assert {cid: status for cid, (_, status) in rows.items()} == EXPECTED, history
    assert {cid: kind for cid, (kind, _) in rows.items()} == EXPECTED  # styled by status
    answer = api.get("/batchpoint/api/payments/checkpoints").json()["checkpoints"]
    assert {r["checkpoint_id"]: r["status"] for r in answer} == EXPECTED

    for cid, status in EXPECTED.items():
        page = api.get(f"/batchpoint/payments/checkpoints/{cid}").text
        shown = facts(page)
        assert shown["status"].startswith(f"{status}: "), (cid, shown)
        offered = RESTORE_FORM in page
        assert offered == (status in ("head", "retained")), (cid, status)
        if offered:
            assert "<input name='parallelism' data-kind='json' value=''>" in page
            assert "null" not in page.split(RESTORE_FORM, 1)[1].split("</form>", 1)[0]

    quarantined = facts(api.get("/batchpoint/payments/checkpoints/5").text)
    assert re.fullmatch(
        rf"quarantined since \S+Z by a restore: {re.escape(QUARANTINE_REASON)}",
        quarantined["quarantined"],
    ), quarantined

    aborted = facts(api.get("/batchpoint/payments/checkpoints/7").text)
    detail = api.get("/batchpoint/api/payments/checkpoints/7").json()
    head = api.get("/batchpoint/api/payments/checkpoints/6").json()
    assert head["end_time"] <= detail["trigger_time"] <= detail["end_time"]
    assert re.fullmatch(r"\d+\.\ds", aborted["duration"]), aborted  # not -1799.8s
    assert aborted["triggered"] != "not recorded"
