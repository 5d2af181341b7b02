"""Fault injection for exactly-once tests: a task dies at a named point.

A killed task cannot be produced on demand at a precise protocol step, so tests set
BATCHPOINT_FAULT to `<operator>:<point>` or `<operator>:<point>:<checkpoint_id>`, and an
attempt with `InjectedFaults` as its hooks (runtime.task_hooks) calls `maybe_fail(...)`
at each point. Nothing happens unless the variable names this operator, point (and
checkpoint). The production runner has no hooks and never calls this module: the tests,
the soak and the demo install InjectedFaults, and so does the job entry point
(jobs/run_operator.py) when BATCHPOINT_FAULT is set.

BATCHPOINT_FAULT_MODE chooses how the task dies: `exit` (default) ends the process at
once like SIGKILL; `raise` throws InjectedKill, a BaseException that no cleanup code
catches, so an in-process test can "restart" the task without a new Spark session.

BATCHPOINT_FAULT_ONCE=<path> makes the fault fire once, across processes: the first
task to reach the point creates the file and dies, and later attempts (a scheduler's
retry) find the file and carry on. This is how a demo shows a retry recovering.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from batchpoint.spark.state_writer import SubtaskHooks

ENV = "BATCHPOINT_FAULT"
MODE_ENV = "BATCHPOINT_FAULT_MODE"
ONCE_ENV = "BATCHPOINT_FAULT_ONCE"

#: The points the runtime passes, in order.
POINTS = (
    "before-snapshot",  # input processed, nothing written
    "after-snapshot",  # state and output files written, no ack
    "after-ack",  # acknowledged, the job has not returned
    "spark-task",  # inside the first attempt of a Spark task writing files (Spark retries)
    "spark-pause",  # subtask 0 of a Spark write, before writing: waits for a release file
)
PAUSE_ENV = "BATCHPOINT_FAULT_PAUSE"


class InjectedKill(BaseException):
    """The task 'died': deliberately not an Exception, so no handler declines."""


def current_spec() -> str:
    return os.environ.get(ENV, "")


#: The points at which the job's own process dies (unless BATCHPOINT_FAULT_MODE=raise).
PROCESS_KILL_POINTS = frozenset(POINTS[:3])


def kills_the_process() -> bool:
    """Whether the fault injected now ends the job's process where it fires."""
    parts = current_spec().split(":")
    return (
        len(parts) >= 2
        and parts[1] in PROCESS_KILL_POINTS
        and os.environ.get(MODE_ENV, "exit") != "raise"
    )


def fault_matches(operator: str, point: str, checkpoint_id: int, spec: str | None = None) -> bool:
    spec = current_spec() if spec is None else spec
    if not spec:
        return False
    parts = spec.split(":")
    if len(parts) not in (2, 3) or parts[1] not in POINTS:
        raise ValueError(
            f"{ENV}={spec!r}: expected <operator>:<point>[:<checkpoint>], points {POINTS}"
        )
    if parts[0] != operator or parts[1] != point:
        return False
    return len(parts) == 2 or parts[2] == str(checkpoint_id)


def _first_time(marker: str) -> bool:
    try:
        # O_EXCL: of concurrent attempts exactly one creates the file.
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def maybe_fail(operator: str, point: str, checkpoint_id: int) -> None:
    if not fault_matches(operator, point, checkpoint_id):
        return
    marker = os.environ.get(ONCE_ENV)
    if marker and not _first_time(marker):
        return
    message = f"batchpoint: injected fault: {operator} dies at {point} of {checkpoint_id}"
    if os.environ.get(MODE_ENV, "exit") == "raise":
        raise InjectedKill(message)
    print(message, file=sys.stderr, flush=True)
    os._exit(137)  # like SIGKILL: no cleanup, no finally blocks


def _fail_first_attempt(
    operator: str, checkpoint_id: int, spec: str, subtask: int, task_attempt: str, handles: object
) -> None:
    """Runs in the Spark task after its files are uploaded: the first attempt of the
    task dies, so Spark retries it (a `local[n,retries]` master is needed)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    first = ctx is None or ctx.attemptNumber() == 0
    if first and fault_matches(operator, "spark-task", checkpoint_id, spec):
        raise RuntimeError(f"injected Spark task failure in {operator} subtask {subtask}")


def spark_task_fault(
    operator: str, checkpoint_id: int
) -> Callable[[int, str, object], None] | None:
    """The hook for keyed_io.write_keyed's `on_subtask_written` when BATCHPOINT_FAULT
    names this operator's `spark-task` point, else None. The spec is read here, on the
    driver, and travels with the hook: executors may not share the driver's environment."""
    spec = current_spec()
    if not fault_matches(operator, "spark-task", checkpoint_id, spec):
        return None
    return functools.partial(_fail_first_attempt, operator, checkpoint_id, spec)


def _pause_first_subtask(folder: str, subtask: int) -> None:
    """Runs in a Spark task before it writes: the first subtask 0 to get here (of the
    operator's writes, which run at once) says so (`reached`) and waits for `release`,
    so a test can kill the client while the server's job waits. Only one waits: a task
    slot each for every write would starve a small server."""
    if subtask != 0 or not _first_time(str(Path(folder, "held"))):
        return
    Path(folder, "reached").touch()
    deadline = time.monotonic() + 600
    while not Path(folder, "release").exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"injected pause in {folder} was never released")
        time.sleep(0.05)


def spark_task_pause(operator: str, checkpoint_id: int) -> Callable[[int], None] | None:
    """With BATCHPOINT_FAULT=<operator>:spark-pause[:<checkpoint>] and
    BATCHPOINT_FAULT_PAUSE=<folder>: the hook that holds subtask 0 of one of the
    operator's writes before it writes anything, until <folder>/release exists. Read on
    the driver (or Connect client) and shipped with the task."""
    folder = os.environ.get(PAUSE_ENV, "")
    if not folder or not fault_matches(operator, "spark-pause", checkpoint_id):
        return None
    return functools.partial(_pause_first_subtask, folder)


class InjectedFaults:
    """The attempt hooks (runtime.task_hooks.AttemptHooks) that inject the fault
    BATCHPOINT_FAULT names. The variable is read at each point, so a test may set it
    between two attempts of one runner."""

    def at(self, point: str, operator: str, checkpoint_id: int) -> None:
        maybe_fail(operator, point, checkpoint_id)

    def spark_tasks(self, operator: str, checkpoint_id: int) -> SubtaskHooks:
        from batchpoint.spark.state_writer import SubtaskHooks

        return SubtaskHooks(
            before=spark_task_pause(operator, checkpoint_id),
            after=spark_task_fault(operator, checkpoint_id),
        )


def faults_from_env() -> InjectedFaults | None:
    """InjectedFaults when BATCHPOINT_FAULT is set (a job told to die), else None."""
    return InjectedFaults() if current_spec() else None
