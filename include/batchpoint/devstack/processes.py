"""Child processes that never outlive their parent: local servers (SeaweedFS, a Spark
Connect server) started by a test session, the demo or `./dev ui`.

`start_group` starts the command as the leader of a new process group (so that
`stop_group` takes down everything it forked) and, on Linux, asks the kernel to SIGKILL
it when the parent dies, however the parent dies (``prctl(PR_SET_PDEATHSIG)``): a test
run killed with SIGKILL or a demo stopped by the OOM killer leaves no server behind.

Limits, by design of PR_SET_PDEATHSIG:
- only the group leader gets the signal; its own children must die with it (a JVM's
  Python workers exit when their stdin closes, `weed` forks nothing); `stop_group`
  signals the whole group;
- "parent" is the thread that started the child: start servers from a thread that lives
  as long as they should (the main thread, a fixture), not from a short-lived worker;
- it survives exec (the spark-submit script execs the JVM) but not a set-uid binary;
- elsewhere than Linux nothing is armed and only `stop_group` and atexit protect.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with(parent: int) -> None:
    """Runs in the child between fork and exec: arm the death signal, then make sure the
    parent did not die before it was armed (the signal would then never come)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        os._exit(125)
    if os.getppid() != parent:
        os._exit(125)


def start_group(
    args: Sequence[str],
    *,
    log: IO[bytes],
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start `args` in its own process group, output to `log`, killed when this process
    (the calling thread) dies."""
    parent = os.getpid()
    preexec = (lambda: _die_with(parent)) if sys.platform.startswith("linux") else None
    return subprocess.Popen(
        list(args),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        start_new_session=True,
        preexec_fn=preexec,
    )


def group_members(pgid: int) -> list[int]:
    """The live processes of process group `pgid` (Linux: read from /proc)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the command (which may hold spaces and parentheses).
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def stop_group(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM to the whole group, SIGKILL to what is left after `timeout` seconds (the
    leader, or any member that outlives it)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout)
    # Members may linger after the leader (a worker still flushing): give them the rest
    # of the time, then kill the group.
    deadline = time.monotonic() + timeout
    while sys.platform.startswith("linux") and group_members(process.pid):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


__all__ = ["group_members", "start_group", "stop_group"]
