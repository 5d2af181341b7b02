"""Local servers die with the process that started them, even when it is SIGKILLed
(devstack.processes): nothing of their process group outlives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from devstack.processes import group_members

ROOT = Path(__file__).resolve().parents[2]

PARENT = """
import json, subprocess, sys, time
from pathlib import Path
from devstack.processes import descendants, start_group

work = Path(sys.argv[1])
groups = []
{start}
pids = [p for g in groups for p in [g, *descendants(g)]]
print(json.dumps({{"groups": groups, "pids": pids}}), flush=True)
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
from devstack.seaweed import SeaweedServer
from devstack.spark_connect import SparkConnectServer
weed = SeaweedServer(work / "weed").start()
spark = SparkConnectServer(work / "spark").start()
groups += [weed.pid, spark.pid]
# Python workers too (pyspark's daemon puts them in a process group of their own).
from batchpoint.spark.session import connect_session
session = connect_session(spark.url, "workers")
session.range(4).repartition(2).mapInArrow(lambda batches: batches, "id long").collect()
"""


def _parent(tmp_path: Path, start: str) -> tuple[subprocess.Popen[str], dict[str, list[int]]]:
    script = tmp_path / "parent.py"
    script.write_text(PARENT.format(start=textwrap.dedent(start)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "include"), str(ROOT)])}
    parent = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert parent.stdout is not None
    line = parent.stdout.readline()
    assert line, "the parent exited before starting its children"
    return parent, json.loads(line)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def _assert_gone_after_sigkill(
    parent: subprocess.Popen[str], started: dict[str, list[int]]
) -> None:
    groups, pids = started["groups"], started["pids"]
    for group in groups:
        assert group_members(group), f"group {group} is not running"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 60

    def left() -> list[int]:
        return sorted({*(p for g in groups for p in group_members(g)), *filter(_alive, pids)})

    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left(), f"processes outlived their SIGKILLed parent: {left()}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_group_with_a_grandchild_dies_with_its_sigkilled_parent(tmp_path: Path) -> None:
    parent, started = _parent(tmp_path, SLEEPER)
    # The supervisor, the command and the command's child.
    deadline = time.monotonic() + 30
    while len(group_members(started["groups"][0])) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    _assert_gone_after_sigkill(parent, started)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_seaweed_and_spark_connect_die_with_their_sigkilled_parent(tmp_path: Path) -> None:
    parent, started = _parent(tmp_path, SERVERS)
    workers = [p for p in started["pids"] if b"pyspark" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert workers, "no Python worker was started"
    _assert_gone_after_sigkill(parent, started)
