"""Whether a run left a process behind: every process the demo (or `./dev ui`) starts,
however deep (SeaweedFS, the Spark Connect server, its JVM's Python workers, an operator
task's client, a spark-submit JVM), inherits one marker variable, so at the end the
processes that still carry it are exactly the ones this run started and did not stop,
even those that were re-parented to init after their parent died.

Linux only (/proc); elsewhere `leftovers` finds nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

MARKER = "BATCHPOINT_RUN_MARKER"


@dataclass(frozen=True)
class Leftover:
    pid: int
    command: str

    def __str__(self) -> str:
        return f"pid {self.pid}: {self.command[:160]}"


def mark_run() -> str:
    """Set a new marker in this process's environment, inherited by everything it starts
    from now on; returns it."""
    marker = uuid.uuid4().hex
    os.environ[MARKER] = marker
    return marker


def _carries(pid_dir: Path, needle: bytes) -> bool:
    try:
        return needle in (pid_dir / "environ").read_bytes().split(b"\0")
    except OSError:  # gone, or another user's
        return False


def _command(pid_dir: Path) -> str:
    try:
        raw = (pid_dir / "cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or "?"


def leftovers(marker: str) -> list[Leftover]:
    """The processes other than this one that carry `marker`."""
    needle = f"{MARKER}={marker}".encode()
    me = os.getpid()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        if pid != me and _carries(entry, needle):
            found.append(Leftover(pid, _command(entry)))
    return sorted(found, key=lambda p: p.pid)


def wait_for_none(marker: str, timeout: float = 20.0) -> list[Leftover]:
    """The run's processes still alive after up to `timeout` seconds: the servers were
    told to stop, and a JVM takes a moment to exit."""
    deadline = time.monotonic() + timeout
    while True:
        left = leftovers(marker)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


def stop_spark() -> None:
    """The restore gate started Spark in this process; stop it, and the JVM pyspark
    started for it (which session.stop() leaves running until this process exits, and
    which the check for leftover processes would rightly count)."""
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    process = getattr(gateway, "proc", None)  # None: a JVM someone else launched
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if process is not None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
