"""What Airflow's providers manager learns about batchpoint (the
`apache_airflow_provider` entry point). The UI plugin is registered through its own
`airflow.plugins` entry point, not listed here, so Airflow loads it once."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

PACKAGE = "batchpoint"


def _version() -> str:
    try:
        return version(PACKAGE)
    except PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
        return "0+unknown"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": PACKAGE,
        "name": "batchpoint",
        "description": (
            "Flink-style checkpoints, savepoints and quality-gated restores for stateful "
            "PySpark batch pipelines: the checkpoint, savepoint and restore DAGs "
            "(`batchpoint.airflow.dags.load_dags`), their operators, sensor and trigger."
        ),
        "versions": [_version()],
        "operators": [
            {
                "integration-name": "batchpoint",
                "python-modules": [
                    "batchpoint.airflow.operators",
                    "batchpoint.airflow.dag_factory",
                ],
            }
        ],
        "sensors": [
            {"integration-name": "batchpoint", "python-modules": ["batchpoint.airflow.sensors"]}
        ],
        "triggers": [
            {"integration-name": "batchpoint", "python-modules": ["batchpoint.airflow.triggers"]}
        ],
        "hooks": [
            {"integration-name": "batchpoint", "python-modules": ["batchpoint.airflow.hooks"]}
        ],
    }
