"""The entry a DAG file calls. A whole DAG file (in Airflow's dags folder):

    from batchpoint.airflow.dags import load_dags

    globals().update(load_dags())

gives, for each pipeline named by BATCHPOINT_PIPELINE_REF, its `<pipeline>_checkpoint`,
`<pipeline>_savepoint` and `<pipeline>_restore` DAGs (batchpoint.airflow.dag_factory).

BATCHPOINT_PIPELINE_REF and BATCHPOINT_ROOT must both be set: the DAGs of a deployment
run on several machines (a dag-processor, a scheduler, workers, a triggerer), and a
default (the demo pipeline, a `.batchpoint` folder in each one's working directory) would
give each of them a pipeline and a store of its own. Without them nothing is built and the
import fails with one line naming them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from batchpoint.errors import ConfigError

__all__ = ["REQUIRED", "load_dags"]

#: What every Airflow component must be told alike.
REQUIRED = ("BATCHPOINT_PIPELINE_REF", "BATCHPOINT_ROOT")


def load_dags(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Every batchpoint DAG of the deployment described by `env` (default os.environ).
    A missing or bad setting raises one ConfigError line naming it, not a walk through
    the factory's frames."""
    from batchpoint.airflow.config import AirflowDeployment
    from batchpoint.airflow.dag_factory import load_dags as build

    given = os.environ if env is None else env
    missing = [name for name in REQUIRED if not str(given.get(name) or "").strip()]
    if missing:
        raise ConfigError(
            f"batchpoint DAGs not loaded: {' and '.join(missing)} not set; every Airflow "
            "component (dag-processor, scheduler, workers, triggerer) must be given the "
            "same pipeline (BATCHPOINT_PIPELINE_REF=module:attr) and storage root "
            "(BATCHPOINT_ROOT=s3://bucket/prefix), or each would build its own"
        )
    try:
        return build(AirflowDeployment.from_env(env))
    except ConfigError as exc:
        raise ConfigError(f"batchpoint DAGs not loaded: {exc}") from None
