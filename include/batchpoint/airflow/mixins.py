"""What batchpoint's operators, its ack sensor and its trigger share, as the Amazon
provider's tasks share one AwsBaseHook through `AwsBaseHookMixin`: the storage
connection (`aws_conn_id`, as every AWS-backed operator names it), one `BatchpointHook`
per task instance (cached: the connection is looked up once), the settings and the
coordinator it gives, and the checkpoint the run's trigger task started. A configuration
mistake fails the task without a retry, with the message naming it."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import Context

from batchpoint.airflow.compat import AirflowFailException
from batchpoint.airflow.hooks import BatchpointHook
from batchpoint.errors import ConfigError
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.settings import Settings

if TYPE_CHECKING:
    from batchpoint.protocol.checkpoint import PendingCheckpoint


def checkpoint_id_from(context: Context, trigger_task_id: str) -> int | None:
    """The checkpoint the run's trigger task started (its XCom), if it started one."""
    value = context["ti"].xcom_pull(task_ids=trigger_task_id)
    if isinstance(value, dict):
        value = value.get("checkpoint_id")
    return None if value is None else int(value)


def storage_conn_id_of(aws_conn_id: str | None, storage_conn_id: str | None, owner: str) -> str:
    """The storage connection from `aws_conn_id`, or from its old name `storage_conn_id`
    (deprecated: a warning, as the Amazon provider warns for a renamed argument; a plain
    DeprecationWarning, as its AirflowProviderDeprecationWarning is no Task SDK API)."""
    if storage_conn_id is None:
        return BatchpointHook.default_conn_name if aws_conn_id is None else aws_conn_id
    warnings.warn(
        f"{owner}: storage_conn_id is deprecated, use aws_conn_id (the same connection)",
        DeprecationWarning,
        stacklevel=3,
    )
    if aws_conn_id is not None and aws_conn_id != storage_conn_id:
        raise ValueError(
            f"{owner}: aws_conn_id={aws_conn_id!r} and its deprecated alias "
            f"storage_conn_id={storage_conn_id!r} disagree: give aws_conn_id only"
        )
    return storage_conn_id


class BatchpointHookMixin:
    """One cached `hook` for anything with an `aws_conn_id` (the trigger too)."""

    aws_conn_id: str

    @cached_property
    def hook(self) -> BatchpointHook:
        return BatchpointHook(self.aws_conn_id)

    @property
    def storage_conn_id(self) -> str:
        """The old name of `aws_conn_id`, still readable."""
        return self.aws_conn_id


class BatchpointTaskMixin(BatchpointHookMixin):
    """For operators and sensors: placed before the Airflow base class, it takes the
    connection arguments every batchpoint task has and passes the rest on."""

    def __init__(
        self,
        *,
        aws_conn_id: str | None = None,
        storage_conn_id: str | None = None,
        trigger_task_id: str = "trigger",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.aws_conn_id = storage_conn_id_of(aws_conn_id, storage_conn_id, type(self).__name__)
        self.trigger_task_id = trigger_task_id

    def settings(self) -> Settings:
        try:
            return self.hook.get_settings()
        except ConfigError as exc:
            raise AirflowFailException(str(exc)) from None

    def coordinator(self, pipeline: str, settings: Settings | None = None) -> CheckpointCoordinator:
        return self.hook.coordinator(pipeline, settings or self.settings())

    def checkpoint_id(self, context: Context) -> int | None:
        return checkpoint_id_from(context, self.trigger_task_id)

    def require_checkpoint_id(self, context: Context, what: str = "checkpoint") -> int:
        checkpoint_id = self.checkpoint_id(context)
        if checkpoint_id is None:
            raise AirflowFailException(f"task '{self.trigger_task_id}' started no {what}")
        return checkpoint_id


class LineageMixin:
    """OpenLineage's operator hooks (the provider calls them when it is installed and
    configured; see batchpoint.airflow.lineage, imported only here, so that batchpoint
    works without the provider). `lineage_node`: the pipeline node the task runs (None:
    the whole checkpoint, as finalize publishes it). `lineage_checkpoint`: what execute
    learnt of the checkpoint (with its barrier); else the trigger task's XCom."""

    pipeline_ref: str
    trigger_task_id: str
    settings: Callable[[], Settings]  # BatchpointTaskMixin's
    lineage_checkpoint: dict[str, Any] | None = None

    @property
    def lineage_node(self) -> str | None:
        return None

    def _lineage(self, task_instance: Any) -> Any:
        from batchpoint.airflow.hooks import cached_pipeline
        from batchpoint.airflow.lineage import checkpoint_lineage

        checkpoint = self.lineage_checkpoint
        if checkpoint is None and task_instance is not None:
            found = task_instance.xcom_pull(task_ids=self.trigger_task_id)
            checkpoint = found if isinstance(found, dict) else None
        return checkpoint_lineage(
            cached_pipeline(self.pipeline_ref),
            self.settings().store_ref.uri,
            operator=self.lineage_node,
            checkpoint=checkpoint,
        )

    def get_openlineage_facets_on_start(self) -> Any:
        return self._lineage(None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return self._lineage(task_instance)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return self._lineage(task_instance)


def lineage_facts(pending: PendingCheckpoint) -> dict[str, Any]:
    """What lineage reports of a checkpoint: the trigger's XCom fields and the barrier."""
    return {
        "checkpoint_id": pending.checkpoint_id,
        "type": pending.type.value,
        "base_checkpoint_id": pending.base_checkpoint_id,
        "barrier": dict(pending.barrier),
    }
