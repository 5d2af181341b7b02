"""What every batchpoint operator shares: which pipeline (by reference, so a worker can
import it), which storage connection, and the run's checkpoint id from the trigger task.
A configuration mistake fails the task without a retry, with the message naming it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException

from batchpoint.airflow.hooks import BatchpointHook, cached_pipeline
from batchpoint.airflow.sensors import checkpoint_id_from
from batchpoint.errors import ConfigError
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.settings import Settings

FAILED_STATES = ("failed",)


def params_of(context: Context) -> Mapping[str, Any]:
    return context.get("params") or {}


def template_flag(value: bool | str) -> bool:
    """A boolean argument that may be a rendered template ("True", "false")."""
    return value if isinstance(value, bool) else str(value).lower() == "true"


class BatchpointOperator(BaseOperator):
    ui_color = "#fff3d6"

    def __init__(
        self,
        *,
        pipeline_ref: str,
        storage_conn_id: str = "batchpoint_storage",
        trigger_task_id: str = "trigger",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pipeline_ref = pipeline_ref
        self.storage_conn_id = storage_conn_id
        self.trigger_task_id = trigger_task_id

    @property
    def hook(self) -> BatchpointHook:
        return BatchpointHook(self.storage_conn_id)

    def settings(self) -> Settings:
        try:
            return self.hook.get_settings()
        except ConfigError as exc:
            raise AirflowFailException(str(exc)) from None

    def driver(self, settings: Settings | None = None) -> PipelineDriver:
        try:
            return self.hook.driver(cached_pipeline(self.pipeline_ref), settings or self.settings())
        except ConfigError as exc:
            raise AirflowFailException(str(exc)) from None

    def checkpoint_id(self, context: Context) -> int | None:
        return checkpoint_id_from(context, self.trigger_task_id)

    def require_checkpoint_id(self, context: Context, what: str = "checkpoint") -> int:
        checkpoint_id = self.checkpoint_id(context)
        if checkpoint_id is None:
            raise AirflowFailException(f"task '{self.trigger_task_id}' started no {what}")
        return checkpoint_id

    def run_task_states(self, context: Context) -> dict[str, str]:
        """task_id -> state of this run's other tasks (through the execution API)."""
        ti = context["ti"]
        states = ti.get_task_states(dag_id=ti.dag_id, run_ids=[ti.run_id])
        run_states = states.get(ti.run_id) or {}
        return {k: str(getattr(v, "value", v)) for k, v in run_states.items()}
