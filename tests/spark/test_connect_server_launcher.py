"""The compose file's Spark Connect launcher (batchpoint.jobs.connect_server), run as the
spark-connect service runs it: the server comes up with the given spark-submit options,
its warm-up runs once it listens and opens the session of each pipeline of
BATCHPOINT_PIPELINE_REF under the clients' own address, and SIGTERM to the launcher stops
the server, the launcher exiting once it has."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen

import pytest

from batchpoint.jobs.connect_server import warm_up_command, warm_up_environment
from batchpoint.jobs.warm_up import WARM_UP_TAG
from batchpoint.settings.submit_options import submit_conf
from batchpoint.spark.connect import pipeline_session_id
from batchpoint.spark.session import LOCAL_DRIVER_CONF
from devstack.processes import start_group, stop_group
from devstack.seaweed import free_ports
from support.spark_rest import rest, tagged

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = "demo.payments:pipeline"
#: Deadline for the server's start and warm-up on a loaded 2-core machine.
WARM_WITHIN = 300.0


@dataclass
class Launched:
    process: Popen[bytes]
    log_path: Path
    port: int

    @property
    def remote(self) -> str:
        return f"sc://127.0.0.1:{self.port}"


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    workdir = tmp_path_factory.mktemp("launcher")
    port = free_ports(1, "127.0.0.1")[0]
    conf = {
        **LOCAL_DRIVER_CONF,
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "true",
        "spark.ui.port": "0",
        "spark.scheduler.mode": "FAIR",
        "spark.python.daemon.module": "batchpoint.spark.worker_daemon",
    }
    options = ["--master", "local[2]", "--name", "launcher-test"]
    for key, value in conf.items():
        options += ["--conf", f"{key}={value}"]
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_CONNECT_MODE_ENABLED", "MASTER")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT / "include"), str(ROOT)]),
        PYSPARK_PYTHON=sys.executable,
        SPARK_CONNECT_MODE="0",
        BATCHPOINT_ROOT=(workdir / "store").as_uri(),
        BATCHPOINT_PIPELINE_REF=PIPELINE,
        BATCHPOINT_SPARK_REMOTE=f"sc://127.0.0.1:{port}",
    )
    log_path = workdir / "launcher.log"
    with open(log_path, "ab") as log:
        process = start_group(
            [sys.executable, "-m", "batchpoint.jobs.connect_server", *options],
            log=log,
            cwd=workdir,
            env=env,
        )
    started = Launched(process, log_path, port)
    try:
        yield started
    finally:
        stop_group(process, 20.0)


def _wait_warm(launched: Launched) -> str:
    deadline = time.monotonic() + WARM_WITHIN
    while time.monotonic() < deadline:
        text = launched.log_path.read_text(errors="replace")
        if "connect-server: warm after" in text or "the warm-up failed" in text:
            return text
        assert launched.process.poll() is None, f"the launcher exited:\n{text[-3000:]}"
        time.sleep(1)
    raise AssertionError(f"not warm within {WARM_WITHIN:.0f}s:\n{text[-3000:]}")


def test_the_options_reach_the_server_and_the_clients_address_the_warm_up() -> None:
    options = ["--conf", "spark.connect.grpc.binding.port=16000", "--conf=spark.a=b=c", "--x"]
    assert submit_conf(options) == {"spark.connect.grpc.binding.port": "16000", "spark.a": "b=c"}
    env = {"BATCHPOINT_SPARK_REMOTE": "sc://spark-connect:15002", "BATCHPOINT_PIPELINE_REF": "m:p"}
    command = warm_up_command(env, 15002)
    assert command[command.index("batchpoint.jobs.warm_up") + 1 :] == [
        "--remote-from-env",
        "m:p",
        "--sessions-only",
    ]
    # the address (which may carry a token) travels in the environment, never argv
    assert (
        warm_up_environment(env, 15002)["BATCHPOINT_SPARK_REMOTE"] == env["BATCHPOINT_SPARK_REMOTE"]
    )
    # without the clients' address: this host's port, and no pipeline, no sessions
    assert warm_up_command({}, 15002)[-2:] == ["--remote-from-env", "--sessions-only"]
    assert warm_up_environment({}, 15002)["BATCHPOINT_SPARK_REMOTE"] == "sc://127.0.0.1:15002"


def test_no_spark_submit_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # nothing there, nor beside this Python
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from batchpoint.jobs import connect_server as c; "
            "c.sys.executable = '/nonexistent/python'; raise SystemExit(c.run([], c.os.environ))",
        ],
        env={**env, "PYTHONPATH": os.pathsep.join([str(ROOT / "include"), str(ROOT)])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 127, done.stderr
    assert "cannot run /nonexistent/spark-submit" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_the_launched_server_is_warm_in_the_pipelines_session(launched: Launched) -> None:
    text = _wait_warm(launched)
    assert "connect-server: warm after" in text, text[-3000:]
    warm = tagged(rest(launched.log_path, "jobs?status=succeeded"), WARM_UP_TAG)
    assert warm, "no warm-up job ran"
    session = pipeline_session_id("payments", launched.remote)
    assert [j for j in warm if any(f"_Session_{session}_" in t for t in j["jobTags"])], (
        "no warm-up job ran in the pipeline's session"
    )
    environment = dict(rest(launched.log_path, "environment")["sparkProperties"])
    assert environment["spark.scheduler.mode"] == "FAIR"


def test_sigterm_to_the_launcher_stops_the_server(launched: Launched) -> None:
    _wait_warm(launched)
    assert _listening(launched.port)
    launched.process.send_signal(signal.SIGTERM)
    code = launched.process.wait(120)
    # the server's own exit on SIGTERM, passed on (not the launcher killed by it)
    assert code != -signal.SIGTERM, code
    assert not _listening(launched.port)
