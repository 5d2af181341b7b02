"""Links between a checkpoint and the Airflow run that made it, both ways: the paths,
relative to the Airflow UI's base URL, of a checkpoint's DAG run, of its operator tasks'
logs (the try that acknowledged), and of the run's "Checkpoint" tab, where the plugin
shows the run's checkpoint inside Airflow's frame.

Nothing is recorded for them: a checkpoint's pending record names the run that
triggered it (`scheduler_run_id`, written by `ops.runs.trigger_for_run`); its type names
the DAG (a savepoint's run is the savepoint DAG's); the epoch plan names an operator's
task (`operators.<name>`); and an ack's attempt (`ops.runs.attempt_id`) names the try.
No Airflow import: the pages and the extra link (links.py) share these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from batchpoint.ops.epoch_plan import operator_task_id
from batchpoint.ops.runs import try_of_attempt
from batchpoint.protocol.layout import TaskId

#: The `url_route` of the DAG run's "Checkpoint" tab (plugin.py's external view).
RUN_TAB = "batchpoint_run"


def _segment(text: str) -> str:
    return quote(text, safe="")


def run_path(dag_id: str, run_id: str) -> str:
    """A DAG run's page in the Airflow UI."""
    return f"dags/{_segment(dag_id)}/runs/{_segment(run_id)}"


def checkpoint_tab_path(dag_id: str, run_id: str) -> str:
    """The run's "Checkpoint" tab: its checkpoint's page inside Airflow's frame."""
    return f"{run_path(dag_id, run_id)}/plugin/{RUN_TAB}"


def task_log_path(
    dag_id: str, run_id: str, task_id: str, try_number: int | None = None, map_index: int = -1
) -> str:
    """A task instance's page, which opens on its log; `try_number`: that try's log
    (None: the latest try's)."""
    path = f"{run_path(dag_id, run_id)}/tasks/{_segment(task_id)}"
    if map_index >= 0:
        path += f"/mapped/{map_index}"
    return path if try_number is None else f"{path}?try_number={try_number}"


def dag_of(checkpoint_type: str, dags: Mapping[str, str]) -> str:
    """The DAG whose runs trigger checkpoints of this type (`dag_names.dag_ids`)."""
    return dags["savepoint"] if checkpoint_type == "savepoint" else dags["checkpoint"]


def task_log_link(dag_id: str, run_id: str, task: str, attempt: str) -> dict[str, str] | None:
    """The log of the Airflow task (and try) whose attempt acknowledged the subtask
    `task` (``operator#subtask``), or None for a task name that is not one."""
    try:
        operator = TaskId.parse(task).operator
    except ValueError:
        return None
    tried = try_of_attempt(attempt, run_id)
    try_number, map_index = tried if tried is not None else (None, -1)
    task_id = str(operator_task_id(operator))
    text = f"log, try {try_number}" if try_number is not None else "log"
    return {"text": text, "href": task_log_path(dag_id, run_id, task_id, try_number, map_index)}


def run_links(detail: Mapping[str, Any], dags: Mapping[str, str], up: str) -> dict[str, Any]:
    """The checkpoint's run and its tasks' logs as links from a page `up` below the UI's
    base; `run` None when no Airflow run triggered it (the CLI, a local runner)."""
    run_id = detail.get("scheduler_run_id")
    if not run_id:
        return {"run": None, "logs": {}}
    dag_id = dag_of(detail["type"], dags)
    logs = {}
    for t in detail["tasks"]:
        link = task_log_link(dag_id, run_id, t["task"], t["attempt"])
        if link is not None:
            logs[t["task"]] = {**link, "href": up + link["href"]}
    run = {"dag_id": dag_id, "run_id": run_id, "href": up + run_path(dag_id, run_id)}
    return {"run": run, "logs": logs}
