"""How bench_spark_modes.py times each operator job: a sitecustomize that counts the
job process's storage requests, wrappers around the launchers that time each job's
phases from its output lines and look for `java` under it, and the per-task rows."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

#: Loaded into the operator job's interpreter (PYTHONPATH): times botocore's HTTP sends
#: of the job's own process and prints the total at exit.
SITECUSTOMIZE = """
import sys
if "run_operator" in " ".join(getattr(sys, "orig_argv", [])):
    import atexit, importlib.abc, importlib.util, time
    _stats = [0, 0.0]

    def _patch(module):
        send = module.URLLib3Session.send
        def timed(self, request):
            started = time.perf_counter()
            try:
                return send(self, request)
            finally:
                _stats[0] += 1
                _stats[1] += time.perf_counter() - started
        module.URLLib3Session.send = timed

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "botocore.httpsession":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            loader = spec.loader
            exec_module = loader.exec_module
            def exec_and_patch(module):
                exec_module(module)
                _patch(module)
            loader.exec_module = exec_and_patch
            return spec

    sys.meta_path.insert(0, _Finder())
    atexit.register(lambda: print(f"[bench-storage] {_stats[0]} {_stats[1]:.3f}", flush=True))
"""


@dataclass
class JobTiming:
    operator: str
    called: float
    spawned: float = 0.0
    first_runner_line: float | None = None
    acks_line: float | None = None
    exited: float = 0.0
    storage_requests: int = 0
    storage_seconds: float = 0.0
    java_children: set[str] = field(default_factory=set)

    def saw(self, line: str) -> None:
        """Times the phases from one output line of the job."""
        now = time.monotonic()
        if line.startswith("[bench-storage]"):
            count, seconds = line.split()[1:3]
            self.storage_requests, self.storage_seconds = int(count), float(seconds)
        elif line.startswith(f"[{self.operator}]"):
            if self.first_runner_line is None:
                self.first_runner_line = now
            if ": acks " in line:
                self.acks_line = now


class JobRecorder:
    """Wraps the launchers' `run` (the real one runs) to time each job's phases from its
    output lines and to look for `java` among its child processes."""

    def __init__(self) -> None:
        self.jobs: list[JobTiming] = []

    def install(self) -> None:
        self._wrap_job_launcher()
        self._wrap_connect_launcher()

    def _wrap_job_launcher(self) -> None:
        """submit mode: the job is a process; a watcher looks for `java` under it."""
        import psutil

        from batchpoint.airflow import hooks

        real_run = hooks.OperatorJobLauncher.run
        recorder = self

        def run(self: Any, argv: list[str], env: Any, log: Any, tail_lines: int = 40) -> Any:
            operator = argv[argv.index("--operator") + 1]
            timing = JobTiming(operator, called=time.monotonic())
            recorder.jobs.append(timing)
            done = threading.Event()

            def watch() -> None:
                while not done.is_set():
                    process = self._process
                    if process is not None:
                        if not timing.spawned:
                            timing.spawned = time.monotonic()
                        try:
                            for child in psutil.Process(process.pid).children(recursive=True):
                                if "java" in child.name():
                                    timing.java_children.add(child.name())
                        except psutil.Error:
                            pass
                    done.wait(0.1)

            def record(line: str) -> None:
                timing.saw(line)
                log(line)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            try:
                return real_run(self, argv, env, record, tail_lines)
            finally:
                timing.exited = time.monotonic()
                done.set()
                watcher.join()

        hooks.OperatorJobLauncher.run = run  # type: ignore[method-assign]

    def _wrap_connect_launcher(self) -> None:
        """connect mode: the client runs in this process; a JVM would be a new `java`
        child of it."""
        import psutil

        from batchpoint.airflow import hooks

        real_launch = hooks.ConnectLauncher.launch
        recorder = self

        def launch(
            self: Any, settings: Any, checkpoint_id: int, operator: str, attempt: str, log: Any
        ) -> Any:
            if not self.runs_here():
                return real_launch(self, settings, checkpoint_id, operator, attempt, log)
            # The client in this process: its "connect" is the session (and, the first
            # time, the imports); a JVM would be a new java child of this process.
            me = psutil.Process()
            before = {c.pid for c in me.children(recursive=True) if "java" in c.name()}
            timing = JobTiming(operator, called=time.monotonic(), spawned=time.monotonic())
            recorder.jobs.append(timing)

            def record(line: str) -> None:
                timing.saw(line)
                log(line)

            try:
                return real_launch(self, settings, checkpoint_id, operator, attempt, record)
            finally:
                timing.exited = time.monotonic()
                timing.java_children = {
                    c.name()
                    for c in me.children(recursive=True)
                    if "java" in c.name() and c.pid not in before
                }

        hooks.ConnectLauncher.launch = launch  # type: ignore[method-assign]

    def take(self) -> list[JobTiming]:
        jobs, self.jobs = self.jobs, []
        return jobs


def task_rows(run: Any, jobs: list[JobTiming]) -> list[str]:
    tis = sorted(
        (ti for ti in run.get_task_instances() if ti.start_date is not None),
        key=lambda ti: ti.start_date,
    )
    by_operator = {j.operator: j for j in jobs}  # the last try of each
    rows = []
    previous_end = None
    for ti in tis:
        gap = (ti.start_date - previous_end).total_seconds() if previous_end else 0.0
        previous_end = ti.end_date or previous_end
        duration = ti.duration or 0.0
        job = by_operator.get(ti.task_id.removeprefix("operators."))
        if job is None or not ti.task_id.startswith("operators."):
            rows.append(f"    {ti.task_id:<24} {duration:6.1f}s  (start gap {gap:4.1f}s)")
            continue
        # the task's own time outside its job: settings, hook, connection, XCom
        in_task = duration - (job.exited - job.called)
        first = job.first_runner_line or job.exited
        acks = job.acks_line or job.exited
        rows.append(
            f"    {ti.task_id:<24} {duration:6.1f}s  start {gap + max(in_task, 0):4.1f}s"
            f"  connect {first - (job.spawned or job.called):5.1f}s"
            f"  work {acks - first:5.1f}s"
            f"  storage {job.storage_requests:4d} req {job.storage_seconds:5.2f}s"
            f"  rest {job.exited - acks:4.1f}s"
            f"  java child: {'yes' if job.java_children else 'no'}"
        )
    return rows
