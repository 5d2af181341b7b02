"""What every batchpoint operator shares: which pipeline (by reference, so a worker can
import it); the storage connection, its cached hook and the run's checkpoint id come from
`BatchpointTaskMixin`, which the ack sensor shares. A configuration mistake fails the
task without a retry, with the message naming it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseOperator, Context

from batchpoint.airflow.compat import AirflowFailException
from batchpoint.airflow.hooks import cached_pipeline
from batchpoint.airflow.mixins import BatchpointTaskMixin
from batchpoint.errors import ConfigError
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.settings import Settings

FAILED_STATES = ("failed",)


def params_of(context: Context) -> Mapping[str, Any]:
    return context.get("params") or {}


def template_flag(value: bool | str) -> bool:
    """A boolean argument that may be a rendered template ("True", "false")."""
    return value if isinstance(value, bool) else str(value).lower() == "true"


class BatchpointOperator(BatchpointTaskMixin, BaseOperator):
    ui_color = "#fff3d6"

    def __init__(self, *, pipeline_ref: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline_ref = pipeline_ref

    def driver(self, settings: Settings | None = None) -> PipelineDriver:
        try:
            return self.hook.driver(cached_pipeline(self.pipeline_ref), settings or self.settings())
        except ConfigError as exc:
            raise AirflowFailException(str(exc)) from None

    def run_task_states(self, context: Context) -> dict[str, str]:
        """task_id -> state of this run's other tasks (through the execution API)."""
        ti = context["ti"]
        states = ti.get_task_states(dag_id=ti.dag_id, run_ids=[ti.run_id])
        run_states = states.get(ti.run_id) or {}
        return {k: str(getattr(v, "value", v)) for k, v in run_states.items()}
