"""Each task's output in the file Airflow's UI reads it from.

`dag.test()` runs a task in this process, without the supervisor that writes a worker's
task log, so its lines went only to the demo's airflow-tasks.log and the task log pages
of `./dev ui` were empty. `TaskLogFiles`, a listener of the task runner, sends this
process's output (and its children's: the Spark clients) to the task's file under
Airflow's base_log_folder, named by Airflow's own log_filename_template, from the moment
the task runs to the moment it stops; then copies that part into airflow-tasks.log,
which keeps the whole story in order.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

from airflow.listeners import hookimpl

from demo.airflow_env import output_to


class TaskLogFiles:
    """Registered with `airflow.sdk.listener.get_listener_manager().add_listener`."""

    def __init__(self, base_folder: Path) -> None:
        self.base_folder = base_folder
        self._redirect: contextlib.ExitStack | None = None
        self._current: tuple[Path, int] | None = None

    def path(self, task_instance: Any) -> Path:
        """Where Airflow's log reader looks for this try of the task."""
        from airflow.utils.helpers import log_filename_template_renderer

        name = log_filename_template_renderer()(
            ti=task_instance, try_number=task_instance.try_number
        )
        return self.base_folder / name

    @hookimpl
    def on_task_instance_running(self, previous_state: Any, task_instance: Any) -> None:
        self._stop()
        path = self.path(task_instance)
        path.parent.mkdir(parents=True, exist_ok=True)
        # A rescheduled sensor's next look appends to the same try's file.
        self._current = path, path.stat().st_size if path.exists() else 0
        self._redirect = contextlib.ExitStack()
        self._redirect.enter_context(output_to(path))

    @hookimpl
    def before_stopping(self, component: Any) -> None:
        self._stop()

    def _stop(self) -> None:
        if self._redirect is None or self._current is None:
            return
        self._redirect.close()
        self._redirect = None
        path, start = self._current
        self._current = None
        with path.open("rb") as written:
            written.seek(start)
            sys.stdout.buffer.write(written.read())  # back on airflow-tasks.log
        sys.stdout.flush()
