"""The savepoint DAG's own operators: its trigger (never refused by min-pause or
max-concurrent), the export of the completed savepoint, and stop-with-savepoint."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator, Context

from batchpoint.airflow.compat import AirflowFailException, AirflowSkipException
from batchpoint.airflow.hooks import AirflowApiHook
from batchpoint.airflow.links import CHECKPOINT_LINKS
from batchpoint.airflow.operators.base import BatchpointOperator, params_of, template_flag
from batchpoint.airflow.operators.checkpoint import TriggerCheckpointOperator
from batchpoint.errors import BatchpointError, ConfigError
from batchpoint.ops.savepoints import check_target, export
from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointType
from batchpoint.protocol.properties import CheckpointProperties


class TriggerSavepointOperator(TriggerCheckpointOperator):
    """A savepoint: never refused by min-pause or max-concurrent, retained for ever.
    When the form asks to stop the pipeline afterwards, the API connection is checked
    first, so a missing connection fails the run before any work is done."""

    checkpoint_type = CheckpointType.SAVEPOINT
    # Asked for by hand: every refusal fails the run (a stopped pipeline: `batchpoint
    # resume` first), never a green run with no savepoint.
    fails_on = tuple(CheckpointFailureReason)

    def __init__(self, *, api_conn_id: str = "batchpoint_airflow_api", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.api_conn_id = api_conn_id

    def properties(self, context: Context) -> CheckpointProperties:
        """The savepoint's properties from the run's form; a value of the wrong type is
        refused here, naming it, before anything is triggered."""
        params = params_of(context)
        return CheckpointProperties.of(
            {
                "description": params.get("description") or "",
                "target": params.get("target") or "",
                "stop_pipeline": bool(params.get("stop_pipeline")),
            }
        )

    def execute(self, context: Context) -> dict[str, Any]:
        params = params_of(context)
        if params.get("stop_pipeline"):
            try:
                AirflowApiHook(self.api_conn_id).check_configured()
            except ConfigError as exc:
                raise AirflowFailException(str(exc)) from None
        settings = self.settings()
        try:  # before anything is triggered: refused at the export, the run did it for naught
            check_target(
                self.driver(settings).coordinator,
                params.get("target") or "",
                settings.store_options,
                settings.savepoint_roots,
            )
        except BatchpointError as exc:
            raise AirflowFailException(f"savepoint target: {exc}") from None
        return super().execute(context)


class ExportSavepointOperator(BatchpointOperator):
    """Copy the completed savepoint into its target folder with `_metadata`."""

    operator_extra_links = CHECKPOINT_LINKS

    template_fields = ("target", "description")

    def __init__(self, *, target: str = "", description: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.description = description

    def execute(self, context: Context) -> dict[str, Any]:
        checkpoint_id = self.require_checkpoint_id(context, "savepoint")
        settings = self.settings()
        try:
            result = export(
                self.driver(settings).coordinator,
                checkpoint_id,
                self.target,
                store_options=settings.store_options,
                description=self.description,
                roots=settings.savepoint_roots,
                progress=self.log.info,
            )
        except BatchpointError as exc:
            raise AirflowFailException(str(exc)) from None
        self.log.info("savepoint of checkpoint %s: %s", checkpoint_id, result.location)
        return {
            "checkpoint_id": checkpoint_id,
            "location": result.location,
            "files": result.files,
            "bytes": result.bytes,
        }


class PausePipelineOperator(BaseOperator):
    """Stop-with-savepoint, the scheduler's side: pause the pipeline's checkpoint DAG
    through the REST API, so the scheduler stops creating runs. The stop itself is the
    savepoint's, in the control record (protocol/stopping.py): its admission abandoned
    the checkpoints pending, and every trigger is refused (STOPPED) until `batchpoint
    resume` or a restore, whether the DAG is paused or not."""

    template_fields = ("stop",)

    def __init__(
        self,
        *,
        dag_to_pause: str,
        stop: bool | str = "{{ params.stop_pipeline }}",
        api_conn_id: str = "batchpoint_airflow_api",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.dag_to_pause = dag_to_pause
        self.stop = stop
        self.api_conn_id = api_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        if not template_flag(self.stop):
            raise AirflowSkipException("stop_pipeline was not asked for")
        try:
            result = AirflowApiHook(self.api_conn_id).set_paused(self.dag_to_pause, True)
        except ConfigError as exc:
            raise AirflowFailException(str(exc)) from None
        self.log.info("paused %s: %s", self.dag_to_pause, result)
        return result
