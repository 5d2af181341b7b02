"""Hooks: what talks to the outside world. `BatchpointHook` resolves the storage (an
Airflow AWS connection through the Amazon provider's AwsBaseHook, else the environment;
see storage_connection) and opens the core objects on it; a launcher
(`launcher_for`: `ConnectLauncher`, `SparkSubmitLauncher` or `LocalLauncher`, by
BATCHPOINT_SPARK_MODE; launchers.py, connect_launcher.py) runs one operator's Spark job;
`AirflowApiHook` (api_hook.py) calls Airflow's public REST API. Their names are all
importable from here.

The trigger imports this module inside the triggerer's event loop, so heavy imports
(pyarrow through the runtime, boto3 through the S3 store) happen lazily, in the calls that
need them, which the trigger runs in a thread."""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING

from batchpoint.airflow.api_hook import AirflowApiHook
from batchpoint.airflow.compat import AirflowNotFoundException, BaseHook
from batchpoint.airflow.config import AirflowDeployment
from batchpoint.airflow.connect_launcher import ConnectLauncher
from batchpoint.airflow.launchers import (
    JOB_MODULE,
    LocalLauncher,
    OperatorJobLauncher,
    SparkJobResult,
    SparkSubmitLauncher,
)
from batchpoint.airflow.storage_connection import settings_from_connection
from batchpoint.settings import Settings, SparkMode

if TYPE_CHECKING:
    from batchpoint.protocol.coordinator import CheckpointCoordinator
    from batchpoint.runtime.api import Pipeline
    from batchpoint.runtime.driver import PipelineDriver

__all__ = [
    "JOB_MODULE",
    "AirflowApiHook",
    "BatchpointHook",
    "ConnectLauncher",
    "LocalLauncher",
    "OperatorJobLauncher",
    "SparkJobResult",
    "SparkSubmitLauncher",
    "cached_pipeline",
    "launcher_for",
    "settings_from_connection",
]


@functools.lru_cache(maxsize=16)
def cached_pipeline(reference: str) -> Pipeline:
    """Tasks of one worker process share the imported pipeline definition."""
    from batchpoint.runtime.loader import load_pipeline

    return load_pipeline(reference)


class BatchpointHook(BaseHook):
    """Storage for batchpoint tasks, sensors and triggers, from the AWS connection
    `aws_conn_id` (roles, profiles and the standard chain resolved by AwsBaseHook). The
    connection is optional: without it every setting comes from BATCHPOINT_* variables."""

    conn_name_attr = "aws_conn_id"
    default_conn_name = "batchpoint_storage"
    conn_type = "aws"
    hook_name = "batchpoint storage"

    def __init__(
        self, aws_conn_id: str = default_conn_name, base_settings: Settings | None = None
    ) -> None:
        super().__init__()
        self.aws_conn_id = aws_conn_id
        self._base = base_settings

    @property
    def base_settings(self) -> Settings:
        return self._base or Settings.from_env()

    def get_settings(self) -> Settings:
        try:
            conn = self.get_connection(self.aws_conn_id)
        except AirflowNotFoundException:
            return self.base_settings
        return settings_from_connection(conn, self.base_settings, self.aws_conn_id)

    async def aget_settings(self) -> Settings:
        """For triggers: nothing here may block the triggerer's event loop."""
        try:
            conn = await self.aget_connection(self.aws_conn_id)
        except AirflowNotFoundException:
            return self.base_settings
        return await asyncio.to_thread(
            settings_from_connection, conn, self.base_settings, self.aws_conn_id
        )

    def driver(self, pipeline: Pipeline, settings: Settings | None = None) -> PipelineDriver:
        from batchpoint.runtime.driver import PipelineDriver

        settings = settings or self.get_settings()
        return PipelineDriver(pipeline, settings.store_ref, settings.checkpoint)

    @staticmethod
    def coordinator(pipeline: str, settings: Settings) -> CheckpointCoordinator:
        from batchpoint.ops.pipelines import stored_coordinator

        return stored_coordinator(settings.store_ref.open(), pipeline, settings)


# -- Spark -------------------------------------------------------------------------------

_LAUNCHERS: dict[SparkMode, type[OperatorJobLauncher]] = {
    launcher.mode: launcher for launcher in (ConnectLauncher, SparkSubmitLauncher, LocalLauncher)
}


def launcher_for(deployment: AirflowDeployment, pipeline_ref: str) -> OperatorJobLauncher:
    """The launcher of the deployment's BATCHPOINT_SPARK_MODE."""
    return _LAUNCHERS[SparkMode(deployment.spark_mode)](deployment, pipeline_ref)
