"""An extra link on the checkpoint and savepoint DAGs' tasks: "Checkpoint", to the page
of the checkpoint the run's trigger task started (the UI plugin's drill-down).

Airflow computes it when the task ends, in the worker, and keeps it in the task's XCom,
so the API server needs none of this code to show it. The link is relative to the UI's
base URL, as the plugin's own links are."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

from batchpoint.airflow.hooks import cached_pipeline


def checkpoint_page_path(pipeline: str, checkpoint_id: int) -> str:
    return f"batchpoint/{quote(pipeline)}/checkpoints/{checkpoint_id}"


class CheckpointPageLink(BaseOperatorLink):
    name = "Checkpoint"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        # At the end of a task `ti_key` is the running task instance, which can pull XCom.
        pull = getattr(ti_key, "xcom_pull", None)
        trigger_task_id = getattr(operator, "trigger_task_id", None)
        if pull is None or trigger_task_id is None:
            return ""
        value = pull(task_ids=trigger_task_id)
        if isinstance(value, dict):
            value = value.get("checkpoint_id")
        if value is None:
            return ""  # the run started no checkpoint: a disabled link
        pipeline = (
            getattr(operator, "pipeline", None) or cached_pipeline(operator.pipeline_ref).name
        )
        return checkpoint_page_path(pipeline, int(value))


CHECKPOINT_LINKS = (CheckpointPageLink(),)
