"""The quality gate's report on a checkpoint's page: its verdict, its text, and a link
to the Data Docs of its results as the UI serves them (ui.py's data-docs route)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from batchpoint.protocol.layout import PipelineLayout, parse_checkpoint_dir_name

#: The schemes an outside Data Docs link may have to be a link: anything else (a
#: `javascript:` or `data:` URL stored in a report) would run in the Airflow UI's origin.
LINK_SCHEMES = ("http", "https")


def served_data_docs(pipeline: str, link: str | None) -> str | None:
    """The checkpoint's Data Docs as the UI serves them (ui.py), relative to the
    checkpoint's page: the report holds the store's URI, which a browser cannot open
    on S3 (and should not open on the Airflow host's disk). A link outside the layout's
    Data Docs folders (a user's own site) is kept only as an http(s) URL; None for
    anything else, which the page shows as text (`report_shown`)."""
    if not link:
        return None
    layout = PipelineLayout(pipeline)
    _, found, key = link.rpartition("/" + layout.checkpoints_prefix)
    cid = parse_checkpoint_dir_name(key.partition("/")[0]) if found else None
    prefix = None if cid is None else layout.data_docs_prefix(cid)
    path = layout.checkpoints_prefix + key
    if prefix is None or not path.startswith(prefix) or path == prefix:
        return link if _web_link(link) else None
    return f"{cid}/data-docs/{path.removeprefix(prefix)}"


def report_shown(report: Mapping[str, Any], pipeline: str) -> dict[str, Any]:
    """What the page shows of a stored report (`CandidateReport.to_body`)."""
    return {
        "passed": bool(report.get("passed")),
        "mode": report.get("mode", ""),
        "evaluated_at": report.get("evaluated_at", ""),
        "lines": "\n".join(report.get("lines") or []),
        "data_docs": served_data_docs(pipeline, report.get("data_docs")),
        # where the report says they are, when that is no link to follow: text only
        "data_docs_text": report.get("data_docs") or "",
    }


def _web_link(link: str) -> bool:
    """An absolute http(s) URL with a host, judged as a browser reads it: browsers drop
    tabs and newlines in a URL and trim spaces (`java script:` with a tab is `javascript:`)."""
    parts = urlsplit("".join(link.split()))
    return parts.scheme.lower() in LINK_SCHEMES and bool(parts.netloc)
