"""An extra link on the checkpoint and savepoint DAGs' tasks: "Checkpoint", to the run's
"Checkpoint" tab, where the UI plugin shows the checkpoint the run's trigger task
started (its drill-down) inside Airflow's own frame, beside the run's tasks.

Airflow computes it when the task ends, in the worker, and keeps it in the task's XCom,
so the API server needs none of this code to show it. The link is relative to the UI's
base URL, as the plugin's own links are (ui_links.py)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperatorLink

from batchpoint.airflow.ui_links import checkpoint_tab_path


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
        # The tab finds the run's checkpoint by the run id its pending record holds.
        return checkpoint_tab_path(ti_key.dag_id, ti_key.run_id)


CHECKPOINT_LINKS = (CheckpointPageLink(),)
