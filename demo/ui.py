"""Open the Airflow UI on a demo kept with `./dev demo --keep DIR`:

    ./dev ui DIR [--port 8080]

It restarts SeaweedFS on the demo's data (same port and keys, so the recorded storage
settings stay valid), starts a local Spark Connect server for the operator tasks (connect
mode, as in the demo) and runs `airflow standalone` (api-server, scheduler,
dag-processor, triggerer) on the demo's SQLite database, with the demo's BATCHPOINT_*
settings. The checkpoint history is under Browse → Checkpoints; take a savepoint by
triggering `payments_savepoint` with its form. Ctrl-C stops everything, and it checks
that no process it started is left.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from batchpoint.errors import BatchpointError
from demo.airflow_env import python_path
from demo.leftovers import mark_run, wait_for_none
from demo.run import STATE_FILE
from devstack.seaweed import SeaweedServer


def load_state(workdir: Path) -> dict[str, Any]:
    path = workdir / STATE_FILE
    if not path.is_file():
        raise SystemExit(
            f"error: {path} not found: run `./dev demo --keep {workdir}` first "
            "(it records how to reopen its S3 and Airflow there)"
        )
    return json.loads(path.read_text())


def ui_environment(
    state: dict[str, Any], port: int, spark_remote: str | None = None
) -> dict[str, str]:
    env = {**os.environ, **state["env"]}
    if spark_remote:
        # This run's server (the demo's is gone with the demo).
        env.update(BATCHPOINT_SPARK_MODE="connect", BATCHPOINT_SPARK_REMOTE=spark_remote)
    env.update(
        {
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev ui", description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="the folder given to ./dev demo --keep")
    parser.add_argument("--port", type=int, default=8080, help="Airflow UI port (8080)")
    args = parser.parse_args(argv)
    workdir = args.dir.resolve()
    state = load_state(workdir)
    marker = mark_run()
    try:
        return serve(workdir, state, args.port)
    finally:
        left = wait_for_none(marker, timeout=30)
        for process in left:
            print(f"error: still running after the stop: {process}", file=sys.stderr)


def serve(workdir: Path, state: dict[str, Any], port: int) -> int:
    server = SeaweedServer(
        workdir / "s3",
        bucket=state["bucket"],
        s3_port=state["s3_port"],
        access_key=state["access_key"],
        secret_key=state["secret_key"],
    )
    try:
        server.start()
    except BatchpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"SeaweedFS S3 at {server.endpoint_url} on {workdir / 's3'}", flush=True)
    spark = None
    if state["env"].get("BATCHPOINT_SPARK_MODE", "connect") == "connect":
        from devstack.spark_connect import SparkConnectServer

        spark = SparkConnectServer(workdir / "spark-connect")
        try:
            spark.start()
        except BatchpointError as exc:
            server.stop()
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"Spark Connect server at {spark.url}", flush=True)
    print(
        f"starting `airflow standalone` on http://localhost:{port} (it prints the "
        "admin password; Ctrl-C stops it)",
        flush=True,
    )
    process = subprocess.Popen(
        ["airflow", "standalone"],
        env=ui_environment(state, port, spark.url if spark else None),
        start_new_session=True,
    )
    try:
        return process.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        # Its own process group: the scheduler's and api-server's children go with it.
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        if spark is not None:
            spark.stop()
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
