"""A local Spark Connect server: one warm Spark shared by every operator task of a run
(tests, the demo, `./dev ui`), each task a thin client that starts no JVM.

The server is the connect jar that ships in the pyspark distribution, run in the
foreground by spark-submit (not sbin's daemonizing script, whose process would escape
the process group). Its Python workers run this interpreter, so they import the same
batchpoint as the clients. It dies with its parent, even on SIGKILL
(devstack.processes).

A started server is warm (issue 28): once it listens, a warm-up job
(batchpoint.jobs.warm_up) runs the code paths of an operator's epoch, and its
Python workers fork from a daemon that has loaded their imports already
(batchpoint.spark.worker_daemon); given pipelines, it also opens each one's session
(the one all its operators join) and starts its Python workers (Spark keeps them per
session). It schedules FAIR, so that pipelines sharing it share its cores instead of
queueing job after job: each pipeline's session names its own pool
(batchpoint.spark.connect.pipeline_pool).

    python -m devstack.spark_connect --port 15002 [--pipeline module:attribute]
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

import batchpoint
from batchpoint.errors import BatchpointError
from batchpoint.spark.session import CONNECT_CLIENT_VARIABLES, LOCAL_DRIVER_CONF
from batchpoint.spark.session import DEFAULT_CONF as SESSION_DEFAULT_CONF
from devstack import PROJECT_ROOT
from devstack.processes import serve_in_foreground, start_group, stop_group
from devstack.seaweed import free_ports

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"

log = logging.getLogger(__name__)

#: Server-wide settings, each only where the caller's `conf` does not set it: what
#: batchpoint.spark.session gives a local classic session (so state files are the same
#: either way), driver included, as everything of a devstack server runs on this machine;
#: FAIR scheduling across the operators' pools; workers forked from a daemon that has
#: loaded their imports.
DEFAULT_CONF: dict[str, str] = {
    **SESSION_DEFAULT_CONF,
    **LOCAL_DRIVER_CONF,
    "spark.scheduler.mode": "FAIR",
    "spark.python.daemon.module": "batchpoint.spark.worker_daemon",
}

#: How long start() waits for the warm-up job before it gives up on it (the server
#: serves anyway, cold).
WARM_UP_TIMEOUT = 300.0


class SparkConnectError(BatchpointError):
    """The local Spark Connect server could not be started."""


def _worker_path() -> list[str]:
    """The workers' PYTHONPATH: the folder that holds the `batchpoint` package, and the
    project root, which holds this package (the workers' daemon) and the demo's pipelines."""
    return [str(Path(batchpoint.__file__).resolve().parent.parent), str(PROJECT_ROOT)]


class SparkConnectServer:
    """One Spark Connect server on 127.0.0.1 at `url` (``sc://127.0.0.1:PORT``)."""

    def __init__(
        self,
        workdir: Path | str,
        *,
        master: str = "local[2,2]",
        conf: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        startup_timeout: float = 180.0,
        warm_up: bool = True,
        pipelines: Sequence[str] = (),
    ) -> None:
        """`pipelines`: references (module:attribute) of pipelines whose operator
        sessions the warm-up (batchpoint.jobs.warm_up) opens and warms, at this
        server's `url`."""
        self.workdir = Path(workdir).absolute()
        self.master = master
        self.conf = {**DEFAULT_CONF, **(conf or {})}
        self.env = dict(env or {})
        self.host = "127.0.0.1"
        self.startup_timeout = startup_timeout
        self._fixed_port = port
        self.warm_up = warm_up
        self.pipelines = tuple(pipelines)
        #: Seconds the warm-up job took, None if it did not run or failed.
        self.warm_up_seconds: float | None = None
        self.port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise SparkConnectError("the Spark Connect server has not been started")
        return f"sc://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "spark-connect.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # -- lifecycle ----------------------------------------------------------------------

    def command(self) -> list[str]:
        spark_submit = Path(sys.executable).parent / "spark-submit"
        args = [
            str(spark_submit),
            "--class",
            SERVER_CLASS,
            "--name",
            f"batchpoint-connect-{self.port}",
            "--master",
            self.master,
            "--conf",
            f"spark.connect.grpc.binding.port={self.port}",
            "--conf",
            f"spark.connect.grpc.binding.address={self.host}",
        ]
        for key, value in self.conf.items():
            args += ["--conf", f"{key}={value}"]
        # No application file: the server class is on Spark's own class path.
        return [*args, "spark-internal"]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        # The client's Connect mode must not leak into the server's Python workers.
        for key in (*CONNECT_CLIENT_VARIABLES, "PYSPARK_SUBMIT_ARGS"):
            env.pop(key, None)
        path = env.get("PYTHONPATH", "")
        env.update(
            {
                "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable,
                "SPARK_LOCAL_IP": self.host,
                "PYTHONPATH": os.pathsep.join(p for p in (*_worker_path(), path) if p),
            }
        )
        env.update(self.env)
        return env

    def start(self) -> SparkConnectServer:
        if self.running():
            return self
        from batchpoint.spark.session import find_java

        find_java()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self._fixed_port or free_ports(1, self.host)[0]
        args = self.command()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the server
        self._log.write(f"\n=== {' '.join(args)}\n".encode())
        self._log.flush()
        self._process = start_group(args, log=self._log, cwd=self.workdir, env=self.environment())
        atexit.register(self.stop)
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        if self.warm_up:
            self._run_warm_up()
        return self

    def _run_warm_up(self) -> None:
        """The warm-up job (see the module), from a child process: this one may hold a
        classic Spark session. A failed warm-up leaves the server cold, not unusable: it
        is logged, and the first epoch pays as it would have."""
        env = {k: v for k, v in self.environment().items() if k != "MASTER"}
        scratch = self.workdir / "warm-up"
        started = time.monotonic()
        args = [
            sys.executable,
            "-m",
            "batchpoint.jobs.warm_up",
            self.url,
            *self.pipelines,
            "--scratch",
            str(scratch),
        ]
        try:
            done = subprocess.run(
                args, env=env, capture_output=True, text=True, timeout=WARM_UP_TIMEOUT
            )
        except subprocess.TimeoutExpired:
            log.warning("the Spark Connect server's warm-up took over %.0fs", WARM_UP_TIMEOUT)
            return
        if self._log is not None:
            self._log.write(f"=== warm-up (exit {done.returncode})\n".encode())
            self._log.write((done.stdout + done.stderr[-4000:]).encode())
            self._log.flush()
        if done.returncode != 0:
            log.warning("the Spark Connect server's warm-up failed (log: %s)", self.log_path)
            return
        self.warm_up_seconds = time.monotonic() - started

    def _wait_until_ready(self) -> None:
        """Ready means: the gRPC port accepts connections (the server binds it once its
        SparkContext is up)."""
        assert self._process is not None and self.port is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise SparkConnectError(
                    f"the Spark Connect server exited with code {self._process.returncode} "
                    f"while starting (log: {self.log_path}):\n{self.log_tail()}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise SparkConnectError(
            f"the Spark Connect server did not listen on {self.url} within "
            f"{self.startup_timeout:.0f}s (log: {self.log_path}):\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 20.0) -> None:
        process, self._process = self._process, None
        if process is not None:
            stop_group(process, timeout)
        atexit.unregister(self.stop)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> SparkConnectServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devstack.spark_connect",
        description="Run a local Spark Connect server in the foreground until Ctrl-C.",
    )
    parser.add_argument("--port", type=int, default=None, help="default: a free port")
    parser.add_argument("--master", default="local[2,2]")
    parser.add_argument("--dir", type=Path, default=Path("."), help="where its log goes")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting"
    )
    parser.add_argument(
        "--pipeline",
        action="append",
        default=[],
        metavar="REF",
        help="a pipeline (module:attribute) whose session the warm-up opens",
    )
    args = parser.parse_args(argv)
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"error: --conf {item!r} is not KEY=VALUE", file=sys.stderr)
            return 2
        conf[key] = value
    server = SparkConnectServer(
        args.dir, master=args.master, conf=conf, port=args.port, pipelines=args.pipeline
    )
    return serve_in_foreground(
        server,
        lambda: (
            f"Spark Connect is serving at {server.url} (master {server.master})\n"
            f"  log: {server.log_path}\nCtrl-C to stop."
        ),
        server.running,
        lambda: server.log_path,
        (BatchpointError,),
    )


if __name__ == "__main__":
    raise SystemExit(main())
