"""The entry a DAG file calls. A whole DAG file (in Airflow's dags folder):

    from batchpoint.airflow.dags import load_dags

    globals().update(load_dags())

gives, for each pipeline named by BATCHPOINT_PIPELINE_REF, its `<pipeline>_checkpoint`,
`<pipeline>_savepoint` and `<pipeline>_restore` DAGs (batchpoint.airflow.dag_factory).
"""

from __future__ import annotations

from typing import Any

from batchpoint.errors import ConfigError

__all__ = ["load_dags"]


def load_dags(env: Any = None) -> dict[str, Any]:
    """Every batchpoint DAG of the deployment described by `env` (default os.environ).
    A bad setting raises one ConfigError line naming it, not a walk through the
    factory's frames."""
    from batchpoint.airflow.config import AirflowDeployment
    from batchpoint.airflow.dag_factory import load_dags as build

    try:
        return build(AirflowDeployment.from_env(env))
    except ConfigError as exc:
        raise ConfigError(f"batchpoint DAGs not loaded: {exc}") from None
