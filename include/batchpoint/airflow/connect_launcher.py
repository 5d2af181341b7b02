"""`ConnectLauncher`: an operator task as a thin Spark Connect client (no JVM anywhere
under the Airflow task); the Spark work runs on the server, shared by every task."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from batchpoint.airflow.config import AirflowDeployment
from batchpoint.airflow.launchers import JOB_MODULE, OperatorJobLauncher, SparkJobResult
from batchpoint.errors import ConfigError
from batchpoint.runtime.job_status import JobStatus
from batchpoint.settings import Settings, SparkMode
from batchpoint.storage.redaction import redact_uri


class ConnectLauncher(OperatorJobLauncher):
    """A thin Spark Connect client (no JVM anywhere under the Airflow task); the Spark
    work runs on the server, shared by every task.

    The client runs in the task's own process: a worker that runs several tasks in one
    process (dag.test(), the demo) imports pyspark's client and joins the pipeline's
    server session once, not once per task. A process that holds a classic Spark session
    (a test's) cannot open a Connect one, and one that opened a Connect session can no
    longer open a classic one (pyspark switches the whole process to Connect): there, with
    BATCHPOINT_CONNECT_CLIENT=subprocess, and while an injected fault is to kill the job's
    process (BATCHPOINT_FAULT), each task runs `python -m batchpoint.jobs.run_operator
    --remote sc://...` as a child instead."""

    mode = SparkMode.CONNECT

    def __init__(self, deployment: AirflowDeployment, pipeline_ref: str) -> None:
        super().__init__(deployment, pipeline_ref)
        self._here: tuple[Any, int, str] | None = None  # (runner, checkpoint, operator)
        self._stopped_here = False
        self._remote: str | None = None  # the server of the last launch

    def runs_here(self) -> bool:
        """Whether the client can run in this process (see the class)."""
        if self.deployment.connect_client == "subprocess":
            return False
        from batchpoint.runtime.faults import kills_the_process
        from batchpoint.spark.connect import classic_spark_running

        # An injected kill ends the job's process: not this one.
        return not classic_spark_running() and not kills_the_process()

    def launch(
        self,
        settings: Settings,
        checkpoint_id: int,
        operator: str,
        attempt: str,
        log: Callable[[str], None],
    ) -> SparkJobResult:
        remote = self._remote = self.remote_of(settings)
        settings = replace(settings, spark_remote=remote)
        if not self.runs_here():
            return super().launch(settings, checkpoint_id, operator, attempt, log)
        import traceback

        from batchpoint.jobs.run_operator import run_job

        log(
            f"checkpoint {checkpoint_id}, attempt {attempt} (connect mode, a client in this "
            f"process): {redact_uri(remote)}"
        )
        started = time.monotonic()
        tail: deque[str] = deque(maxlen=40)

        def line(text: str) -> None:
            tail.append(text)
            log(text)

        def started_runner(runner: Any, checkpoint: int, name: str) -> None:
            self._here = (runner, checkpoint, name)

        try:
            report = run_job(
                self.pipeline_ref,
                checkpoint_id,
                operator,
                settings,
                remote=remote,
                attempt=attempt,
                log=lambda text: line(f"[{operator}] {text}"),
                error=line,
                on_start=started_runner,
            )
        except Exception as exc:  # a bug, not the operator's verdict: as a child that died
            for text in traceback.format_exc().rstrip().splitlines():
                line(text)
            line(f"error: {type(exc).__name__}: {exc}")
            return SparkJobResult(JobStatus.DIED.exit_code, time.monotonic() - started, list(tail))
        finally:
            self._here = None
        line(report.line())  # as the job's process ends its output
        return SparkJobResult(report.exit_code, time.monotonic() - started, list(tail), report)

    def kill(self, grace: float = 10.0) -> None:
        here = self._here
        if here is None:
            super().kill(grace)
            return
        runner, checkpoint_id, operator = here
        self._stopped_here = True
        try:
            stopped = runner.interrupt(checkpoint_id, operator)
        except Exception as exc:  # the server gone too: nothing of it runs on
            runner.log(f"killed: could not interrupt its Spark operations: {exc}")
            return
        runner.log(f"killed: interrupted {len(stopped)} Spark operation(s)")

    def remote_of(self, settings: Settings) -> str:
        """The server: the task's (its Spark connection's, see spark_connection.py), else
        the deployment's BATCHPOINT_SPARK_REMOTE."""
        remote = settings.spark_remote or self.deployment.spark_remote
        if not remote:
            conn_id = self.deployment.spark_conn_id or "spark_connect_default"
            raise ConfigError(
                "no Spark Connect server: BATCHPOINT_SPARK_REMOTE is not set and there is no "
                f"spark_connect connection '{conn_id}' (BATCHPOINT_SPARK_CONN_ID)"
            )
        return remote

    def command(
        self, settings: Settings, checkpoint_id: int, operator: str, attempt: str
    ) -> list[str]:
        # The child reads the server from BATCHPOINT_SPARK_REMOTE (settings.as_env): a
        # token in it stays off the command line, which `ps` and the task's log show.
        return [
            sys.executable,
            "-m",
            JOB_MODULE,
            "--connect",
            *self._job_args(checkpoint_id, operator, attempt),
            "--attempt",
            attempt,
        ]

    def interrupt(
        self,
        pipeline: str,
        checkpoint_id: int,
        operator: str,
        attempt: str,
        log: Callable[[str], None],
    ) -> None:
        """Killing a Connect client does not stop its work on the server: interrupt the
        attempt's jobs by their tag, from a child process (see the class). The job does
        the same on SIGTERM; this covers a job that had to be SIGKILLed."""
        if self._stopped_here:
            return  # kill() interrupted the client of this process already
        from batchpoint.spark.remote import attempt_tag

        tag = attempt_tag(pipeline, checkpoint_id, operator, attempt)
        # The server through the environment, as the job gets it: no token on a command line.
        code = (
            "import os, sys\n"
            "from batchpoint.spark.remote import interrupt_attempt\n"
            "interrupt_attempt(os.environ['BATCHPOINT_SPARK_REMOTE'], *sys.argv[1:3])\n"
        )
        shown = redact_uri(self._remote or str(self.deployment.spark_remote))
        try:
            base = Settings.from_env()
            settings = replace(base, spark_remote=self._remote or base.spark_remote)
            done = subprocess.run(
                [sys.executable, "-c", code, pipeline, tag],
                capture_output=True,
                text=True,
                timeout=60,
                env=self.environment(settings),
            )
        except (subprocess.TimeoutExpired, ConfigError) as exc:
            log(f"could not interrupt attempt {attempt} on {shown}: {exc}")
            return
        output = (done.stdout + done.stderr).strip().splitlines()
        log(
            f"interrupted attempt {attempt} on {shown}"
            if done.returncode == 0
            else f"could not interrupt attempt {attempt} on {shown}: "
            + (output[-1] if output else f"exit {done.returncode}")
        )
