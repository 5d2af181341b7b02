"""What batchpoint's operators, its ack sensor and its trigger share, as the Amazon
provider's tasks share one AwsBaseHook through `AwsBaseHookMixin`: the storage
connection (`aws_conn_id`, as every AWS-backed operator names it), one `BatchpointHook`
per task instance (cached: the connection is looked up once), the settings and the
coordinator it gives, and the checkpoint the run's trigger task started. A configuration
mistake fails the task without a retry, with the message naming it."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import Context

from batchpoint.airflow.compat import AirflowFailException
from batchpoint.airflow.hooks import BatchpointHook
from batchpoint.errors import ConfigError
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.settings import Settings

if TYPE_CHECKING:
    from batchpoint.protocol.checkpoint import AckRecord, PendingCheckpoint
    from batchpoint.runtime.api import Pipeline

log = logging.getLogger(__name__)


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
    learnt of the checkpoint (with its barrier); else the trigger task's XCom.
    `lineage_acks`: the checkpoint's acks, if execute has them; else, on completion,
    they are read (their files' rows and bytes are the outputs' statistics)."""

    pipeline_ref: str
    trigger_task_id: str
    settings: Callable[[], Settings]  # BatchpointTaskMixin's
    coordinator: Callable[[str], PipelineHistory]  # BatchpointTaskMixin's (reads only)
    lineage_checkpoint: dict[str, Any] | None = None
    lineage_acks: tuple[AckRecord, ...] | None = None

    @property
    def lineage_node(self) -> str | None:
        return None

    def _lineage(self, task_instance: Any, *, complete: bool = False) -> Any:
        from batchpoint.airflow.hooks import cached_pipeline
        from batchpoint.airflow.lineage import checkpoint_lineage

        checkpoint = self.lineage_checkpoint
        if checkpoint is None and task_instance is not None:
            found = task_instance.xcom_pull(task_ids=self.trigger_task_id)
            checkpoint = found if isinstance(found, dict) else None
        pipeline = cached_pipeline(self.pipeline_ref)
        published = complete and self.lineage_node is None
        return checkpoint_lineage(
            pipeline,
            self.settings().store_ref.uri,
            operator=self.lineage_node,
            checkpoint=checkpoint,
            acks=self._acks(pipeline.name, checkpoint) if complete else None,
            table_snapshots=self._snapshots(pipeline, checkpoint) if published else None,
        )

    def _snapshots(self, pipeline: Pipeline, checkpoint: dict[str, Any] | None) -> dict[str, int]:
        """The table sinks' snapshots of the published checkpoint; none when they cannot
        be read (the tables then go without a version)."""
        from batchpoint.airflow.lineage import table_snapshots

        checkpoint_id = (checkpoint or {}).get("checkpoint_id")
        if checkpoint_id is None or not any(s.table for s in pipeline.sinks.values()):
            return {}
        try:
            return table_snapshots(pipeline, self.settings().store_ref, int(checkpoint_id))
        except Exception as exc:  # any failure only drops the versions
            log.warning("lineage without table versions: %s", exc)
            return {}

    def _acks(self, pipeline: str, checkpoint: dict[str, Any] | None) -> list[AckRecord] | None:
        """The checkpoint's acks; None when they cannot be read (lineage goes without
        statistics rather than fail: the provider runs this after the task's work)."""
        if self.lineage_acks is not None:
            return list(self.lineage_acks)
        checkpoint_id = (checkpoint or {}).get("checkpoint_id")
        if checkpoint_id is None:
            return None
        try:
            return list(self.coordinator(pipeline).acks(int(checkpoint_id)).values())
        except Exception as exc:  # any failure only drops the statistics
            log.warning("lineage without output statistics: acks unread: %s", exc)
            return None

    def get_openlineage_facets_on_start(self) -> Any:
        return self._lineage(None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return self._lineage(task_instance, complete=True)

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
