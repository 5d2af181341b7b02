"""The quality gate's report on a checkpoint's page: its verdict, its text, and a link
to the Data Docs of its results as the UI serves them (ui.py's data-docs route)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from batchpoint.protocol.layout import PipelineLayout, parse_checkpoint_dir_name


def served_data_docs(pipeline: str, link: str | None) -> str | None:
    """The checkpoint's Data Docs as the UI serves them (ui.py), relative to the
    checkpoint's page: the report holds the store's URI, which a browser cannot open
    on S3 (and should not open on the Airflow host's disk). A link outside the layout's
    Data Docs folders (a user's own site) is left as it is."""
    if not link:
        return None
    layout = PipelineLayout(pipeline)
    _, found, key = link.rpartition("/" + layout.checkpoints_prefix)
    cid = parse_checkpoint_dir_name(key.partition("/")[0]) if found else None
    prefix = None if cid is None else layout.data_docs_prefix(cid)
    path = layout.checkpoints_prefix + key
    if prefix is None or not path.startswith(prefix) or path == prefix:
        return link
    return f"{cid}/data-docs/{path.removeprefix(prefix)}"


def report_shown(report: Mapping[str, Any], pipeline: str) -> dict[str, Any]:
    """What the page shows of a stored report (`CandidateReport.to_body`)."""
    return {
        "passed": bool(report.get("passed")),
        "mode": report.get("mode", ""),
        "evaluated_at": report.get("evaluated_at", ""),
        "lines": "\n".join(report.get("lines") or []),
        "data_docs": served_data_docs(pipeline, report.get("data_docs")),
    }
