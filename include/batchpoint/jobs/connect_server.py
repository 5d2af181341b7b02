"""A deployment's Spark Connect server, warm before its first epoch: the compose file's
spark-connect service runs it, and its restart policy runs it again after every crash.

    python -m batchpoint.jobs.connect_server [SPARK-SUBMIT OPTION ...]

It runs ``spark-submit --class SparkConnectServer OPTIONS spark-internal`` as its child,
and once the server listens (spark.connect.grpc.binding.port, 15002 unless an option
sets it) it runs the warm-up (batchpoint.jobs.warm_up) against it in a child of its
own: it joins the session of each pipeline that BATCHPOINT_PIPELINE_REF names, as the
operators join it, and starts its Python workers.

Why: a restarted server is a new JVM with new executors and no Python workers, and Spark
starts a Python worker daemon per server session on each executor at the session's
first Python task. Warmed here, beside the retry of the operator that the restart
interrupted, the daemons are starting before that operator's first Python task needs
them. A warm-up that fails leaves the server cold, not down: it is logged and the server
serves.

SIGTERM and SIGINT go to the server; this process exits with the server's code, so a
restart policy sees the server's own exit.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

from batchpoint.errors import ConfigError
from batchpoint.settings.submit_options import spark_submit_program, submit_conf

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002
PORT_SETTING = "spark.connect.grpc.binding.port"
#: Where the warm-up child reads the address it joins (never its command line).
REMOTE_VARIABLE = "BATCHPOINT_SPARK_REMOTE"
#: How long the server may take to listen before the warm-up gives up waiting (the
#: server goes on: it is the restart policy's to judge, not this process's).
LISTEN_TIMEOUT = 300.0
WARM_UP_TIMEOUT = 300.0


def _say(message: str) -> None:
    print(f"batchpoint connect-server: {message}", file=sys.stderr, flush=True)


def server_command(options: Sequence[str]) -> list[str]:
    beside = Path(sys.executable).parent / "spark-submit"
    spark_submit = spark_submit_program() or str(beside)
    # No application file: the server class is on Spark's own class path.
    return [spark_submit, "--class", SERVER_CLASS, *options, "spark-internal"]


def warm_up_remote(env: Mapping[str, str], port: int) -> str:
    """The address the warm-up joins: the clients' own (BATCHPOINT_SPARK_REMOTE), since a
    pipeline's session id is derived from it, else this host's port."""
    return env.get(REMOTE_VARIABLE) or f"sc://127.0.0.1:{port}"


def warm_up_command(env: Mapping[str, str], port: int) -> list[str]:
    """The warm-up's command line. The address stays in its environment
    (`warm_up_environment`): it may carry `;token=`, and a command line shows in `ps`."""
    pipelines = [ref for ref in env.get("BATCHPOINT_PIPELINE_REF", "").split(",") if ref.strip()]
    return [
        sys.executable,
        "-m",
        "batchpoint.jobs.warm_up",
        "--remote-from-env",
        *(ref.strip() for ref in pipelines),
        # Only the pipelines' sessions: a restart's warm-up runs beside the epoch that the
        # restart interrupted, whose retry is often the server's first client, and on a
        # cluster the warm-up jobs' own Python workers (a session of their own) serve no
        # operator.
        "--sessions-only",
    ]


def warm_up_environment(env: Mapping[str, str], port: int) -> dict[str, str]:
    """The warm-up's environment: the address it joins in BATCHPOINT_SPARK_REMOTE, and
    not the server's own switch (the warm-up is a Connect client)."""
    client_env = {k: v for k, v in env.items() if k != "SPARK_CONNECT_MODE"}
    client_env[REMOTE_VARIABLE] = warm_up_remote(env, port)
    return client_env


def server_port(options: Sequence[str]) -> int:
    """The port the server binds (spark.connect.grpc.binding.port among `options`)."""
    value = submit_conf(options).get(PORT_SETTING, str(DEFAULT_PORT))
    try:
        port = int(value)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise ConfigError(
            f"--conf {PORT_SETTING}={value!r}: not a port: use a number from 1 to 65535"
        )
    return port


def wait_until_listening(
    server: subprocess.Popen[bytes], port: int, timeout: float = LISTEN_TIMEOUT
) -> bool:
    """Whether the server's port accepts connections before the server exits or
    `timeout` passes (the server binds it once its SparkContext is up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def run(options: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    port = server_port(options)
    started = time.monotonic()
    command = server_command(options)
    try:
        server = subprocess.Popen(command, env=env)
    except OSError as exc:
        _say(f"cannot run {command[0]} ({exc.strerror}): is pyspark installed here?")
        return 127
    warm_up: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: FrameType | None) -> None:
        for child in (warm_up, server):
            if child is not None and child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    if wait_until_listening(server, port):
        _say(f"the server listens on port {port} after {time.monotonic() - started:.1f}s")
        warm_up = subprocess.Popen(warm_up_command(env, port), env=warm_up_environment(env, port))
        try:
            code = warm_up.wait(WARM_UP_TIMEOUT)
        except subprocess.TimeoutExpired:
            warm_up.kill()
            code = warm_up.wait()
        if code == 0:
            _say(f"warm after {time.monotonic() - started:.1f}s")
        elif server.poll() is None:
            _say(f"the warm-up failed (exit {code}): the server serves cold")
    return server.wait()


def main(argv: list[str] | None = None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except ConfigError as exc:
        _say(str(exc))
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
