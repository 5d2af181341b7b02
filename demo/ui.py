"""Open the Airflow UI on a demo kept with `./dev demo --keep DIR`:

    ./dev ui DIR [--port 8080]

It restarts SeaweedFS on the demo's data (same port and keys, so the recorded storage
settings stay valid), starts a local Spark Connect server for the operator tasks (connect
mode, as in the demo; on the recorded port when it is free, else on another, written back
to the record) and runs `airflow standalone` (api-server, scheduler, dag-processor,
triggerer) on the demo's SQLite database, with the demo's BATCHPOINT_* settings as last
deployed. It prints the admin password and an `export` block that points the batchpoint
CLI at the demo while it runs. The checkpoint history is under Browse → Checkpoints; take
a savepoint by triggering `payments_savepoint` with its form. Ctrl-C or SIGTERM stops
everything (each server a process group of its own, stopped as a group), and it checks
that no process it started is left. One `./dev ui` at a time on a folder.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import secrets
import socket
import sys
import time
import urllib.request
from pathlib import Path
from subprocess import Popen
from typing import IO

from batchpoint.errors import BatchpointError, ConfigError
from demo.airflow_env import PROJECT_ROOT, python_path
from demo.leftovers import mark_run, wait_for_none
from demo.record import DemoRecord
from devstack.processes import signals_stop, start_group, stop_group
from devstack.seaweed import SeaweedServer, free_ports

ADMIN = "admin"


def ui_environment(record: DemoRecord, port: int) -> dict[str, str]:
    env = {**os.environ, **record.env}
    # Not Airflow's fixed 8793 and 8794: two `./dev ui` on two demos would collide.
    log_port, trigger_log_port = free_ports(2)
    env.update(
        {
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(log_port),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_log_port),
            # The scheduler runs these DAGs now: a deferred sensor frees its worker slot
            # while the triggerer watches the acks.
            "BATCHPOINT_ACK_SENSOR_MODE": "deferrable",
            "BATCHPOINT_ACK_POLL_INTERVAL": "2",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://localhost:{port}",
            # The triggerer and the tasks import the demo's pipeline from the project root.
            "PYTHONPATH": python_path(env.get("PYTHONPATH")),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        }
    )
    return env


def admin_password(airflow_home: Path) -> str:
    """The admin's password, made here on the first start: `airflow standalone` prints
    one only when it makes it, so a second start could not say it."""
    path = airflow_home / "simple_auth_manager_passwords.json.generated"
    passwords = json.loads(path.read_text() or "{}") if path.is_file() else {}
    if ADMIN not in passwords:
        passwords[ADMIN] = secrets.token_urlsafe(12)
        airflow_home.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(passwords) + "\n")
    return str(passwords[ADMIN])


def port_free(port: int) -> bool:
    """Whether a server could listen on `port` now: as servers do (SO_REUSEADDR), so
    the connections of a just stopped `./dev ui`, in TIME_WAIT, do not count."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def hold_folder(workdir: Path) -> IO[str]:
    """A lock on `workdir` for as long as this process lives: two `./dev ui` on one demo
    would start two SeaweedFS on one data folder and two schedulers on one database."""
    lock = (workdir / "ui.lock").open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise ConfigError(f"another `./dev ui` has {workdir} open; stop it first") from None
    return lock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev ui", description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="the folder given to ./dev demo --keep")
    parser.add_argument("--port", type=int, default=8080, help="Airflow UI port (8080)")
    args = parser.parse_args(argv)
    workdir = args.dir.resolve()
    marker = mark_run()
    try:
        record = DemoRecord.read(workdir)
        with hold_folder(workdir), signals_stop():
            if not port_free(args.port):
                raise ConfigError(f"port {args.port} is in use: give another with --port")
            return serve(workdir, record, args.port)
    except KeyboardInterrupt:
        return 0
    except BatchpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        left = wait_for_none(marker, timeout=30)
        for process in left:
            print(f"error: still running after the stop: {process}", file=sys.stderr)


def serve(workdir: Path, record: DemoRecord, port: int) -> int:
    """Start the servers, say how to use them, wait; stop them all (the last started
    first) however this ends: Airflow exits, Ctrl-C or SIGTERM."""
    with contextlib.ExitStack() as stack:
        server = SeaweedServer(
            workdir / "s3",
            bucket=record.bucket,
            s3_port=record.s3_port,
            access_key=record.access_key,
            secret_key=record.secret_key,
        )
        stack.callback(server.stop)
        server.start()
        print(f"SeaweedFS S3 at {server.endpoint_url} on {workdir / 's3'}", flush=True)
        if record.spark_connect:
            record = start_spark(workdir, record, stack)
        password = admin_password(Path(record.env["AIRFLOW_HOME"]))
        print_banner(record)
        log_path = workdir / "airflow-standalone.log"
        print(f"starting `airflow standalone` (its output: {log_path})", flush=True)
        log = stack.enter_context(log_path.open("ab"))
        process = start_group(["airflow", "standalone"], log=log, env=ui_environment(record, port))
        stack.callback(stop_group, process, 30.0)
        if wait_until_up(port, process):
            print(
                f"Airflow UI ready at http://localhost:{port}  user {ADMIN}  password "
                f"{password}\n(Ctrl-C or SIGTERM stops everything)",
                flush=True,
            )
        code = process.wait()
        print(f"`airflow standalone` exited ({code}); see {log_path}", file=sys.stderr)
    return code


def wait_until_up(port: int, process: Popen[bytes], timeout: float = 600.0) -> bool:
    """Whether Airflow's api-server answered its health check before `process` ended."""
    url = f"http://127.0.0.1:{port}/api/v2/monitor/health"
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(1)
    return False


def start_spark(workdir: Path, record: DemoRecord, stack: contextlib.ExitStack) -> DemoRecord:
    """A Spark Connect server for the tasks and the CLI, on the recorded port if it is
    free; the record says where it is now."""
    from devstack.spark_connect import SparkConnectServer

    wanted = record.recorded_spark_port()
    spark = SparkConnectServer(
        workdir / "spark-connect",
        port=wanted if wanted is not None and port_free(wanted) else None,
    )
    stack.callback(spark.stop)
    spark.start()
    print(f"Spark Connect server at {spark.url}", flush=True)
    assert spark.port is not None
    record = record.serving_spark(spark.url, spark.port)
    record.write(workdir)
    return record


def print_banner(record: DemoRecord) -> None:
    exports = "\n".join(record.cli_exports(PROJECT_ROOT, Path(sys.executable).parent))
    print(
        f"\nPoint the batchpoint CLI at this demo (pipeline {record.pipeline_ref}) while "
        f"this runs: paste\n\n{exports}\n\nthen e.g. `batchpoint checkpoints list`.\n",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
