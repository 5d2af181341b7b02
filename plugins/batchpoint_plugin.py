"""Adds batchpoint's checkpoint history to the Airflow UI (Browse → Checkpoints).
Only wiring: the app is batchpoint.airflow.ui."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from batchpoint.airflow.ui import URL_PREFIX, create_app


class BatchpointPlugin(AirflowPlugin):
    name = "batchpoint"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "batchpoint"}]
    external_views = [
        {
            "name": "Checkpoints",
            # Relative to the UI's base URL, so it works behind a proxy prefix too.
            "href": URL_PREFIX.lstrip("/") + "/",
            "destination": "nav",
            "category": "browse",
            "url_route": "batchpoint",
        }
    ]
