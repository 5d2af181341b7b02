"""A checkpoint's page shows its lineage (ui_lineage.py) when it has any: the upstream
checkpoints it read, and what those read, each linked to its own page in the same
frame, with a read an upstream restore took back said so; the downstream checkpoints
computed from it; only rows about pipelines the user may read. The records are three
chained pipelines' (support/fake_chain.py, no Spark), read by the plugin's own reader
and served by its app; the JSON answer has the strict model the schema publishes."""

from __future__ import annotations

from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from batchpoint.airflow.dag_names import dag_ids
from batchpoint.airflow.ui import CheckpointPages, create_app
from batchpoint.airflow.ui_models import CheckpointDetailModel
from batchpoint.airflow.ui_pages import render_checkpoint
from batchpoint.settings import Settings
from support.fake_chain import FakeChain

PIPELINES = ["ledger", "reports", "trends"]


class Tables(HTMLParser):
    """Each table's rows of cell texts, by the table's class, and every link
    (href, target) in the page."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.links: list[tuple[str | None, str | None]] = []
        self._table: str | None = None
        self._cell: str | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("class") or ""
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th"):
            self._cell = ""
        elif tag == "a":
            self.links.append((a.get("href"), a.get("target")))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append(self._cell)
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell += data


@pytest.fixture
def chain(tmp_path: Path) -> FakeChain:
    """ledger 1, reports 1, trends 1, ledger 2 and 3, reports 2 (read ledger 3), trends
    2 (read reports 2); then ledger restored to 2 (3 taken back) and ledger 4."""
    chain = FakeChain.on((tmp_path / "store").as_uri())
    for driver in (chain.ledger, chain.reports, chain.trends, chain.ledger, chain.ledger):
        chain.epoch(driver)
    chain.epoch(chain.reports)
    chain.epoch(chain.trends)
    chain.restore(chain.ledger, 2)
    chain.epoch(chain.ledger)
    return chain


@pytest.fixture
def pages(chain: FakeChain) -> CheckpointPages:
    settings = Settings(chain.ledger.store_ref.uri)
    return CheckpointPages(lambda: settings, lambda: PIPELINES, paused=lambda ids: set())


def test_the_page_shows_what_it_read_and_what_was_computed_from_it(pages) -> None:
    detail = pages.checkpoint("reports", 2)
    CheckpointDetailModel.model_validate(detail)  # the route's strict model
    html = render_checkpoint("reports", detail, dag_ids("reports"))
    page = Tables(html)
    assert "<h3>Lineage</h3>" in html
    header, *rows = page.tables["upstream"]
    assert header == ["depth", "checkpoint", "source", "reads", "read", "status"]
    assert rows == [
        ["1", "reports 2", "balances", "ledger/totals_out", "after checkpoint 1 up to "
         "checkpoint 3", "taken back by a restore of 'ledger'"],
        ["1", "reports 2", "moves", "ledger/movements", "after checkpoint 1 up to "
         "checkpoint 3", "taken back by a restore of 'ledger'"],
    ]  # fmt: skip
    assert "reports 2, source balances: source partition" in html  # the note says why
    assert "&#39;ledger&#39; was restored to checkpoint 2" in html
    header, *rows = page.tables["downstream"]
    assert header == ["depth", "checkpoint", "source", "reads", "read", "computed from it"]
    assert rows == [
        ["1", "trends 2", "regions", "reports", "after checkpoint 1 up to checkpoint 2",
         "yes: it read 'reports' up to 2 itself"],
    ]  # fmt: skip
    # the checkpoints link to their pages, in this frame (relative to .../reports/checkpoints/2)
    for href in (
        "../../reports/checkpoints/2",
        "../../ledger/checkpoints/3",
        "../../trends/checkpoints/2",
    ):
        assert (href, None) in page.links, page.links

    # trends 2 read reports 2 and, through it, the ledger's taken-back checkpoint 3
    trends = Tables(render_checkpoint("trends", pages.checkpoint("trends", 2), dag_ids("trends")))
    assert [(r[0], r[1], r[5]) for r in trends.tables["upstream"][1:]] == [
        ("1", "trends 2", "on the upstream's timeline"),
        ("2", "reports 2", "taken back by a restore of 'ledger'"),
        ("2", "reports 2", "taken back by a restore of 'ledger'"),
    ]
    assert "downstream" not in trends.tables  # nothing reads trends


def test_a_checkpoint_with_no_lineage_has_no_section(pages) -> None:
    detail = pages.checkpoint("ledger", 4)  # reads nothing; nothing read it yet
    assert detail["lineage"]["upstream"] == []
    assert {r["derivation"] for r in detail["lineage"]["downstream"]} == {"not_computed"}
    assert "Lineage" not in render_checkpoint("ledger", detail, dag_ids("ledger"))
    # a page rendered from a detail without lineage (an older answer) is the same
    del detail["lineage"]
    assert "Lineage" not in render_checkpoint("ledger", detail, dag_ids("ledger"))


def test_only_pipelines_the_user_may_read_are_shown(pages) -> None:
    everything = pages.checkpoint("ledger", 3)["lineage"]
    assert {r["pipeline"] for r in everything["downstream"]} == {"reports", "trends"}
    hidden = pages.checkpoint("ledger", 3, readable=["ledger", "reports"])["lineage"]
    assert {r["pipeline"] for r in hidden["downstream"]} == {"reports"}
    assert hidden["notes"] == ["2 row(s) about pipelines you may not read are not shown"]
    alone = pages.checkpoint("reports", 2, readable=["reports"])["lineage"]
    assert alone["upstream"] == alone["downstream"] == []
    # its two reads of the ledger; trends 1 and 2, which read it
    assert alone["notes"] == ["4 row(s) about pipelines you may not read are not shown"]


@pytest.fixture
def app(chain: FakeChain, airflow_home: Path) -> Iterator[Any]:
    """The plugin's app on the chain's store, any request a user who may read every
    pipeline but trends."""
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    settings = Settings(chain.ledger.store_ref.uri)
    served = create_app(lambda: settings, lambda: PIPELINES, lambda user, p: p != "trends")
    served.dependency_overrides[get_user] = lambda: "a viewer"
    with TestClient(served) as client:
        yield client


@pytest.mark.airflow
def test_the_routes_give_the_lineage_the_user_may_read(app) -> None:
    answer = app.get("/api/ledger/checkpoints/3").json()
    downstream = answer["lineage"]["downstream"]
    derived = {(r["pipeline"], r["checkpoint_id"], r["derivation"]) for r in downstream}
    assert ("reports", 2, "computed") in derived
    assert not [r for r in derived if r[0] == "trends"]  # may not read trends
    page = app.get("/ledger/checkpoints/3").text
    assert "reports 2" in page and "trends 2" not in page
    assert "row(s) about pipelines you may not read are not shown" in page
