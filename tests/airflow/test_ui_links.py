"""A checkpoint's page links to the Airflow run that made it and to the logs of the
tries that acknowledged, the tasks' "Checkpoint" extra link opens the run's Checkpoint
tab inside Airflow's frame, and the barrier reads as a labelled table (the pages
rendered alone; test_ui_plugin.py and test_ui_links_browser.py serve them for real)."""

from __future__ import annotations

from html.parser import HTMLParser
from types import SimpleNamespace
from urllib.parse import quote

from batchpoint.airflow.dag_names import dag_ids
from batchpoint.airflow.links import CheckpointPageLink
from batchpoint.airflow.ui_links import RUN_TAB
from batchpoint.airflow.ui_pages import render_checkpoint
from batchpoint.ops.runs import attempt_id

RUN = "manual__2026-12-03T10:51:31.622013+00:00"
DIGEST = "sha256:3a87c04090a9e7974d3fd0888d8db6b3ad3eddacd04d5f1c8e8377d71abd580e"


class Page(HTMLParser):
    """The page's links (href, target, text) and its tables' cells by table class."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.links: list[tuple[str, str | None, str]] = []
        self.tables: dict[str, list[list[str]]] = {}
        self._link: dict[str, str | None] | None = None
        self._text = ""
        self._table = ""
        self._cell: str | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "a":
            self._link, self._text = a, ""
        elif tag == "table":
            self._table = a.get("class") or ""
            self.tables[self._table] = []
        elif tag == "tr":
            self.tables[self._table].append([])
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._link is not None:
            self.links.append((self._link["href"] or "", self._link.get("target"), self._text))
            self._link = None
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[self._table][-1].append(self._cell)
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._link is not None:
            self._text += data
        if self._cell is not None:
            self._cell += data


def detail(kind: str = "checkpoint", run_id: str | None = RUN) -> dict:
    """A checkpoint as the JSON API gives it: dedup's two subtasks acked by try 2 of the
    run, balances' by an attempt that is not the run's (a local runner's)."""
    task = {"ack_time": 1.0, "end_to_end_s": 1.0, "state_size": 1, "rows": 1}
    return {
        "checkpoint_id": 7,
        "type": kind,
        "status": "head",
        "status_meaning": "completed, the newest of the current timeline",
        "outcome": "COMPLETED",
        "trigger_time": 1.0,
        "duration_s": 2.0,
        "state_size": 3,
        "rows": 3,
        "acknowledged": 3,
        "expected": 3,
        "failure_reason": "",
        "failure_message": "",
        "scheduler_run_id": run_id,
        "tasks": [
            {**task, "task": "dedup#0", "attempt": attempt_id(RUN, 2)},
            {**task, "task": "dedup#1", "attempt": attempt_id(RUN, 2)},
            {**task, "task": "balances#0", "attempt": "local-1"},
        ],
        "files": [],
        "quality_report": None,
        "barrier": {
            "events": {
                "p0": {"offset": 1, "last": "e00000-f000.jsonl", "digest": DIGEST},
                "p1": 2,  # an offset recorded before digests were
            }
        },
    }


def test_a_checkpoint_links_to_its_run_and_the_logs_of_the_tries_that_acked():
    page = Page(render_checkpoint("payments", detail(), dag_ids("payments")))
    run = f"../../../dags/payments_checkpoint/runs/{quote(RUN, safe='')}"
    assert (run, "_top", f"payments_checkpoint run {RUN}") in page.links
    logs = {text_href[0]: text_href for text_href in page.links if "/tasks/" in text_href[0]}
    dedup = f"{run}/tasks/operators.dedup?try_number=2"
    assert logs[dedup] == (dedup, "_top", "log, try 2")
    # an attempt the run's ids do not make: the task's page, its latest try
    assert f"{run}/tasks/operators.balances" in logs
    header, *rows = page.tables["tasks"]
    assert header[-1] == "log" and [r[-1] for r in rows] == ["log, try 2", "log, try 2", "log"]


def test_a_savepoints_run_is_the_savepoint_dags_and_no_run_is_said_so():
    savepoint = Page(render_checkpoint("payments", detail("savepoint"), dag_ids("payments")))
    runs = [h for h, _, _ in savepoint.links if "/runs/" in h]
    assert runs and all(h.startswith("../../../dags/payments_savepoint/runs/") for h in runs)
    html = render_checkpoint("payments", detail(run_id=None), dag_ids("payments"))
    assert "No Airflow run triggered it" in html
    assert not [h for h, _, _ in Page(html).links if "/dags/" in h]
    assert Page(html).tables["tasks"][0][-1] != "log"


def test_the_barrier_is_a_table_of_its_fields_not_json():
    html = render_checkpoint("payments", detail(), dag_ids("payments"))
    header, *rows = Page(html).tables["barrier"]
    assert header == ["source", "partition", "files covered", "last file", "digest"]
    assert rows == [
        ["events", "p0", "1", "e00000-f000.jsonl", DIGEST[:19] + "…"],
        ["events", "p1", "2", "", "not recorded"],
    ]
    assert f"title='{DIGEST}'" in html  # the whole digest, on hover
    assert '{"events"' not in html and "&#34;events&#34;" not in html


def test_the_extra_link_opens_the_runs_checkpoint_tab_inside_airflows_frame():
    ti = SimpleNamespace(
        dag_id="payments_checkpoint",
        run_id=RUN,
        xcom_pull=lambda task_ids: {"checkpoint_id": 7} if task_ids == "trigger" else None,
    )
    task = SimpleNamespace(trigger_task_id="trigger")
    link = CheckpointPageLink().get_link(task, ti_key=ti)
    assert link == f"dags/payments_checkpoint/runs/{quote(RUN, safe='')}/plugin/{RUN_TAB}"
    assert not link.startswith(("/", "http"))  # relative to the UI's base URL
    refused = SimpleNamespace(**{**vars(ti), "xcom_pull": lambda task_ids: None})
    assert CheckpointPageLink().get_link(task, ti_key=refused) == ""  # no checkpoint: none
