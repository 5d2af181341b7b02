"""Child processes that never outlive their parent: local servers (SeaweedFS, a Spark
Connect server) started by a test session, the demo or `./dev ui`.

`start_group` starts the command under a small supervisor (this file run as a script,
stdlib only) that leads a new process group. On Linux the kernel sends the supervisor
SIGTERM when the parent dies, however the parent dies (``prctl(PR_SET_PDEATHSIG)``);
the supervisor then SIGTERMs the whole group, and SIGKILLs what is left after a grace
period. So a test run killed with SIGKILL or a demo stopped by the OOM killer leaves no
server behind, down to the grandchildren (a JVM's Python workers). `stop_group` does the
same from the parent.

Limits, by design of PR_SET_PDEATHSIG:
- "parent" is the thread that started the child: start servers from a thread that lives
  as long as they should (the main thread, a fixture), not from a short-lived worker;
- a supervisor killed with SIGKILL itself takes only its direct child with it (armed the
  same way); a grandchild that escapes into another process group or session is lost;
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PR_SET_CHILD_SUBREAPER = 36


GRACE = 10.0  # seconds between SIGTERM and SIGKILL


def _prctl(option: int, value: int) -> int:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return int(libc.prctl(option, value, 0, 0, 0))


def _die_with(parent: int, signum: int = signal.SIGKILL) -> None:
    """Runs in the child between fork and exec: arm the death signal, then make sure the
    parent did not die before it was armed (the signal would then never come)."""
    if _prctl(PR_SET_PDEATHSIG, signum) != 0:
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
    linux = sys.platform.startswith("linux")
    preexec = (lambda: _die_with(parent, signal.SIGTERM)) if linux else None
    command = [sys.executable, str(Path(__file__).resolve()), "--", *args] if linux else args
    return subprocess.Popen(
        list(command),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        start_new_session=True,
        preexec_fn=preexec,
    )


def _live() -> Iterator[tuple[int, list[str]]]:
    """Every live (not zombie) process as (pid, its /proc stat fields after the command)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat(entry.name)
        except OSError:
            continue  # ended while we looked
        if fields[0] != "Z":
            yield int(entry.name), fields


def live_where(keep: Callable[[int], bool]) -> list[int]:
    """The live processes `keep` accepts (it may raise OSError: the process ended)."""
    found = []
    for pid, _ in _live():
        with contextlib.suppress(OSError):
            if keep(pid):
                found.append(pid)
    return found


def group_members(pgid: int) -> list[int]:
    """The live processes of process group `pgid` (Linux: read from /proc)."""
    return [pid for pid, fields in _live() if int(fields[2]) == pgid]


def _stat(pid: str) -> list[str]:
    stat = Path("/proc", pid, "stat").read_text()
    return stat[stat.rfind(")") + 2 :].split()  # after the command, which may hold spaces


def descendants(pid: int) -> list[int]:
    """The live processes below `pid` (Linux: read from /proc), wherever their group:
    pyspark's daemon moves itself and its workers into a group of their own."""
    children: dict[int, list[int]] = {}
    for child, fields in _live():
        children.setdefault(int(fields[1]), []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


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


def _end_group(grace: float) -> None:
    """SIGTERM every other member of this process's group, SIGKILL them after `grace`."""
    me, group = os.getpid(), os.getpgrp()

    def others() -> list[int]:
        return sorted({*group_members(group), *descendants(me)} - {me})

    for signum in (signal.SIGTERM, signal.SIGKILL):
        for pid in others():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        deadline = time.monotonic() + grace
        while others() and time.monotonic() < deadline:
            time.sleep(0.05)


@contextlib.contextmanager
def signals_stop() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt, so `kill` shuts down as cleanly as Ctrl-C."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def serve_in_foreground(
    server: AbstractContextManager[object],
    banner: Callable[[], str],
    running: Callable[[], bool],
    log_path: Callable[[], Path],
    errors: tuple[type[BaseException], ...],
) -> int:
    """A local server's `python -m` entry: start it, print `banner()`, wait until Ctrl-C
    or SIGTERM (exit 0) or until the server dies (exit 1, pointing at its log)."""
    try:
        with signals_stop(), server:
            print(banner(), flush=True)
            while running():
                time.sleep(0.5)
            print(f"the server exited; see {log_path()}", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        print("stopped", flush=True)
        return 0
    except errors as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _supervise(args: list[str]) -> int:
    """The group leader: runs `args`, ends the whole group when told to stop (SIGTERM:
    `stop_group`, or the parent's death) or when the command exits."""
    me = os.getpid()
    # Orphans below us (a JVM's Python workers once the JVM is gone) become our children
    # instead of init's, so that _end_group still finds them.
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    child = subprocess.Popen(args, preexec_fn=lambda: _die_with(me))

    def on_term(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(os.getpgrp(), signal.SIGTERM)  # every member; ignored here

    signal.signal(signal.SIGTERM, on_term)
    try:
        code = child.wait(None)
    finally:
        _end_group(GRACE)
    return code if code >= 0 else 128 - code


__all__ = ["descendants", "group_members", "start_group", "stop_group"]


if __name__ == "__main__":
    # python processes.py -- COMMAND...: the supervisor (see start_group).
    sys.exit(_supervise(sys.argv[2:]))
