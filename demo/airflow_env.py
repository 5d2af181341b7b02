"""Airflow for the demo: a SQLite metadata database in the demo's folder, the project's
dags/ and plugins/, and DAG runs through `dag.test()` (the scheduler's own task-running
code, in this process), with Airflow's and Spark's output sent to a log file so the
terminal shows the story and not thousands of log lines.

Airflow reads AIRFLOW_HOME and its database URL when it is first imported, so
`AirflowSetup.apply()` must run before anything imports `airflow`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from batchpoint.errors import ConfigError

T = TypeVar("T")

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def python_path(current: str | None) -> str:
    """`current` (a PYTHONPATH) with the project root first: the processes the demo starts
    (Airflow's, spark-submit jobs and their workers, the CLI) import its pipelines from
    there, as they are not in the installed batchpoint."""
    parts = [p for p in (current or "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys([str(PROJECT_ROOT), *parts]))


def project_folder(name: str) -> Path:
    folder = PROJECT_ROOT / name
    if not folder.is_dir():
        raise ConfigError(
            f"{folder} not found: the demo runs from a checkout of the project, "
            "beside its dags/ and plugins/"
        )
    return folder


@dataclass(frozen=True)
class AirflowSetup:
    """The environment of the demo's Airflow: everything `airflow standalone` needs to
    open the same database and DAGs later."""

    home: Path

    @property
    def log_folder(self) -> Path:
        """Airflow's base_log_folder: one file a task try, read by the UI's log pages."""
        return self.home / "logs"

    def environment(self) -> dict[str, str]:
        return {
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(project_folder("dags")),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(project_folder("plugins")),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            # Two cores: one task and one Spark job at a time is what fits.
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home}/airflow.db",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.log_folder),
        }

    def apply(self) -> None:
        if "airflow" in sys.modules:
            raise RuntimeError("Airflow was imported before the demo set AIRFLOW_HOME")
        self.home.mkdir(parents=True, exist_ok=True)
        os.environ.update(self.environment())

    def init_database(self) -> None:
        from airflow.utils.db import initdb

        initdb()


@dataclass
class TaskSummary:
    task_id: str
    state: str
    tries: int
    seconds: float | None


@dataclass
class DagRunSummary:
    dag_id: str
    run_id: str
    state: str
    seconds: float
    tasks: list[TaskSummary] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.state == "success"

    def task_states(self) -> dict[str, str]:
        return {t.task_id: t.state for t in self.tasks}

    def lines(self) -> list[str]:
        out = []
        for t in self.tasks:
            took = "" if t.seconds is None else f" {t.seconds:5.1f}s"
            tries = f"  (tries: {t.tries})" if t.tries > 1 else ""
            out.append(f"{t.task_id:<28} {t.state:<16}{took}{tries}")
        return out


@contextlib.contextmanager
def output_to(log_file: Path) -> Iterator[None]:
    """Send this process's stdout and stderr, and its children's, to `log_file`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_file, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


class DemoAirflow:
    """Runs the deployment's DAGs with dag.test(), one run at a time, their output in
    `log_file`; given `task_logs` (Airflow's base_log_folder), each task's output also
    in its own file there, where the UI's task log pages read it."""

    def __init__(self, log_file: Path, task_logs: Path | None = None) -> None:
        self.log_file = log_file
        self.task_logs = task_logs
        self._listening = False

    def _log_each_task(self) -> None:
        if self._listening or self.task_logs is None:
            return
        from airflow.sdk.listener import get_listener_manager

        from demo.task_logs import TaskLogFiles

        get_listener_manager().add_listener(TaskLogFiles(self.task_logs))
        self._listening = True

    def quietly(self, fn: Callable[[], T]) -> T:
        with output_to(self.log_file):
            return fn()

    def dags(self) -> dict[str, Any]:
        from batchpoint.airflow.config import AirflowDeployment
        from batchpoint.airflow.dag_factory import load_dags

        # Built from the environment each time: a changed BATCHPOINT_PIPELINE_REF is a
        # deploy of new code, as a dag-processor would pick it up.
        return load_dags(AirflowDeployment.from_env())

    def run(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> DagRunSummary:
        dag = self.dags()[dag_id]
        self._log_each_task()
        started = time.monotonic()
        with output_to(self.log_file):
            run = dag.test(run_conf=dict(conf or {}))
        tasks = sorted(
            run.get_task_instances(),
            key=lambda ti: (ti.start_date is None, ti.start_date or 0, ti.task_id),
        )
        return DagRunSummary(
            dag_id,
            run.run_id,
            str(run.state),
            time.monotonic() - started,
            [
                TaskSummary(
                    ti.task_id,
                    str(ti.state),
                    ti.try_number or 0,
                    ti.duration,
                )
                for ti in tasks
            ],
        )
