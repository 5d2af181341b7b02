"""The faults of devstack on a small part of the real docker-compose.yaml
(SeaweedFS and the one-shot that makes its bucket, each on a host of its own): a link
between two hosts cut and restored, as a network would take it away (only that link); a
service killed -9 to its last process and brought back by its restart policy; stopped
(and left down, as `docker compose stop` leaves it) and started; restarted; and nothing
left behind once the stack is down. And a host's configs are read-only there, for root
too, as a container's are."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from devstack.compose import ComposeFile, read_dotenv
from devstack.container import in_namespaces, marked, namespace_id
from devstack.netns import leftovers
from devstack.stack import Stack

pytestmark = [pytest.mark.stack]

PROJECT = Path(__file__).resolve().parents[2]

# Connects from the host it runs on: "ok", or the error's name and text.
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
    print("ok")
except OSError as exc:
    print(type(exc).__name__, exc)
"""


@pytest.fixture
def stack():
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root on Linux and iproute2 (network namespaces)")
    workdir = Path(tempfile.mkdtemp(prefix="bp-faults-", dir="/var/tmp"))
    # the file requires its secrets: a trial's
    trial = read_dotenv(PROJECT / "trial.env")
    compose = ComposeFile.load(PROJECT / "docker-compose.yaml", variables=trial)
    stack = Stack(compose, workdir, services=["seaweedfs-init"], say=lambda _: None)
    try:
        yield stack.up(timeout=300)
    finally:
        left = stack.down()
        shutil.rmtree(workdir, ignore_errors=True)
        assert left == []
        assert leftovers([stack.tag]) == []


def connect_from(stack: Stack, host: str, target: str, port: int) -> str:
    """What a connection from `host` to `target` (by its service name) meets."""
    container = stack.containers[host]
    argv = container.inside([sys.executable, "-c", CONNECT, target, str(port)])
    done = subprocess.run(
        argv, env=container.environment(), capture_output=True, text=True, timeout=60
    )
    return done.stdout.strip() or done.stderr.strip()[-300:]


def connect_here(address: str, port: int) -> str:
    done = subprocess.run(
        [sys.executable, "-c", CONNECT, address, str(port)], capture_output=True, text=True
    )
    return done.stdout.strip()


def test_a_cut_link_is_only_that_link_and_comes_back(stack):
    address = stack.address("seaweedfs")
    assert connect_from(stack, "seaweedfs-init", "seaweedfs", 8333) == "ok"

    cut = stack.cut("seaweedfs-init", "seaweedfs")
    refused = connect_from(stack, "seaweedfs-init", "seaweedfs", 8333)
    assert refused.startswith("OSError") and "No route to host" in refused, refused
    back = connect_from(stack, "seaweedfs", "seaweedfs-init", 9)  # both ways
    assert "No route to host" in back, back
    assert connect_here(address, 8333) == "ok"  # other hosts still reach it
    assert stack.network.cuts == [("seaweedfs", "seaweedfs-init")]

    restored = stack.restore("seaweedfs-init", "seaweedfs")
    assert connect_from(stack, "seaweedfs-init", "seaweedfs", 8333) == "ok"
    assert stack.network.cuts == []
    assert [(e.kind, e.target) for e in (cut, restored)] == [
        ("cut", "seaweedfs-init <-> seaweedfs"),
        ("restore", "seaweedfs-init <-> seaweedfs"),
    ]


def test_kill_stop_start_and_restart_a_service(stack):
    seaweed = stack.containers["seaweedfs"]
    address = stack.address("seaweedfs")
    before = marked(seaweed.marker)
    assert before and seaweed.running()

    # kill -9: every process of it at once, as when its machine dies ...
    stack.kill("seaweedfs")
    assert seaweed.exit_code == -9
    assert not [pid for pid in before if pid in marked(seaweed.marker)]
    # ... and its restart policy (unless-stopped) brings it back, healthy
    assert seaweed.service.restart == "unless-stopped"
    stack.wait_healthy("seaweedfs", timeout=120)
    assert connect_here(address, 8333) == "ok"
    assert set(marked(seaweed.marker)).isdisjoint(before)
    assert [e.kind for e in stack.events if e.target == "seaweedfs"][-3:] == [
        "kill -9",
        "exited",
        "restarted",
    ]

    # stop: down, and its restart policy leaves it so
    stack.stop("seaweedfs")
    time.sleep(3)  # several turns of the restart policy's loop (every 0.5 s)
    assert not seaweed.running() and marked(seaweed.marker) == []
    assert "Connection refused" in connect_here(address, 8333)
    stack.start("seaweedfs")
    stack.wait_healthy("seaweedfs", timeout=120)

    # restart: stopped and started again, not left to the restart policy
    running = marked(seaweed.marker)
    starts = seaweed.starts
    stack.restart("seaweedfs")
    stack.wait_healthy("seaweedfs", timeout=120)
    assert seaweed.starts == starts + 1 and set(marked(seaweed.marker)).isdisjoint(running)
    assert [e.kind for e in stack.events if e.target == "seaweedfs"][-3:] == [
        "stop",
        "start",
        "restart",
    ]


def test_a_config_is_read_only_on_its_host_even_for_root(stack):
    seaweed = stack.containers["seaweedfs"]
    (config,) = seaweed.read_only_paths()  # the S3 identities, a compose config
    before = Path(config).read_text()
    argv = seaweed.inside(["/bin/sh", "-c", f"echo '{{}}' > {config}"])
    done = subprocess.run(argv, env=seaweed.environment(), capture_output=True, text=True)
    assert done.returncode != 0 and "Read-only file system" in done.stderr, done
    assert Path(config).read_text() == before


def test_kill_reaches_a_process_whose_environment_no_longer_shows_the_marker(stack):
    """Airflow's executor workers and log server set their process title, which writes
    over the environment /proc shows: such a process of a killed scheduler lived on and
    kept its database connection, and the row locks in it, open. It is on the service's
    host all the same, and a kill -9 of the service reaches it."""
    seaweed = stack.containers["seaweedfs"]
    hidden = subprocess.Popen(
        [*seaweed.host.exec_prefix(), "env", "-i", "sleep", "600"], start_new_session=True
    )
    try:
        host = namespace_id(seaweed.host.namespace)
        deadline = time.monotonic() + 30
        while hidden.pid not in in_namespaces({host}) and time.monotonic() < deadline:
            time.sleep(0.05)  # `ip netns exec` enters the host, then execs in place
        assert hidden.pid in in_namespaces({host}) and hidden.pid not in marked(seaweed.marker)

        stack.kill("seaweedfs")

        assert hidden.wait(timeout=10) == -9
    finally:
        if hidden.poll() is None:
            hidden.kill()
    stack.wait_healthy("seaweedfs", timeout=120)
