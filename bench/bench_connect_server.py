"""Does a long-lived Spark Connect server stay bounded under many operator tasks?

Runs N operator tasks of the payments pipeline (default 100: 25 epochs of 4 tasks) as
fresh client processes, one after the other like Airflow tasks, against one local Spark
Connect server (devstack.spark_connect), on a file:// root both share. Every
client joins the pipeline's server session (pipeline_session_id). Prints the server's
Python worker count and memory (RSS summed over its process group, from /proc) after
every 10 tasks (10 and 100 are the figures to compare), and each task's time split:
imports, connect, work.

    python bench/bench_connect_server.py [--tasks 100] [--remote sc://host:port]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (the checkout's demo/ and devstack/)

TASKS = ("dedup", "balances", "balances_table", "alerts")


# -- one client, in its own process --------------------------------------------------------


def client(argv: list[str]) -> int:
    """Run one operator task and print its time split as one JSON line."""
    started = time.monotonic()
    import pyspark.sql.connect.session  # noqa: F401 - timed with the imports

    from batchpoint.runtime.loader import load_pipeline
    from batchpoint.runtime.runner import OperatorRunner
    from batchpoint.settings import Settings
    from batchpoint.spark.session import connect_session, pipeline_session_id

    remote, checkpoint_id, operator = argv[0], int(argv[1]), argv[2]
    imported = time.monotonic()
    pipeline = load_pipeline("demo.payments:pipeline")
    spark = connect_session(
        remote, f"bench-{operator}", session_id=pipeline_session_id(pipeline.name, remote)
    )
    connected = time.monotonic()
    settings = Settings.from_env()
    runner = OperatorRunner(pipeline, settings.store_ref, spark, log=lambda line: None)
    runner.run(checkpoint_id, operator)
    done = time.monotonic()
    split = {
        "imports": imported - started,
        "connect": connected - imported,
        "work": done - connected,
    }
    print(json.dumps(split), flush=True)
    return 0


# -- the server, seen from /proc -----------------------------------------------------------


def server_footprint(pgid: int) -> tuple[int, int, float]:
    """(processes, Python workers, RSS MiB) of the server's process tree. Workers are
    pyspark's daemon and the workers it forks (they keep its command line)."""
    from devstack.processes import descendants

    members = [pgid, *descendants(pgid)]
    workers = 0
    rss_kib = 0
    for pid in members:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if b"pyspark.daemon" in cmdline or b"pyspark.worker" in cmdline:
            workers += 1
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss_kib += int(line.split()[1])
    return len(members), workers, rss_kib / 1024


# -- the run ---------------------------------------------------------------------------------


@dataclass
class Run:
    """The tasks run so far: each one's time split (from the client) and wall time."""

    splits: list[dict[str, float]] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)

    @property
    def done(self) -> int:
        return len(self.walls)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--client", nargs=3, metavar=("REMOTE", "CHECKPOINT", "OPERATOR"))
    args = parser.parse_args(argv)
    if args.client:
        return client(args.client)

    from batchpoint.runtime.driver import PipelineDriver
    from batchpoint.storage import StoreRef
    from demo.payments import build_pipeline
    from devstack.spark_connect import SparkConnectServer

    with tempfile.TemporaryDirectory(prefix="bench-connect-") as tmp:
        root = Path(tmp) / "store"
        ref = StoreRef.of(root.as_uri())
        driver = PipelineDriver(build_pipeline(parallelism=2), ref)
        env = {k: v for k, v in os.environ.items() if k != "SPARK_CONNECT_MODE_ENABLED"} | {
            "BATCHPOINT_ROOT": ref.uri
        }
        started = time.monotonic()
        with SparkConnectServer(Path(tmp) / "server") as server:
            print(f"server {server.url} up in {time.monotonic() - started:.1f}s", flush=True)
            run = Run()
            if not run_tasks(driver, server, env, args.tasks, run):
                return 1
            print_summary(run)
    return 0


def run_tasks(driver: Any, server: Any, env: dict[str, str], tasks: int, run: Run) -> bool:
    """`tasks` operator tasks, epoch after epoch (each epoch's files written first, its
    checkpoint finalized after its four tasks); False if a client failed."""
    from batchpoint.ops.epoch import finalize
    from demo.payments import SOURCE_ROOT
    from demo.payments_data import write_epoch_files

    epoch = 0
    while run.done < tasks:
        write_epoch_files(driver.store, SOURCE_ROOT, epoch, accounts=40, events_per_epoch=300)
        cid = driver.trigger().checkpoint_id
        for operator in TASKS:
            if run.done >= tasks:
                break
            if not run_task(server, env, cid, operator, run):
                return False
            if run.done % 10 == 0 or run.done == tasks:
                procs, workers, rss = server_footprint(server.pid or 0)
                print(
                    f"after {run.done} tasks: server processes {procs}, Python workers "
                    f"(daemon included) {workers}, RSS {rss:.0f} MiB",
                    flush=True,
                )
        if run.done % 4 == 0 or run.done >= tasks:
            finalize(driver, cid)
        epoch += 1
    return True


def run_task(server: Any, env: dict[str, str], cid: int, operator: str, run: Run) -> bool:
    """One operator task as a fresh client process, its split said as it ends (so that
    a cut-short run still tells); False (its stderr said) if it failed."""
    t0 = time.monotonic()
    result = subprocess.run(
        [sys.executable, __file__, "--client", server.url, str(cid), operator],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    run.walls.append(time.monotonic() - t0)
    if result.returncode != 0:
        print(result.stderr[-3000:], file=sys.stderr)
        return False
    split = json.loads(result.stdout.strip().splitlines()[-1])
    run.splits.append(split)
    print(
        f"task {run.done:3d} {operator:14s} wall {run.walls[-1]:5.2f}s = imports "
        f"{split['imports']:.2f}s + connect {split['connect']:.2f}s + work "
        f"{split['work']:.2f}s (+ process start/exit)",
        flush=True,
    )
    return True


def print_summary(run: Run) -> None:
    """Medians and maxima of each part and of the wall, then the medians after warm-up."""
    splits, walls = run.splits, run.walls
    for name in ("imports", "connect", "work"):
        values = [s[name] for s in splits]
        print(f"{name:8s} median {statistics.median(values):5.2f}s  max {max(values):5.2f}s")
    print(f"task wall median {statistics.median(walls):5.2f}s  max {max(walls):5.2f}s")
    warm = splits[10:] or splits
    print(
        "after warm-up (tasks 11+): imports "
        f"{statistics.median(s['imports'] for s in warm):.2f}s, connect "
        f"{statistics.median(s['connect'] for s in warm):.2f}s, work "
        f"{statistics.median(s['work'] for s in warm):.2f}s (medians)"
    )


if __name__ == "__main__":
    sys.exit(main())
