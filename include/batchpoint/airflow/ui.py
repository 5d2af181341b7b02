"""The checkpoint history inside the Airflow UI, like Flink's checkpoint tab: a small
FastAPI app that the Airflow plugin (plugins/batchpoint_plugin.py) mounts on the
api-server under /batchpoint, with a "Checkpoints" entry in the Browse menu.

    GET /batchpoint/                          every pipeline's history as an HTML page
    GET /batchpoint/api/pipelines             the pipelines and their head
    GET /batchpoint/api/{pipeline}/checkpoints    the history as JSON (newest first)

Read-only: it lists records and never moves the head or writes a byte. Storage comes
from the same place as the DAGs' (the `batchpoint_storage` connection, else the
BATCHPOINT_* environment), read per request, so a changed connection needs no restart.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import HTMLResponse

from batchpoint.errors import BatchpointError
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.stats import CheckpointStatsTracker
from batchpoint.quality.quarantine import QuarantineStore
from batchpoint.settings import Settings

URL_PREFIX = "/batchpoint"
#: How many checkpoints a page shows; older ones are in `batchpoint checkpoints list`.
HISTORY_LIMIT = 50

SettingsSource = Callable[[], Settings]
PipelineNames = Callable[[], list[str]]


def _deployment_settings() -> Settings:
    from batchpoint.airflow.config import AirflowDeployment
    from batchpoint.airflow.hooks import BatchpointHook

    deployment = AirflowDeployment.from_env()
    return BatchpointHook(deployment.storage_conn_id, deployment.settings).get_settings()


def _deployment_pipelines() -> list[str]:
    from batchpoint.airflow.config import AirflowDeployment
    from batchpoint.airflow.hooks import cached_pipeline

    return [cached_pipeline(ref).name for ref in AirflowDeployment.from_env().pipeline_refs]


class HistoryReader:
    """The records behind the pages, read off the event loop (storage calls block)."""

    def __init__(self, settings: SettingsSource, pipelines: PipelineNames) -> None:
        self._settings = settings
        self._pipelines = pipelines

    def pipelines(self) -> list[dict[str, Any]]:
        settings = self._settings()
        out = []
        for name in self._pipelines():
            head = CheckpointCoordinator(settings.store_ref.open(), name, settings.checkpoint)
            pointer = head.head.get()
            out.append(
                {
                    "pipeline": name,
                    "root": settings.root,
                    "head": None if pointer is None else pointer.checkpoint_id,
                }
            )
        return out

    def history(self, pipeline: str, limit: int = HISTORY_LIMIT) -> list[dict[str, Any]]:
        if pipeline not in self._pipelines():
            raise KeyError(pipeline)
        settings = self._settings()
        coordinator = CheckpointCoordinator(
            settings.store_ref.open(), pipeline, settings.checkpoint
        )
        history = CheckpointStatsTracker(coordinator).history()
        held = set(QuarantineStore(coordinator.store, coordinator.layout).ids())
        return [
            {**s.to_json(), "quarantined": s.checkpoint_id in held} for s in history[-limit:][::-1]
        ]


def create_app(
    settings: SettingsSource = _deployment_settings,
    pipelines: PipelineNames = _deployment_pipelines,
) -> FastAPI:
    reader = HistoryReader(settings, pipelines)
    app = FastAPI(title="batchpoint checkpoints", docs_url=None, redoc_url=None)

    async def call(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args)
        except BatchpointError as exc:
            # A configuration or storage problem: say which, not a 500 with a traceback.
            raise HTTPException(status_code=503, detail=str(exc)) from exc

    @app.get("/api/pipelines")
    async def list_pipelines() -> list[dict[str, Any]]:
        return await call(reader.pipelines)

    @app.get("/api/{pipeline}/checkpoints")
    async def checkpoints(pipeline: str, limit: int = HISTORY_LIMIT) -> list[dict[str, Any]]:
        try:
            return await call(reader.history, pipeline, max(1, limit))
        except KeyError:
            raise HTTPException(status_code=404, detail=f"no pipeline {pipeline!r}") from None

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        try:
            heads = await call(reader.pipelines)
            sections = [render_history(p, await call(reader.history, p["pipeline"])) for p in heads]
        except HTTPException as exc:
            sections = [f"<p class='error'>{html.escape(str(exc.detail))}</p>"]
        return PAGE.format(body="\n".join(sections))

    return app


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


def render_history(pipeline: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    head = pipeline["head"]
    header = "".join(f"<th>{label}</th>" for _, label in COLUMNS)
    body = "".join(
        f"<tr class='{html.escape(r['status'].lower())}'>"
        + "".join(f"<td>{html.escape(_cell(r, key))}</td>" for key, _ in COLUMNS)
        + "</tr>"
        for r in rows
    )
    return (
        f"<h2>{html.escape(pipeline['pipeline'])}</h2>"
        f"<p>head: {'none' if head is None else f'checkpoint {head}'} "
        f"&middot; {html.escape(pipeline['root'])}</p>"
        f"<table><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>"
    )


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
