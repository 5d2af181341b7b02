"""HTML for the checkpoint pages (batchpoint.airflow.ui serves them). Every link is
relative, so the pages work under any prefix Airflow's UI or a proxy puts them at:
the index is ``.../batchpoint/`` and a pipeline's page ``.../batchpoint/<pipeline>``."""

from __future__ import annotations

import html
from typing import Any
from urllib.parse import quote

COLUMNS = [
    ("checkpoint_id", "id"),
    ("type", "type"),
    ("status", "status"),
    ("duration_s", "duration"),
    ("state_size", "size"),
    ("rows", "rows"),
    ("acks", "acks"),
    ("reason", "reason"),
    ("quarantined", "gate"),
]


def _cell(row: dict[str, Any], key: str) -> str:
    if key == "duration_s":
        value = row[key]
        return "" if value is None else f"{value:.1f}s"
    if key == "state_size":
        return f"{row[key] / 1024:.0f} KiB"
    if key == "acks":
        return f"{row['acknowledged']}/{row['expected']}"
    if key == "quarantined":
        return "quarantined" if row[key] else ""
    if key == "reason":
        reason = row["failure_reason"]
        return f"{reason}: {row['failure_message']}" if reason else ""
    return str(row[key])


def _table(rows: list[dict[str, Any]]) -> str:
    header = "".join(f"<th>{label}</th>" for _, label in COLUMNS)
    body = "".join(
        f"<tr class='{html.escape(r['status'].lower())}'>"
        + "".join(f"<td>{html.escape(_cell(r, key))}</td>" for key, _ in COLUMNS)
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>"


def _section(pipeline: dict[str, Any], page: dict[str, Any], link: str) -> str:
    """One pipeline's heading, head and page; `link` is the relative URL of its own page
    (the older pages' link is built on it)."""
    head = pipeline["head"]
    older = page["older"]
    more = (
        f"<p><a class='older' href='{html.escape(link)}?before={older}'>older checkpoints</a></p>"
        if older is not None
        else ""
    )
    return (
        f"<h2><a href='{html.escape(link)}'>{html.escape(pipeline['pipeline'])}</a></h2>"
        f"<p>head: {'none' if head is None else f'checkpoint {head}'} "
        f"&middot; {html.escape(pipeline['root'])}</p>"
        f"{_table(page['checkpoints'])}{more}"
    )


def render_index(
    pipelines: list[dict[str, Any]], pages: list[dict[str, Any]], *, error: str = ""
) -> str:
    if error:
        return PAGE.format(body=f"<p class='error'>{html.escape(error)}</p>")
    if not pipelines:
        return PAGE.format(body="<p>No pipelines you may read.</p>")
    sections = [
        _section(p, page, quote(p["pipeline"])) for p, page in zip(pipelines, pages, strict=True)
    ]
    return PAGE.format(body="\n".join(sections))


def render_pipeline(pipeline: dict[str, Any], page: dict[str, Any]) -> str:
    # On .../batchpoint/<pipeline> a bare "?before=N" stays on this page, and "./" is
    # the index.
    body = "<p><a href='./'>all pipelines</a></p>" + _section(pipeline, page, "")
    return PAGE.format(body=body)


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>batchpoint checkpoints</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; }}
td, th {{ border-bottom: 1px solid #ddd; padding: 0.3em 0.8em; text-align: left; }}
tr.aborted td, .error {{ color: #b00; }}
tr.pending td {{ color: #06c; }}
</style></head>
<body>
{body}
</body></html>
"""
