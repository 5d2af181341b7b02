"""The Airflow UI plugin: Browse -> Checkpoints and a Checkpoints tab on the DAG pages
(the app is batchpoint.airflow.ui). An installed batchpoint registers it through the
`airflow.plugins` entry point; a checkout mounted without installing uses
plugins/batchpoint_plugin.py, which defers to the entry point when there is one (Airflow
refuses a second plugin of the same name)."""

from __future__ import annotations

from importlib.metadata import entry_points

from airflow.sdk.plugins_manager import AirflowPlugin

from batchpoint.airflow.ui import URL_PREFIX, create_app

ENTRY_POINT = "batchpoint.airflow.plugin:BatchpointPlugin"


class BatchpointPlugin(AirflowPlugin):
    name = "batchpoint"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "batchpoint"}]
    # Server-rendered pages in an iframe of the UI, in Airflow's look (ui_theme.py), rather
    # than `react_apps`: Airflow 3.3 imports a React plugin as a built JS bundle that
    # brings its own React, and this project has no npm toolchain to build one with.
    external_views = [
        {
            "name": "Checkpoints",
            # Relative to the UI's base URL, so it works behind a proxy prefix too.
            "href": URL_PREFIX.lstrip("/") + "/",
            "destination": "nav",
            "category": "browse",
            "url_route": "batchpoint",
        },
        {
            # A "Checkpoints" tab on every DAG's page; the app sends a pipeline's DAGs to
            # that pipeline's page and answers 404 for other DAGs.
            "name": "Checkpoints",
            "href": URL_PREFIX.lstrip("/") + "/dag/{DAG_ID}",
            "destination": "dag",
            "url_route": "batchpoint_dag",
        },
    ]


def registered_by_entry_point() -> bool:
    """Whether the installed distribution already gives Airflow this plugin."""
    return any(ep.value == ENTRY_POINT for ep in entry_points(group="airflow.plugins"))
