"""`./dev stack exec [--user root] SERVICE COMMAND...`: `docker compose exec` for a running
`./dev stack`, such as `./dev stack exec airflow-scheduler batchpoint checkpoints list`.

The command runs on the service's host as the service's own processes do: in its network
namespace (the other services by name), with its hostname, /tmp and read-only mounts, as
its user, in its working directory, with its environment from the compose file (the
paths made local). `./dev stack` writes what that takes into its folder when the stack is
up (`exec.json`) and leaves a pointer to the folder in RUNNING while it runs; with several
stacks up, --dir names one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from devstack.stack import Stack

RUNNING = Path("/run/batchpoint-stack")
EXEC_FILE = "exec.json"


def record(stack: Stack) -> Path:
    """Write what `exec` needs for each service of the up `stack`; returns the pointer
    (remove it when the stack stops)."""
    services = {
        name: {
            "prefix": container.inside([]),
            "root_prefix": container.inside([], as_root=True),
            "env": container.environment(),
            "cwd": str(container.cwd),
        }
        for name, container in stack.containers.items()
    }
    (stack.workdir / EXEC_FILE).write_text(json.dumps(services))
    RUNNING.mkdir(parents=True, exist_ok=True)
    pointer = RUNNING / str(os.getpid())
    pointer.write_text(str(stack.workdir))
    return pointer


def _running() -> list[Path]:
    """The folders of the stacks up on this machine (their `./dev stack` alive)."""
    found = []
    for pointer in sorted(RUNNING.glob("*")) if RUNNING.is_dir() else []:
        if pointer.name.isdigit() and Path(f"/proc/{pointer.name}").exists():
            found.append(Path(pointer.read_text().strip()))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev stack exec", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="the stack's folder (default: the one up)")
    parser.add_argument(
        "-u", "--user", choices=["root", "0"], help="as root instead of the service's user"
    )
    parser.add_argument("service")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    folders = [args.dir] if args.dir else _running()
    if len(folders) != 1:
        said = "no ./dev stack is up" if not folders else f"{len(folders)} stacks are up"
        print(f"error: {said}; give its folder with --dir", file=sys.stderr)
        return 2
    try:
        services = json.loads((folders[0] / EXEC_FILE).read_text())
    except OSError as exc:
        print(f"error: {folders[0]} is not an up stack's folder ({exc})", file=sys.stderr)
        return 2
    if args.service not in services:
        print(f"error: no service {args.service} (up: {', '.join(services)})", file=sys.stderr)
        return 2
    if not args.command:
        parser.error("a command to run")
    service = services[args.service]
    command = list(args.command)
    found = shutil.which(command[0], path=service["env"]["PATH"])
    command[0] = found or command[0]
    done = subprocess.run(
        [*service["root_prefix" if args.user else "prefix"], *command],
        env=service["env"],
        cwd=service["cwd"],
        check=False,
    )
    return done.returncode


__all__ = ["RUNNING", "main", "record"]
