"""The Airflow UI plugin: Browse -> Checkpoints, a Checkpoints tab on the DAG pages and
a Checkpoint tab on the DAG runs' pages (the app is batchpoint.airflow.ui; the DAG's tab
is a React view built from ui/). An installed batchpoint registers it through the
`airflow.plugins` entry point; a checkout mounted without installing uses
plugins/batchpoint_plugin.py, which defers to the entry point when there is one (Airflow
refuses a second plugin of the same name).

Airflow 3.0 serves the app (its pages at URL_PREFIX) but has neither `external_views` nor
`react_apps` (3.1): there the Browse -> Checkpoints entry and the tabs do not show."""

from __future__ import annotations

from importlib.metadata import entry_points

from batchpoint.airflow.compat import AirflowPlugin
from batchpoint.airflow.ui import TAB_BUNDLE, URL_PREFIX, create_app
from batchpoint.airflow.ui_links import RUN_TAB

ENTRY_POINT = "batchpoint.airflow.plugin:BatchpointPlugin"


class BatchpointPlugin(AirflowPlugin):
    name = "batchpoint"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "batchpoint"}]
    # Browse -> Checkpoints: the server-rendered pages in an iframe of the UI, in
    # Airflow's look (ui_theme.py).
    external_views = [
        {
            "name": "Checkpoints",
            # Relative to the UI's base URL, so it works behind a proxy prefix too.
            "href": URL_PREFIX.lstrip("/") + "/",
            "destination": "nav",
            "category": "browse",
            "url_route": "batchpoint",
        },
        # A "Checkpoint" tab on every DAG run's page: the checkpoint the run triggered,
        # inside the UI's frame (the tasks' "Checkpoint" extra link opens it; links.py).
        # Airflow puts the run's ids into the href; runs of other DAGs are told they
        # have none.
        {
            "name": "Checkpoint",
            "href": URL_PREFIX.lstrip("/") + "/dag/{DAG_ID}/runs/{RUN_ID}",
            "destination": "dag_run",
            "url_route": RUN_TAB,
        },
    ]
    # A "Checkpoints" tab on every DAG's page, drawn by the UI itself with its own React
    # and Chakra components: the bundle (built from ui/, served by the app) reads the JSON
    # API with the UI's session and links to the full pages above. Other DAGs' tabs say
    # they belong to no pipeline.
    react_apps = [
        {
            "name": "Checkpoints",
            "bundle_url": f"{URL_PREFIX.lstrip('/')}/{TAB_BUNDLE}",
            "destination": "dag",
            "url_route": "batchpoint_dag",
        },
    ]


def registered_by_entry_point() -> bool:
    """Whether the installed distribution already gives Airflow this plugin."""
    return any(ep.value == ENTRY_POINT for ep in entry_points(group="airflow.plugins"))
