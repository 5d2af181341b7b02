"""`./dev stack`: the services of docker-compose.yaml on hosts of their own, without Docker.

    ./dev stack [SERVICE...] [-f OVERRIDE.yaml] [--env-file FILE] [--profile NAME] [--keep DIR]
    ./dev stack exec SERVICE COMMAND...      (devstack.stack_exec: docker compose exec)

Reads the compose file (and the `.env` beside it, or the --env-file files instead, as
compose does, and any override files), says which local program stands in for each
image, starts every service (or SERVICE and what it depends on; services of a profile
only with --profile) on a network namespace of its own in the order `depends_on`
allows, and prints the Airflow UI's address and the admin's password. Ctrl-C (or
SIGTERM) stops everything and removes the hosts and, without --keep, the stack's folder;
it exits non-zero if anything it started is left. Needs root (network namespaces) and
Linux.

The file requires its secrets (S3 keys, Postgres and admin passwords, a JWT secret): for
a trial, `./dev stack --env-file trial.env` gives it the published trial values.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from batchpoint.errors import BatchpointError
from devstack import PROJECT_ROOT, stack_exec
from devstack.compose import ComposeFile, read_dotenv
from devstack.images import AIRFLOW_IMAGE_UID, interpreter_unreachable_by
from devstack.processes import signals_stop
from devstack.stack import Stack, remove_workdir

API_SERVER = "airflow-apiserver"


def ui_url(stack: Stack) -> str | None:
    """The api-server's published port at its host's address."""
    if API_SERVER not in stack.containers:
        return None
    service = stack.compose.services[API_SERVER]
    port = int(service.ports[0].split(":")[-1]) if service.ports else 8080
    return f"http://{stack.address(API_SERVER)}:{port}"


def variables_of(file: Path, env_files: list[Path]) -> dict[str, str]:
    """Compose's variables: the env files given (else the `.env` beside the compose
    file), with this environment over them."""
    found: dict[str, str] = {}
    for env_file in env_files or [file.parent / ".env"]:
        if env_files and not env_file.is_file():
            raise BatchpointError(f"--env-file {env_file}: no such file")
        found.update(read_dotenv(env_file))
    variables = {**found, **os.environ}
    if "AIRFLOW_UID" not in variables:
        why = interpreter_unreachable_by(AIRFLOW_IMAGE_UID)
        if why:
            # The image's user runs the image's Python; here it would not reach this
            # machine's, so the Airflow services run as root (compose's AIRFLOW_UID=0).
            print(f"AIRFLOW_UID=0: user {AIRFLOW_IMAGE_UID} cannot run this Python: {why}")
            variables["AIRFLOW_UID"] = "0"
    return variables


def build(args: argparse.Namespace, workdir: Path) -> Stack:
    variables = variables_of(args.file, args.env_file)

    def load() -> Stack:
        compose = ComposeFile.load(args.file, variables, args.override, args.profile)
        return Stack(compose, workdir, args.services or None)

    stack = load()
    url = ui_url(stack)
    if url and "AIRFLOW_BASE_URL" not in variables:
        # Links and redirects of the UI lead to where this machine reaches it.
        variables["AIRFLOW_BASE_URL"] = url
        stack = load()
    return stack


def serve(stack: Stack) -> None:
    print(f"batchpoint stack from {stack.compose.path} (project {stack.compose.name})")
    print(f"  folder: {stack.workdir}")
    print("images and what runs in their place:")
    print("\n".join(stack.describe_images()))
    print(f"hosts (network {stack.network.subnet} on bridge {stack.network.bridge}):")
    print("\n".join(stack.describe_hosts()))
    stack.up()
    url = ui_url(stack)
    if url:
        password = stack.admin_password() or "(see airflow-init's log)"
        print(f"\nAirflow UI and REST API: {url}  (user admin, password {password})")
    pointer = stack_exec.record(stack)
    print(
        "A command on a service's host, as `docker compose exec`:\n"
        "  ./dev stack exec airflow-scheduler batchpoint checkpoints list"
    )
    print("Ctrl-C to stop.", flush=True)
    seen = len(stack.events)
    try:
        while True:
            time.sleep(1)
            for event in stack.events[seen:]:
                print(event, flush=True)
            seen = len(stack.events)
    finally:
        pointer.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["exec"]:
        return stack_exec.main(argv[1:])
    parser = argparse.ArgumentParser(prog="./dev stack", description=__doc__.split("\n\n")[0])
    parser.add_argument("services", nargs="*", help="only these and what they depend on")
    parser.add_argument("--file", type=Path, default=PROJECT_ROOT / "docker-compose.yaml")
    parser.add_argument(
        "-f",
        "--override",
        action="append",
        default=[],
        type=Path,
        help="a compose file merged over it (as docker compose -f)",
    )
    parser.add_argument(
        "--env-file",
        action="append",
        default=[],
        type=Path,
        help="variables from this file instead of .env (as docker compose --env-file); "
        "trial.env holds a trial's",
    )
    parser.add_argument(
        "--profile", action="append", default=[], help="start this profile's services too"
    )
    parser.add_argument("--keep", type=Path, help="keep the stack's folder (volumes, logs) here")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("error: ./dev stack needs root (it makes network namespaces)", file=sys.stderr)
        return 2
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="bp-stack-", dir="/var/tmp"))
    stack = None
    code = 0
    try:
        with signals_stop():
            stack = build(args, workdir.resolve())
            serve(stack)
    except KeyboardInterrupt:
        pass
    except BatchpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = 1
    finally:
        if stack is not None:
            print("stopping...", flush=True)
            left = stack.down()
            for thing in left:
                print(f"left behind: {thing}", file=sys.stderr)
            code = code or (1 if left else 0)
            if not left:
                print("stopped; nothing left behind")
        if args.keep is None:
            remove_workdir(workdir)
        elif stack is not None:  # refused before it started: nothing of it was kept
            print(f"kept in {workdir}")
    return code


if __name__ == "__main__":
    sys.exit(main())
