"""The Checkpoints pages come from autoescaped Jinja2 templates in Airflow's look: a name
is text, never markup; the pages use Airflow's font and colours, with a dark variant;
and those colours are the installed Airflow UI's own."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest

from batchpoint.airflow.dag_names import dag_ids
from batchpoint.airflow.ui_pages import render_checkpoint, render_index, render_pipeline
from batchpoint.airflow.ui_theme import BLACK, FONT_BODY, FONT_MONO, PALETTE, TOKENS
from batchpoint.protocol.history_status import HistoryStatus

EVIL = "<script>alert('x')</script>"
QUOTE = "x' onmouseover='alert(1)"


class Elements(HTMLParser):
    """Every start tag with its attributes, as a browser's parser sees them."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def overview(**more: object) -> dict:
    return {"status": "running", "head": 1, "pending": [], "findings": [], **more}


def history_row(cid: int) -> dict:
    return {
        "checkpoint_id": cid,
        "type": "checkpoint",
        "status": "retained",
        "outcome": "COMPLETED",
        "trigger_time": 1.0,
        "duration_s": float(cid),
        "state_size": 100 * cid,
        "rows": 1,
        "acknowledged": 1,
        "expected": 1,
        "failure_reason": "EVIL" if cid == 1 else None,
        "failure_message": EVIL,
        "quarantined": False,
        "restores": [],
    }


def checkpoint_detail(task: str) -> dict:
    return {
        **history_row(2),
        "status_meaning": "completed and still retained",
        "tasks": [{"task": task, "attempt": 1, "rows": 1}],
        "files": [
            {"task": task, "stream": QUOTE, "path": f"s3://b/{EVIL}", "size": 1, "rows": 1}
            | {"key_groups": None, "origin": EVIL}
        ],
        "quality_report": {"passed": False, "mode": EVIL, "lines": [EVIL]},
        "barrier": {EVIL: 1},
    }


def pages(name: str, operator: str) -> dict[str, str]:
    about = {
        "pipeline": name,
        "root": f"/tmp/{EVIL}",
        "overview": overview(status_detail=EVIL, findings=[EVIL]),
        "deploy_plan": {"text": EVIL, "deployable": False},
    }
    summary = {"count": 2, "completed": 2, "failed": 0, "in_progress": 0}
    page = {"checkpoints": [history_row(2), history_row(1)], "older": 1, "summary": summary}
    dags = dag_ids("payments")
    return {
        "index": render_index([about]),
        "error": render_index([], error=EVIL),
        "pipeline": render_pipeline(about, page, {EVIL: QUOTE}, dags),
        "checkpoint": render_checkpoint(name, checkpoint_detail(operator), dags),
    }


@pytest.mark.parametrize("name", [EVIL, QUOTE])
def test_a_pipeline_or_operator_name_with_markup_is_shown_as_text(name):
    for page, html in pages(name, operator=f"op{EVIL}").items():
        parsed = Elements(html)
        scripts = [t for t, _ in parsed.tags if t == "script"]
        assert len(scripts) == 2, page  # the page's own two: colour mode, trigger forms
        handlers = [(t, a) for t, a in parsed.tags if any(k.startswith("on") for k in a)]
        assert handlers == [], page
        assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html, page
    # a quote in a name stays inside its attribute
    index = Elements(pages(name, "op")["index"]).tags
    assert [a["href"] for t, a in index if t == "a"] == [quote(name)]
    names = [text for text in re.findall(r"<h2>([^<]*)</h2>", pages(name, "op")["pipeline"])]
    assert names == [name.replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#39;")]


def test_the_pages_use_airflows_font_and_colours_with_a_dark_mode():
    for page, html in pages("payments", "dedup").items():
        style = html.split("<style>", 1)[1].split("</style>", 1)[0]
        root = re.search(r":root\{([^}]*)\}", style)
        assert root is not None, page
        light = dict(re.findall(r"(--bp-[\w-]+):([^;]+);", root.group(1)))
        assert light["--bp-font"] == FONT_BODY and light["--bp-mono"] == FONT_MONO
        used = set(re.findall(r"var\((--bp-[\w-]+)\)", style))
        assert used and used <= set(light), used - set(light)  # nothing undefined
        assert "background: var(--bp-bg)" in style and "font-family: var(--bp-font)" in style

        # the dark values: when the browser prefers dark, and when Airflow's UI chose it
        media = re.search(
            r"@media \(prefers-color-scheme: dark\)\{:root:not\(\.light\)\{([^}]*)\}\}", style
        )
        chosen = re.search(r":root\.dark\{([^}]*)\}", style)
        assert media is not None and chosen is not None, page
        for rule in (media.group(1), chosen.group(1)):
            dark = dict(re.findall(r"(--bp-[\w-]+):([^;]+);", rule))
            assert set(dark) == set(TOKENS)
            assert dark["--bp-bg"] == BLACK and dark["--bp-fg"] != light["--bp-fg"]
        assert "localStorage.getItem('theme')" in html  # Airflow's own colour-mode key


def test_the_theme_is_the_installed_airflow_uis_own():
    import airflow

    assets = Path(airflow.__file__).parent / "ui" / "dist" / "assets"
    (bundle,) = [p for p in assets.glob("index-*.js")]
    source = bundle.read_text(encoding="utf-8")
    start = source.index("{tokens:{colors:{black:")
    tokens = source[start : source.index("semanticTokens", start)]
    assert f"black:{{value:`{BLACK}`}}" in tokens
    for (palette, shade), colour in PALETTE.items():
        block = tokens[tokens.index(f"{palette}:{{50:") :]
        block = block[: block.index("}},") + 2]  # up to the palette's end
        assert f"{shade}:{{value:`{colour}`}}" in block, (palette, shade)
    body = FONT_BODY.removeprefix("Inter, ")
    assert "body:{value:`Inter, ${" in source and f"`{body}`" in source
    assert f"mono:{{value:`{FONT_MONO}`}}" in source


@pytest.mark.parametrize("status", [s.label for s in HistoryStatus])
def test_the_restore_form_is_offered_only_where_a_restore_can_succeed(status):
    detail = {**checkpoint_detail("op"), "status": status}
    page = render_checkpoint("payments", detail, dag_ids("payments"))
    offered = "<form class='trigger' id='restore'" in page
    assert offered == (status in ("head", "retained")), status
    if offered:  # empty means unchanged: never a prefilled `null`
        assert "<input name='parallelism' data-kind='json' value=''>" in page


def test_the_restore_form_offers_the_cascade_naming_the_pipelines_downstream():
    detail = {**checkpoint_detail("op"), "status": "head"}
    page = render_checkpoint("ledger", detail, dag_ids("ledger"), downstream=["reports"])
    assert (
        "<input type='checkbox' name='cascade'> cascade: the pipelines downstream follow "
        "(reports)" in page
    )
    alone = render_checkpoint("payments", detail, dag_ids("payments"))
    assert "cascade: the pipelines downstream follow (none deployed)" in alone
