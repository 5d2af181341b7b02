"""Local servers die with the process that started them, even when it is SIGKILLed
(batchpoint.devstack.processes): nothing of their process group outlives it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from batchpoint.devstack.processes import group_members

ROOT = Path(__file__).resolve().parents[2]

PARENT = """
import subprocess, sys, time
from pathlib import Path
from batchpoint.devstack.processes import start_group

work = Path(sys.argv[1])
groups = []
{start}
print(" ".join(map(str, groups)), flush=True)
time.sleep(3600)
"""

SLEEPER = """
log = open(work / "sleep.log", "ab")
child = start_group([sys.executable, "-c", "import subprocess, sys, time; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)']); time.sleep(3600)"],
    log=log)
groups.append(child.pid)
"""

SERVERS = """
from batchpoint.devstack.seaweed import SeaweedServer
from batchpoint.devstack.spark_connect import SparkConnectServer
weed = SeaweedServer(work / "weed").start()
spark = SparkConnectServer(work / "spark").start()
groups += [weed.pid, spark.pid]
"""


def _parent(tmp_path: Path, start: str) -> tuple[subprocess.Popen[str], list[int]]:
    script = tmp_path / "parent.py"
    script.write_text(PARENT.format(start=textwrap.dedent(start)))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "include")}
    parent = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert parent.stdout is not None
    line = parent.stdout.readline()
    assert line, "the parent exited before starting its children"
    return parent, [int(g) for g in line.split()]


def _assert_gone_after_sigkill(parent: subprocess.Popen[str], groups: list[int]) -> None:
    for group in groups:
        assert group_members(group), f"group {group} is not running"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 60
    left = {g: group_members(g) for g in groups}
    while any(left.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
        left = {g: group_members(g) for g in groups}
    assert not any(left.values()), f"processes outlived their SIGKILLed parent: {left}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_group_with_a_grandchild_dies_with_its_sigkilled_parent(tmp_path: Path) -> None:
    parent, groups = _parent(tmp_path, SLEEPER)
    # The leader and its own child.
    deadline = time.monotonic() + 30
    while len(group_members(groups[0])) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    _assert_gone_after_sigkill(parent, groups)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_seaweed_and_spark_connect_die_with_their_sigkilled_parent(tmp_path: Path) -> None:
    parent, groups = _parent(tmp_path, SERVERS)
    _assert_gone_after_sigkill(parent, groups)
