"""Launchers: how an operator task runs its pipeline operator's Spark job, by
BATCHPOINT_SPARK_MODE (`hooks.launcher_for`): `SparkSubmitLauncher` (a spark-submit per
task), `LocalLauncher` (a local Spark in a child process) and, in connect_launcher.py,
`ConnectLauncher` (a thin Spark Connect client). Each ends with a `SparkJobResult`
whose `status` is what the job said in its status line (runtime.job_status), or what
its exit code says when it died before it could."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from batchpoint.airflow.config import AirflowDeployment, package_root
from batchpoint.runtime.job_status import STATUS_PREFIX, JobReport, JobStatus
from batchpoint.settings import Settings, SparkMode
from batchpoint.storage.redaction import masked_argv

JOB_MODULE = "batchpoint.jobs.run_operator"


@dataclass
class SparkJobResult:
    """How a job ended: its exit code, time, last lines of output, and its status line
    (None: it printed none, killed or crashed before it could)."""

    returncode: int
    seconds: float
    tail: list[str]
    report: JobReport | None = None

    @property
    def status(self) -> JobStatus:
        if self.report is not None:
            return self.report.status
        return JobStatus.from_exit_code(self.returncode)

    @property
    def message(self) -> str:
        """What the job said about its end (empty without a status line)."""
        return self.report.message if self.report is not None else ""

    def output(self, lines: int = 15) -> str:
        """The last `lines` lines the job printed before its status line."""
        said = [line for line in self.tail if not line.startswith(STATUS_PREFIX)]
        return "\n".join(said[-lines:])


class OperatorJobLauncher:
    """Runs one operator of one checkpoint as a child process (its `command`), streaming
    its output. The job gets the storage settings through BATCHPOINT_* variables, so
    credentials from a connection never appear on a command line. How it ended is its
    status line (runtime.job_status), else its exit code."""

    mode: ClassVar[SparkMode]

    def __init__(self, deployment: AirflowDeployment, pipeline_ref: str) -> None:
        self.deployment = deployment
        self.pipeline_ref = pipeline_ref
        self._process: subprocess.Popen[str] | None = None

    def command(
        self, settings: Settings, checkpoint_id: int, operator: str, attempt: str
    ) -> list[str]:
        raise NotImplementedError

    def launch(
        self,
        settings: Settings,
        checkpoint_id: int,
        operator: str,
        attempt: str,
        log: Callable[[str], None],
    ) -> SparkJobResult:
        """Run the attempt to its end: the child process of `command`."""
        argv = self.command(settings, checkpoint_id, operator, attempt)
        # Shown masked: BATCHPOINT_SPARK_SUBMIT_ARGS may set credentials with --conf.
        shown = " ".join(masked_argv(argv))
        log(f"checkpoint {checkpoint_id}, attempt {attempt} ({self.mode} mode): {shown}")
        return self.run(argv, self.environment(settings), log)

    def _job_args(self, checkpoint_id: int, operator: str, attempt: str) -> list[str]:
        return [
            "--pipeline",
            self.pipeline_ref,
            "--checkpoint-id",
            str(checkpoint_id),
            "--operator",
            operator,
        ]

    def environment(
        self, settings: Settings, base: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env.update(settings.as_env())
        python = self.deployment.pyspark_python
        env["PYSPARK_PYTHON"] = python
        env["PYSPARK_DRIVER_PYTHON"] = python
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # The job imports batchpoint and the pipeline module; a deployment that mounts
        # include/ rather than installing the package still finds them.
        paths = [str(package_root()), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        from batchpoint.spark.session import CONNECT_CLIENT_VARIABLES

        # The Airflow worker's own settings mean nothing to the Spark job, nor does the
        # Connect switch a client left set in this worker's process (connect mode runs
        # clients in the task's process).
        for name in [k for k in env if k.startswith("AIRFLOW__DATABASE__")]:
            del env[name]
        for name in CONNECT_CLIENT_VARIABLES:
            env.pop(name, None)
        return env

    def run(
        self,
        argv: list[str],
        env: Mapping[str, str],
        log: Callable[[str], None],
        tail_lines: int = 40,
    ) -> SparkJobResult:
        """Run to the end, streaming every output line to `log`; the job runs in its own
        process group so `kill` stops it and whatever it started (a JVM, Python workers)."""
        started = time.monotonic()
        tail: deque[str] = deque(maxlen=tail_lines)
        report: JobReport | None = None
        self._process = subprocess.Popen(
            argv,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        assert self._process.stdout is not None
        for line in self._process.stdout:
            line = line.rstrip("\n")
            # Every line is looked at: a JVM may log its shutdown after the status line.
            report = JobReport.parse(line) or report
            tail.append(line)
            log(line)
        returncode = self._process.wait()
        self._process = None
        return SparkJobResult(returncode, time.monotonic() - started, list(tail), report)

    def kill(self, grace: float = 10.0) -> None:
        process = self._process
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def interrupt(
        self,
        pipeline: str,
        checkpoint_id: int,
        operator: str,
        attempt: str,
        log: Callable[[str], None],
    ) -> None:
        """Stop what the attempt still runs elsewhere (nothing, unless over Connect)."""


class SparkSubmitLauncher(OperatorJobLauncher):
    """`spark-submit <package>/jobs/run_operator.py ...`: a Spark application (a JVM,
    the driver) per operator task, on BATCHPOINT_SPARK_MASTER."""

    mode = SparkMode.SUBMIT

    def command(
        self, settings: Settings, checkpoint_id: int, operator: str, attempt: str
    ) -> list[str]:
        d = self.deployment
        return [
            d.spark_submit,
            "--master",
            settings.spark_master,
            "--name",
            f"batchpoint-{operator}-chk{checkpoint_id}",
            *d.spark_submit_args,
            d.spark_job,
            *self._job_args(checkpoint_id, operator, attempt),
            "--master",
            settings.spark_master,
            "--attempt",
            attempt,
        ]


class LocalLauncher(OperatorJobLauncher):
    """`python -m batchpoint.jobs.run_operator --master local[N]`: a local Spark of its
    own in a child process, no spark-submit (a machine without a Spark cluster or
    server)."""

    mode = SparkMode.LOCAL

    def command(
        self, settings: Settings, checkpoint_id: int, operator: str, attempt: str
    ) -> list[str]:
        return [
            self.deployment.pyspark_python,
            "-m",
            JOB_MODULE,
            *self._job_args(checkpoint_id, operator, attempt),
            "--master",
            settings.spark_master,
            "--attempt",
            attempt,
        ]
