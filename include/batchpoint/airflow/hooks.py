"""Hooks: what talks to the outside world. `BatchpointHook` resolves the storage (an
Airflow AWS connection through the Amazon provider's AwsBaseHook, else the environment;
see storage_connection) and opens the core objects on it; a launcher
(`launcher_for`: `ConnectLauncher`, `SparkSubmitLauncher` or `LocalLauncher`, by
BATCHPOINT_SPARK_MODE) runs one operator's Spark job; `AirflowApiHook` calls Airflow's
public REST API (the only way a task can pause another DAG in Airflow 3).

The trigger imports this module inside the triggerer's event loop, so heavy imports
(pyarrow through the runtime, boto3 through the S3 store) happen lazily, in the calls that
need them, which the trigger runs in a thread."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from batchpoint.airflow.config import AirflowDeployment, package_root
from batchpoint.airflow.storage_connection import connection_url, settings_from_connection
from batchpoint.errors import ConfigError
from batchpoint.settings import Settings

if TYPE_CHECKING:
    from batchpoint.protocol.coordinator import CheckpointCoordinator
    from batchpoint.runtime.api import Pipeline
    from batchpoint.runtime.driver import PipelineDriver

__all__ = [
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
    def storage_conn_id(self) -> str:
        """The name this connection had before it was an `aws_conn_id`."""
        return self.aws_conn_id

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
        from batchpoint.protocol.coordinator import CheckpointCoordinator

        return CheckpointCoordinator(settings.store_ref.open(), pipeline, settings.checkpoint)


# -- Spark -------------------------------------------------------------------------------


#: The one line a Spark Connect client prints when its server cannot be reached
#: (batchpoint.spark.session.connect_session): worth a retry, unlike a bad setting.
UNREACHABLE = "is unreachable"


@dataclass
class SparkJobResult:
    returncode: int
    seconds: float
    tail: list[str]

    @property
    def killed(self) -> bool:
        return self.returncode < 0 or self.returncode in (137, 143)

    @property
    def unreachable(self) -> str | None:
        """The job's 'Spark Connect server at ... is unreachable' line, if it printed one."""
        for line in reversed(self.tail):
            if "Spark Connect server at" in line and UNREACHABLE in line:
                return line.removeprefix("error: ").strip()
        return None


class OperatorJobLauncher:
    """Runs one operator of one checkpoint as a child process (its `command`), streaming
    its output. The job gets the storage settings through BATCHPOINT_* variables, so
    credentials from a connection never appear on a command line. Exit codes: 0 acked,
    2 configuration (or, over Connect, the server unreachable), 3 the operator failed
    and declined."""

    mode = ""

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
        log(f"checkpoint {checkpoint_id}, attempt {attempt} ({self.mode} mode): {' '.join(argv)}")
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
            tail.append(line)
            log(line)
        returncode = self._process.wait()
        self._process = None
        return SparkJobResult(returncode, time.monotonic() - started, list(tail))

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

    mode = "submit"

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

    mode = "local"

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

    mode = "connect"

    def __init__(self, deployment: AirflowDeployment, pipeline_ref: str) -> None:
        super().__init__(deployment, pipeline_ref)
        self._here: tuple[Any, int, str] | None = None  # (runner, checkpoint, operator)
        self._stopped_here = False

    def runs_here(self) -> bool:
        """Whether the client can run in this process (see the class)."""
        if self.deployment.connect_client == "subprocess":
            return False
        from batchpoint.runtime.faults import kills_the_process
        from batchpoint.spark.session import classic_spark_running

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
        if not self.runs_here():
            return super().launch(settings, checkpoint_id, operator, attempt, log)
        import traceback

        from batchpoint.jobs.run_operator import run_job

        log(
            f"checkpoint {checkpoint_id}, attempt {attempt} (connect mode, a client in this "
            f"process): {self.remote}"
        )
        started = time.monotonic()
        tail: deque[str] = deque(maxlen=40)

        def line(text: str) -> None:
            tail.append(text)
            log(text)

        def started_runner(runner: Any, checkpoint: int, name: str) -> None:
            self._here = (runner, checkpoint, name)

        try:
            code = run_job(
                self.pipeline_ref,
                checkpoint_id,
                operator,
                settings,
                remote=self.remote,
                attempt=attempt,
                log=lambda text: line(f"[{operator}] {text}"),
                error=line,
                on_start=started_runner,
            )
        except Exception as exc:  # a bug, not the operator's verdict: as a child that died
            for text in traceback.format_exc().rstrip().splitlines():
                line(text)
            line(f"error: {type(exc).__name__}: {exc}")
            code = 1
        finally:
            self._here = None
        return SparkJobResult(code, time.monotonic() - started, list(tail))

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

    @property
    def remote(self) -> str:
        remote = self.deployment.spark_remote
        if not remote:
            raise ConfigError("BATCHPOINT_SPARK_REMOTE is not set")
        return remote

    def command(
        self, settings: Settings, checkpoint_id: int, operator: str, attempt: str
    ) -> list[str]:
        return [
            sys.executable,
            "-m",
            JOB_MODULE,
            "--remote",
            self.remote,
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
        code = (
            "import sys\n"
            "from batchpoint.spark.remote import interrupt_attempt\n"
            "interrupt_attempt(sys.argv[1], sys.argv[2], sys.argv[3])\n"
        )
        try:
            done = subprocess.run(
                [sys.executable, "-c", code, self.remote, pipeline, tag],
                capture_output=True,
                text=True,
                timeout=60,
                env=self.environment(Settings.from_env()),
            )
        except (subprocess.TimeoutExpired, ConfigError) as exc:
            log(f"could not interrupt attempt {attempt} on {self.remote}: {exc}")
            return
        output = (done.stdout + done.stderr).strip().splitlines()
        log(
            f"interrupted attempt {attempt} on {self.remote}"
            if done.returncode == 0
            else f"could not interrupt attempt {attempt} on {self.remote}: "
            + (output[-1] if output else f"exit {done.returncode}")
        )


JOB_MODULE = "batchpoint.jobs.run_operator"

_LAUNCHERS: dict[str, type[OperatorJobLauncher]] = {
    "connect": ConnectLauncher,
    "submit": SparkSubmitLauncher,
    "local": LocalLauncher,
}


def launcher_for(deployment: AirflowDeployment, pipeline_ref: str) -> OperatorJobLauncher:
    """The launcher of the deployment's BATCHPOINT_SPARK_MODE."""
    return _LAUNCHERS[deployment.spark_mode](deployment, pipeline_ref)


# -- Airflow's REST API --------------------------------------------------------------------


class AirflowApiHook(BaseHook):
    """Airflow's public REST API with credentials from an http connection: host, port,
    schema (http/https), login and password of a user allowed to pause DAGs."""

    conn_name_attr = "api_conn_id"
    default_conn_name = "batchpoint_airflow_api"
    conn_type = "http"
    hook_name = "Airflow REST API (batchpoint)"

    def __init__(self, api_conn_id: str = default_conn_name, timeout: float = 15.0) -> None:
        super().__init__()
        self.api_conn_id = api_conn_id
        self.timeout = timeout

    def check_configured(self) -> None:
        """Raise ConfigError with how to configure it when the connection is missing."""
        self._connection()

    def _connection(self) -> Any:
        try:
            return self.get_connection(self.api_conn_id)
        except AirflowNotFoundException:
            raise ConfigError(
                f"stopping the pipeline needs the Airflow connection '{self.api_conn_id}' "
                "(type http: host and port of the Airflow API server, login and password of "
                "a user allowed to pause DAGs), e.g. AIRFLOW_CONN_"
                f'{self.api_conn_id.upper()}=\'{{"conn_type": "http", "host": '
                '"airflow-apiserver", "port": 8080, "login": "admin", "password": "..."}\' '
                "or Admin > Connections in the UI"
            ) from None

    def base_url(self, conn: Any | None = None) -> str:
        conn = conn or self._connection()
        if not conn.host:
            raise ConfigError(f"Airflow connection '{self.api_conn_id}' has no host")
        return connection_url(conn)

    def _headers(self, base: str, conn: Any) -> dict[str, str]:
        import httpx

        if not conn.login:
            return {}  # e.g. SimpleAuthManager with all users admin: no token needed
        response = httpx.post(
            f"{base}/auth/token",
            json={"username": conn.login, "password": conn.password or ""},
            timeout=self.timeout,
        )
        if response.status_code >= 400:
            raise ConfigError(
                f"Airflow API at {base} refused the credentials of connection "
                f"'{self.api_conn_id}': HTTP {response.status_code} {response.text[:200]}"
            )
        return {"Authorization": f"Bearer {response.json()['access_token']}"}

    def set_paused(self, dag_id: str, paused: bool = True) -> dict[str, Any]:
        import httpx

        conn = self._connection()
        base = self.base_url(conn)
        response = httpx.patch(
            f"{base}/api/v2/dags/{dag_id}",
            params={"update_mask": "is_paused"},
            json={"is_paused": paused},
            headers=self._headers(base, conn),
            timeout=self.timeout,
        )
        if response.status_code >= 400:
            raise ConfigError(
                f"Airflow API at {base} could not {'pause' if paused else 'unpause'} "
                f"'{dag_id}': HTTP {response.status_code} {response.text[:300]}"
            )
        body = response.json()
        return {"dag_id": body.get("dag_id", dag_id), "is_paused": body.get("is_paused")}
