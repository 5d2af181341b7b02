"""The Checkpoints pages inside the Airflow UI, like Flink's checkpoint tab: a small
FastAPI app that the Airflow plugin (plugins/batchpoint_plugin.py) mounts on the
api-server under /batchpoint, with "Checkpoints" in the Browse menu and on DAG pages.

    GET /batchpoint/                           every pipeline with its status
    GET /batchpoint/{pipeline}?before=N        its summary, chart, history page, config
    GET /batchpoint/{pipeline}/checkpoints/{id}    a checkpoint: tasks, report, files, lineage
    GET /batchpoint/{pipeline}/checkpoints/{id}/data-docs/{path}
                                               a file of the checkpoint's Data Docs site (its
                                               CDN assets from static/data-docs/: no internet)
    GET /batchpoint/{pipeline}/sinks           its table sinks' commits (ui_sinks.py)
    GET /batchpoint/dag/{dag_id}               a DAG's pipeline's page (a redirect)
    GET /batchpoint/dag/{dag_id}/runs/{run_id} the page of the checkpoint that run
                                               triggered (a redirect; the run's tab)
    GET /batchpoint/api/pipelines              the pipelines with their status (JSON)
    GET /batchpoint/api/{pipeline}/checkpoints?before=N&limit=M
                                               a page of the history (newest first)
    GET /batchpoint/api/{pipeline}/checkpoints/{id}    one checkpoint
    GET /batchpoint/api/openapi.json           the JSON routes' OpenAPI schema
    GET /batchpoint/static/checkpoints-tab.js  the DAG's Checkpoints tab (a React bundle
                                               built from ui/, plugin.py's react_apps)

Each JSON route declares its response model (ui_models.py), so the schema describes every
field; it says nothing about a pipeline and is public, like Airflow's own and the static files.
Every other endpoint needs an authenticated Airflow user: the API server's own JWT, from
the Authorization header or the session cookie the UI holds (401 without one), and
shows a pipeline only to users allowed to read its checkpoint DAG (403 otherwise). A
page costs storage requests in proportion to its length, not to the history's (a
checkpoint's lineage reads the retained checkpoints of the pipelines stored beside it).

Read-only: it reads records and never moves the head or writes a byte. Storage comes
from the same place as the DAGs' (the `batchpoint_storage` connection, else the
BATCHPOINT_* environment), read per request, so a changed connection needs no restart.
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations at
# definition time, and the Annotated user alias made inside create_app is only there.

import asyncio
import mimetypes
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from batchpoint.airflow.dag_names import dag_ids
from batchpoint.airflow.data_docs_assets import local_assets
from batchpoint.airflow.ui_models import CheckpointDetailModel, CheckpointsPage, PipelineEntry
from batchpoint.airflow.ui_pages import render_checkpoint, render_index, render_pipeline
from batchpoint.airflow.ui_reader import CheckpointPages, PipelineNames, SettingsSource
from batchpoint.airflow.ui_sinks import sink_routes
from batchpoint.errors import BatchpointError, CheckpointNotFound
from batchpoint.protocol.checkpoint import CheckpointType
from batchpoint.settings import Settings
from batchpoint.storage.redaction import redact_uri

URL_PREFIX = "/batchpoint"
#: The OpenAPI schema of the JSON routes, under the prefix.
OPENAPI_URL = "/api/openapi.json"
#: The built bundle of the DAG's Checkpoints tab (ui/ is its source), shipped in the package.
STATIC_DIR = Path(__file__).with_name("static")
TAB_BUNDLE = "static/checkpoints-tab.js"
#: The copies of the assets GX's Data Docs load from CDNs (data_docs_assets.py).
DATA_DOCS_ASSETS = "/static/data-docs/"
#: How many checkpoints a page shows by default, and at most.
HISTORY_LIMIT = 50
MAX_PAGE = 500

#: The checkpoints each of a pipeline's DAGs triggers (dag_names.dag_ids' keys).
_RUN_KINDS = {"checkpoint": CheckpointType.CHECKPOINT, "savepoint": CheckpointType.SAVEPOINT}
_NONE_YET = (
    "its trigger task has not run, or the trigger was refused (its log says why), or the "
    "checkpoint is older than the history kept."
)

#: Whether the request's user may read a pipeline (its checkpoint DAG).
ReadCheck = Callable[[Any, str], bool]


def _deployment_settings() -> Settings:
    from batchpoint.airflow.config import AirflowDeployment
    from batchpoint.airflow.hooks import BatchpointHook

    deployment = AirflowDeployment.from_env()
    return BatchpointHook(deployment.storage_conn_id, deployment.settings).get_settings()


def _deployment_pipelines() -> list[str]:
    from batchpoint.airflow.config import AirflowDeployment
    from batchpoint.airflow.hooks import cached_pipeline

    return [cached_pipeline(ref).name for ref in AirflowDeployment.from_env().pipeline_refs]


def _may_read_dags(user: Any, pipeline: str) -> bool:
    """The auth manager's answer for reading the pipeline's checkpoint DAG: whoever may
    see the DAG's runs may see its checkpoints."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    details = DagDetails(id=dag_ids(pipeline)["checkpoint"])
    return get_auth_manager().is_authorized_dag(method="GET", user=user, details=details)


def _airflow_user_dependency() -> Callable[..., Any]:
    """Airflow's own `get_user`: Bearer token or the UI's `_token` cookie, else 401."""
    from airflow.api_fastapi.core_api.security import get_user

    return get_user


Before = Annotated[int | None, Query(ge=1)]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE)]


class _Access:
    """What every route does first: run the blocking read off the event loop, turn
    batchpoint's errors into HTTP ones, and check that the user may read the pipeline."""

    def __init__(self, reader: CheckpointPages, may_read: ReadCheck) -> None:
        self.reader = reader
        self.may_read = may_read

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args)
        except CheckpointNotFound as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from exc
        except BatchpointError as exc:
            # A configuration or storage problem: say which, not a 500 with a traceback.
            # Redacted again: a message built from a URI must not show its secrets here.
            raise HTTPException(status_code=503, detail=redact_uri(str(exc))) from exc

    async def readable(self, user: Any) -> list[str]:
        names = await self.call(self.reader.names)
        return [n for n in names if await asyncio.to_thread(self.may_read, user, n)]

    async def check_pipeline(self, user: Any, pipeline: str) -> None:
        if pipeline not in await self.call(self.reader.names):
            raise HTTPException(status_code=404, detail=f"no pipeline {pipeline!r}")
        if not await asyncio.to_thread(self.may_read, user, pipeline):
            raise HTTPException(
                status_code=403, detail=f"not allowed to read pipeline {pipeline!r}"
            )


def create_app(
    settings: SettingsSource = _deployment_settings,
    pipelines: PipelineNames = _deployment_pipelines,
    may_read: ReadCheck = _may_read_dags,
) -> FastAPI:
    reader = CheckpointPages(settings, pipelines)
    user_of = _airflow_user_dependency()
    app = FastAPI(
        title="batchpoint checkpoints",
        docs_url=None,
        redoc_url=None,
        # The JSON routes' schema (ui_models.py); the HTML pages are not in it.
        openapi_url=OPENAPI_URL,
        # Every route, the HTML pages too: nothing about a pipeline without a user.
        dependencies=[Depends(user_of)],
    )
    access = _Access(reader, may_read)
    user = Annotated[Any, Depends(user_of)]
    _json_routes(app, access, user)
    _html_routes(app, access, user)
    # Mounted last, so a pipeline's own routes win; a mount skips the app's user check.
    app.mount("/static", _PublicFiles(directory=STATIC_DIR), name="static")
    return app


def error_page(exc: HTTPException) -> HTMLResponse:
    """A read that failed, said inside a page with its status (not as raw JSON)."""
    return HTMLResponse(render_index([], error=str(exc.detail)), status_code=exc.status_code)


def _data_docs_file(path: str, data: bytes, root_path: str) -> Response:
    """A file of a Data Docs site; a page loads GX's CDN assets from the UI's copies."""
    media = mimetypes.guess_type(path)[0] or "application/octet-stream"
    if media in ("text/html", "text/css"):  # GX's pages and the site's own stylesheet
        data = local_assets(data, root_path + DATA_DOCS_ASSETS)
    # GX's pages run scripts: sandboxed, so they never run as the Airflow UI's origin.
    headers = {"Content-Security-Policy": "sandbox allow-scripts allow-popups"}
    return Response(data, media_type=media, headers=headers)


class _PublicFiles(StaticFiles):
    """The static files, to any origin: a Data Docs page is sandboxed (an origin of its
    own), and a browser fetches the fonts its stylesheets name only when CORS allows."""

    async def get_response(self, path: str, scope: Any) -> Any:
        response = await super().get_response(path, scope)
        response.headers["Access-Control-Allow-Origin"] = "*"
        return response


def _json_routes(app: FastAPI, access: _Access, User: Any) -> None:
    reader, call = access.reader, access.call

    @app.get("/api/pipelines", response_model=list[PipelineEntry])
    async def list_pipelines(user: User) -> list[dict[str, Any]]:
        return await call(reader.pipelines, await access.readable(user))

    @app.get("/api/{pipeline}/checkpoints", response_model=CheckpointsPage)
    async def checkpoints(
        pipeline: str, user: User, before: Before = None, limit: Limit = HISTORY_LIMIT
    ) -> dict[str, Any]:
        await access.check_pipeline(user, pipeline)
        about, page = await call(reader.pipeline, pipeline, limit, before)
        return {**page, "overview": about["overview"], "config": about["config"]}

    @app.get("/api/{pipeline}/checkpoints/{checkpoint_id}", response_model=CheckpointDetailModel)
    async def checkpoint(pipeline: str, checkpoint_id: int, user: User) -> dict[str, Any]:
        await access.check_pipeline(user, pipeline)
        readable = await access.readable(user)
        return await call(reader.checkpoint, pipeline, checkpoint_id, readable)


def _html_routes(app: FastAPI, access: _Access, User: Any) -> None:
    reader, call = access.reader, access.call

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index(user: User) -> str:
        try:
            return render_index(await call(reader.pipelines, await access.readable(user)))
        except HTTPException as exc:
            return render_index([], error=str(exc.detail))

    _dag_routes(app, access, User)  # before /{pipeline}/...: a DAG's and a run's tabs
    sink_routes(app, access, User)

    @app.get("/{pipeline}", response_class=HTMLResponse, include_in_schema=False)
    async def pipeline_page(pipeline: str, user: User, before: Before = None) -> str:
        await access.check_pipeline(user, pipeline)
        paused = await asyncio.to_thread(reader.paused, pipeline)
        try:
            about, page = await call(reader.pipeline, pipeline, HISTORY_LIMIT, before, True)
            # read only when the page says what a paused checkpoint DAG does to them
            pending = (
                await call(reader.pending_deadlines, pipeline)
                if dag_ids(pipeline)["checkpoint"] in paused
                else {}
            )
        except HTTPException as exc:
            return render_index([], error=str(exc.detail))
        return render_pipeline(about, page, about["config"], about["dags"], paused, pending)

    @app.get(
        "/{pipeline}/checkpoints/{checkpoint_id}",
        response_class=HTMLResponse,
        response_model=None,
        include_in_schema=False,
    )
    async def checkpoint_page_html(
        pipeline: str, checkpoint_id: int, user: User
    ) -> str | HTMLResponse:
        await access.check_pipeline(user, pipeline)
        readable = await access.readable(user)
        try:
            detail = await call(reader.checkpoint, pipeline, checkpoint_id, readable)
        except HTTPException as exc:  # said in the page, as the pipeline's page does
            return error_page(exc)
        paused = await asyncio.to_thread(reader.paused, pipeline)
        downstream = await asyncio.to_thread(reader.downstream, pipeline)
        return render_checkpoint(pipeline, detail, dag_ids(pipeline), paused, downstream)

    _data_docs_route(app, access, User)


def _data_docs_route(app: FastAPI, access: _Access, User: Any) -> None:
    @app.get(
        "/{pipeline}/checkpoints/{checkpoint_id}/data-docs/{path:path}",
        response_class=Response,
        include_in_schema=False,
    )
    async def data_docs(
        pipeline: str, checkpoint_id: int, path: str, user: User, request: Request
    ) -> Response:
        await access.check_pipeline(user, pipeline)
        # A key, not a file path: nothing that climbs out of the site's folder.
        parts = path.split("/")
        if "" in parts or "." in parts or ".." in parts or "\\" in path:
            raise HTTPException(status_code=404, detail=f"no Data Docs file {path!r}")
        data = await access.call(access.reader.data_docs, pipeline, checkpoint_id, path)
        if data is None:
            raise HTTPException(status_code=404, detail=f"no Data Docs file {path!r}")
        return _data_docs_file(path, data, request.scope.get("root_path", ""))


def _dag_routes(app: FastAPI, access: _Access, User: Any) -> None:
    reader, call = access.reader, access.call

    @app.get("/dag/{dag_id}", response_model=None, include_in_schema=False)
    async def dag_tab(dag_id: str, user: User) -> RedirectResponse | HTMLResponse:
        """A DAG's pipeline's page, if it has one (the DAG tab is the React view)."""
        for name in await access.readable(user):
            if dag_id in dag_ids(name).values():
                # relative to .../batchpoint/dag/<dag_id>, like every link here
                return RedirectResponse(f"../{quote(name)}", status_code=307)
        text = f"DAG {dag_id!r} is not a DAG of a batchpoint pipeline you may read."
        return HTMLResponse(render_index([], error=text), status_code=404)

    @app.get("/dag/{dag_id}/runs/{run_id}", response_model=None, include_in_schema=False)
    async def run_tab(dag_id: str, run_id: str, user: User) -> RedirectResponse | HTMLResponse:
        """The checkpoint a DAG run triggered: the run's "Checkpoint" tab (plugin.py)."""
        for name in await access.readable(user):
            kind = _RUN_KINDS.get(next((k for k, d in dag_ids(name).items() if d == dag_id), ""))
            if kind is None:
                continue
            found = await call(reader.checkpoint_of_run, name, run_id, kind)
            if found is not None:  # relative to .../batchpoint/dag/<dag_id>/runs/<run_id>
                page = f"../../../{quote(name)}/checkpoints/{found}"
                return RedirectResponse(page, status_code=307)
            text = f"Run {run_id!r} of {dag_id} triggered no checkpoint (yet): {_NONE_YET}"
            return HTMLResponse(render_index([], error=text), status_code=404)
        text = f"DAG {dag_id!r} is not a checkpoint or savepoint DAG of a pipeline you may read."
        return HTMLResponse(render_index([], error=text), status_code=404)
