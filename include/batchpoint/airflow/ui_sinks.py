"""The Checkpoints UI's table sinks page, at ``<base>/batchpoint/<p>/sinks``: each
table sink of the pipeline with its commits, one per checkpoint (Iceberg snapshots and
Delta versions side by side, each in its own words), linked to the checkpoint pages.
Time travel by checkpoint is `batchpoint sink show --checkpoint N` on the same data."""

from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import HTMLResponse

from batchpoint.airflow.ui_pages import render_index, render_sinks, when
from batchpoint.errors import BatchpointError
from batchpoint.ops.sinks import sink_directory, sink_history
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.settings import Settings
from batchpoint.tables.binding import TableBinding


def table_sinks(settings: Settings, history: PipelineHistory) -> list[dict[str, Any]]:
    """Each table sink with its commits, newest first; a table that cannot be read is
    said as its error, beside the others."""
    out = []
    for found in sink_directory(history, pending=False).sinks:
        binding = TableBinding.from_properties(found.properties)
        if binding is None:
            continue
        entry: dict[str, Any] = {
            "sink": found.ref.label,
            "table": str(binding),
            "commits": [],
            "error": "",
            "noun": "",
        }
        try:
            shown = sink_history(history, settings.store_ref, found)
        except BatchpointError as exc:
            entry["error"] = str(exc)
            out.append(entry)
            continue
        entry["noun"] = shown.noun
        for c in reversed(shown.commits):
            cid = c.checkpoint_id
            entry["commits"].append(
                {
                    "id": c.snapshot_id,
                    "checkpoint": cid if cid is not None else "-",
                    "href": f"checkpoints/{cid}" if cid is not None else "",
                    "cells": [c.generation, c.operation, c.records, when(c.committed_at_ms / 1000)],
                }
            )
        out.append(entry)
    return out


def sink_routes(app: FastAPI, access: Any, User: Any) -> None:
    reader, call = access.reader, access.call

    @app.get(
        "/{pipeline}/sinks",
        response_class=HTMLResponse,
        response_model=None,
        include_in_schema=False,
    )
    async def sinks_page(pipeline: str, user: User) -> str | HTMLResponse:
        await access.check_pipeline(user, pipeline)

        def read() -> list[dict[str, Any]]:
            settings, _, history = reader.open(pipeline)
            return table_sinks(settings, history)

        try:
            return render_sinks(pipeline, await call(read))
        except HTTPException as exc:  # said in the page, as the pipeline's page does
            return HTMLResponse(render_index([], error=str(exc.detail)), exc.status_code)
