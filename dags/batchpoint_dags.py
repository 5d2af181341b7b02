"""batchpoint DAGs: for each pipeline named by BATCHPOINT_PIPELINE_REF (default: the
`payments` demo), its `<pipeline>_checkpoint`, `<pipeline>_savepoint` and
`<pipeline>_restore` DAGs. Only wiring: see batchpoint.airflow.dag_factory."""

from __future__ import annotations

from batchpoint.airflow.dag_factory import load_dags
from batchpoint.errors import ConfigError

try:
    _dags = load_dags()
except ConfigError as exc:
    # One line naming the setting, instead of a traceback through the factory.
    raise ConfigError(f"batchpoint DAGs not loaded: {exc}") from None

globals().update(_dags)
