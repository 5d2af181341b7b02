"""The demo's epochs through Airflow against the same pipeline's epochs without it.

In one run it starts what the demo starts (SeaweedFS, one devstack Spark Connect server,
Airflow on SQLite: demo.run and demo.airflow_env, reused), then
per epoch writes the same generated payments into two pipeline roots of the bucket and
runs the epoch twice: as a run of the `payments_checkpoint` DAG, exactly as the demo runs
it (connect mode: each operator task a thin client of the server), and in this process
through `LocalEpochRunner` on a classic local Spark session (as bench_peer runs it), on
the second root. Both publish the balances as an Iceberg table (each its own).

Before any figure it checks both roots' published sinks against the pandas reference
(demo.checks); if either differs it says so and exits 1 without figures. Then
it prints per epoch both wall times and the part of the Airflow epoch spent outside its
tasks (Airflow's own: starting and scheduling tasks, from the DAG run summary's task
durations); the median warm epoch (2..N) of each and their ratio; the Airflow path's
first epoch (the first after the server started) against its warm median; and per
operator the Spark jobs and stages each epoch's acks recorded. It stops everything and
exits 1 if a process it started is still alive (the demo's leftovers check).

    .venv/bin/python bench/bench_demo_epochs.py [--epochs 4] [--events 2000]

Targets (issue 28): warm Airflow/Local at most 1.5x; first/warm (Airflow) at most 2x.
The server is started exactly as the demo starts it (its warm-up opens the payments
operators' sessions too) and runs no UI, so the acks over Connect record no job counts
(LocalEpochRunner's do); `--ui` runs it with its UI on a free port so that they do, at
the cost of reading the server's REST API at every ack (about 0.3 s a task).

Airflow is up before the first epoch, as a scheduler is before a server (re)starts: a
run of the checkpoint DAG's shape with no-op tasks goes first (bench_spark_modes'),
touching neither Spark nor the store. It takes Airflow's own first-task start in this
process (its in-process execution API, seconds) out of the first epoch; the bench
prints it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (the checkout's demo/ and devstack/)

#: The LocalEpochRunner's pipeline root in the demo's bucket (the demo's own is /demo).
LOCAL_ROOT = "bench-local"
#: Its Iceberg table (the demo's is payments.balances), in the same catalog.
LOCAL_TABLE = "payments_local.balances"
Work = dict[str, tuple[int | None, int | None]]  # operator -> (Spark jobs, stages)


@dataclass
class Epoch:
    """One epoch's figures on both paths."""

    airflow_s: float
    airflow_tasks_s: float  # the sum of the DAG run's task durations
    local_s: float
    airflow_work: Work = field(default_factory=dict)
    local_work: Work = field(default_factory=dict)

    @property
    def airflow_own_s(self) -> float:
        return self.airflow_s - self.airflow_tasks_s


def spark_work(outcome: Any) -> Work:
    """Each operator's Spark jobs and stages as its acks recorded them (every subtask's
    ack carries its attempt's count)."""

    if outcome is None or outcome.completed is None:
        raise RuntimeError(f"the epoch's checkpoint did not complete: {outcome}")
    work: Work = {}
    for ack in outcome.completed.acks:
        operator = ack.task.operator
        work.setdefault(operator, (ack.metrics.spark_jobs, ack.metrics.spark_stages))
    return work


def connect_server(workdir: Path, ui: bool) -> Any:
    """The demo's server (demo.run.spark_server), with its UI on a free port
    when `ui` (the only way a Connect client counts its jobs)."""
    from demo.run import spark_server
    from devstack.seaweed import free_ports

    conf = {}
    if ui:
        conf = {"spark.ui.enabled": "true", "spark.ui.port": str(free_ports(1, "127.0.0.1")[0])}
    return spark_server(workdir, "connect", conf)


class LocalPath:
    """The same pipeline through LocalEpochRunner on its own root, in a child process
    (`--local-worker`): a process that holds a classic Spark session cannot open a Spark
    Connect one, so with the classic session here every Airflow task would run its client
    as a child process of its own, which the demo's tasks do not."""

    def __init__(self, s3: Any) -> None:
        from batchpoint.settings import Settings

        self.settings = Settings.from_env(root=f"s3://{s3.bucket}/{LOCAL_ROOT}")
        self.store = self.settings.store_ref.open()
        self.child = subprocess.Popen(
            [sys.executable, __file__, "--local-worker", self.settings.root],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.ask("ready")

    def ask(self, command: str) -> dict[str, Any]:
        """Send `command`, pass the child's other output through, return its answer."""
        assert self.child.stdin is not None and self.child.stdout is not None
        self.child.stdin.write(command + "\n")
        self.child.stdin.flush()
        for line in self.child.stdout:
            if line.startswith(ANSWER):
                return json.loads(line[len(ANSWER) :])
            sys.stdout.write(line)
        raise RuntimeError(f"the LocalEpochRunner process ended (exit {self.child.wait()})")

    def epoch(self) -> tuple[float, Work]:
        answer = self.ask("epoch")
        return answer["seconds"], {op: tuple(w) for op, w in answer["work"].items()}

    def close(self) -> None:
        if self.child.poll() is None:
            self.ask("stop")
            self.child.wait(timeout=120)


#: The prefix of the LocalEpochRunner process's answers on its stdout.
ANSWER = "@bench-local "


def local_worker(root: str) -> int:
    """The child's loop: a classic local Spark session (as bench_peer's) and the
    pipeline's LocalEpochRunner on `root`; one epoch per `epoch` line on stdin."""
    from batchpoint.ops.local_epoch import LocalEpochRunner
    from batchpoint.settings import Settings
    from batchpoint.spark.session import spark_session
    from demo.payments import build_pipeline

    logging.getLogger("py4j").setLevel(logging.WARNING)
    settings = Settings.from_env(root=root)
    spark = spark_session("bench-demo-epochs-local", "local[2]")
    pipeline = build_pipeline(balances_table=LOCAL_TABLE)
    runner = LocalEpochRunner(pipeline, settings.store_ref, spark, settings.checkpoint)

    def answer(**fields: Any) -> None:
        print(ANSWER + json.dumps(fields), flush=True)

    try:
        for command in sys.stdin:
            if command.strip() == "epoch":
                started = time.perf_counter()
                result = runner.run_epoch()
                seconds = time.perf_counter() - started
                answer(seconds=seconds, work=spark_work(result.outcome))
            elif command.strip() == "stop":
                answer(stopped=True)
                break
            else:
                answer(ready=True)
    finally:
        spark.stop()
    return 0


def table_checks(settings: Any, table: str) -> Any:
    """The demo's published checks (sinks and the Iceberg table's history against the
    pandas reference) on `settings`' root, its balances published as `table`."""
    from batchpoint.tables.binding import TableBinding
    from batchpoint.tables.service import sink_table
    from demo.checks import PublishedChecks

    class Checks(PublishedChecks):
        def balances_table(self) -> Any:
            binding = TableBinding(table)
            return sink_table(self.settings.store_ref, "payments", "balances_table", binding)

    return Checks(settings, settings.store_ref.open())


def write_input(stores: list[Any], epoch: int, events: int) -> None:
    """The epoch's payment files, the same in every root."""
    from demo.payments import SOURCE_ROOT
    from demo.payments_data import write_epoch_files

    for store in stores:
        write_epoch_files(
            store, SOURCE_ROOT, epoch, accounts=max(40, events // 10), events_per_epoch=events
        )


def start_airflow(demo: Any) -> float:
    """Airflow's first task in this process (its in-process execution API starts then,
    seconds, once per process): a run of the checkpoint DAG's shape with each task a
    no-op (bench_spark_modes' noop DAG), touching neither Spark nor the store. Returns
    its wall time."""
    from bench_spark_modes import noop_dag_like, run_dag
    from demo.say import say, step

    step("Airflow's first run in this process: the checkpoint DAG's shape, no-op tasks")
    noop = demo.airflow.quietly(lambda: noop_dag_like(demo.airflow.dags()["payments_checkpoint"]))
    run, seconds = run_dag(noop, demo.airflow.log_file)
    say(f"{noop.dag_id}: {run.state} in {seconds:.1f}s")
    return seconds


def run_epochs(demo: Any, local: LocalPath, epochs: int, events: int) -> list[Epoch]:
    """Each epoch through Airflow first (the first one is the first after the server
    started), then through LocalEpochRunner, on the same input."""
    from demo.say import say, step

    rows = []
    for n in range(epochs):
        step(f"epoch {n + 1} of {epochs}: {events} events, through Airflow, then locally")
        write_input([demo.store, local.store], n, events)
        summary = demo.run_dag("payments_checkpoint")
        coordinator = demo.coordinator
        airflow_work = spark_work(coordinator.get_outcome(coordinator.head.get().checkpoint_id))
        tasks_s = sum(t.seconds or 0.0 for t in summary.tasks)
        local_s, local_work = local.epoch()
        say(f"LocalEpochRunner: {local_s:.1f}s")
        rows.append(Epoch(summary.seconds, tasks_s, local_s, airflow_work, local_work))
    return rows


def checked(demo: Any, local: LocalPath) -> bool:
    """Both roots' sinks equal the pandas reference (the demo's check, said as it goes;
    its lines name the demo's table, the second root's is LOCAL_TABLE)."""
    from demo.payments import BALANCES_TABLE
    from demo.say import step

    step(f"checking what the Airflow path published ({demo.settings.root})")
    airflow_ok = table_checks(demo.settings, BALANCES_TABLE).exactly_once() == 0
    step(f"checking what LocalEpochRunner published ({local.settings.root}, {LOCAL_TABLE})")
    local_ok = table_checks(local.settings, LOCAL_TABLE).exactly_once() == 0
    return airflow_ok and local_ok


def fmt(work: tuple[int | None, int | None] | None) -> str:
    if work is None or work[0] is None:
        return "-"
    return f"{work[0]}/{work[1]}"


def report(rows: list[Epoch], server_up: float, warm_up: float | None, airflow_up: float) -> None:
    print("\nepoch  airflow s  (tasks s  outside tasks s)  local s  airflow/local")
    for n, r in enumerate(rows, 1):
        print(
            f"{n:5d} {r.airflow_s:10.2f} {r.airflow_tasks_s:9.2f} {r.airflow_own_s:16.2f}  "
            f"{r.local_s:8.2f} {r.airflow_s / r.local_s:13.2f}x"
        )
    warm = rows[1:]
    airflow_warm = statistics.median(r.airflow_s for r in warm)
    local_warm = statistics.median(r.local_s for r in warm)
    own_warm = statistics.median(r.airflow_own_s for r in warm)
    first = rows[0]
    print(
        f"warm epochs 2..{len(rows)} (median): Airflow {airflow_warm:.2f}s (outside tasks "
        f"{own_warm:.2f}s), LocalEpochRunner {local_warm:.2f}s: Airflow/Local "
        f"{airflow_warm / local_warm:.2f}x (target <= 1.5)"
    )
    print(
        f"first Airflow epoch after the server started: {first.airflow_s:.2f}s (outside "
        f"tasks {first.airflow_own_s:.2f}s), {first.airflow_s / airflow_warm:.2f}x its warm "
        f"median (target <= 2); the server was up in {server_up:.1f}s (warm-up "
        f"{warm_up or 0:.1f}s); Airflow's first task before it (no Spark) "
        f"{airflow_up:.1f}s"
    )
    print_work(rows)


def print_work(rows: list[Epoch]) -> None:
    """Per operator and epoch, jobs/stages through Airflow (Connect) and locally."""
    operators = list(rows[0].local_work) or list(rows[0].airflow_work)
    print("\nSpark jobs/stages per operator, as the acks recorded them (airflow | local)")
    epochs = "".join(f"{'epoch ' + str(n):>16s}" for n in range(1, len(rows) + 1))
    print(f"{'operator':16s}{epochs}")
    for op in operators:
        cells = [f"{fmt(r.airflow_work.get(op))} | {fmt(r.local_work.get(op))}" for r in rows]
        print(f"{op:16s}" + "".join(f"{c:>16s}" for c in cells))


def bench(workdir: Path, epochs: int, events: int, ui: bool) -> int:
    """Servers up, Airflow prepared, the epochs, the checks, the figures."""
    from demo.airflow_env import AirflowSetup, DemoAirflow
    from demo.run import PaymentsDemo, deployment_env, stop_spark
    from demo.say import step, timed
    from devstack.seaweed import SeaweedServer

    logging.getLogger("py4j").setLevel(logging.WARNING)
    step(f"starting SeaweedFS (S3) in {workdir / 's3'}")
    with SeaweedServer(workdir / "s3") as s3:
        started = time.monotonic()
        with connect_server(workdir, ui) as spark:
            server_up = time.monotonic() - started
            setup = AirflowSetup(workdir / "airflow")
            setup.apply()
            os.environ.update(deployment_env(s3, workdir, spark.url))
            airflow = DemoAirflow(workdir / "airflow-tasks.log")
            timed("Airflow's database migrated", lambda: airflow.quietly(setup.init_database))
            demo = PaymentsDemo(workdir, s3, airflow)
            local = LocalPath(s3)
            try:
                airflow_up = start_airflow(demo)
                rows = run_epochs(demo, local, epochs, events)
                ok = checked(demo, local)
            finally:
                local.close()
                airflow.quietly(stop_spark)
            warm_up = spark.warm_up_seconds
    if not ok:
        print("\nrefusing to print figures: a published sink differs from the reference")
        return 1
    report(rows, server_up, warm_up, airflow_up)
    return 0


def main(argv: list[str] | None = None) -> int:
    from demo.leftovers import mark_run, wait_for_none

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=4, help="epochs on each path (default 4)")
    parser.add_argument("--events", type=int, default=2000, help="events per epoch (default 2000)")
    parser.add_argument(
        "--ui", action="store_true", help="the server with its UI: acks count jobs over Connect"
    )
    parser.add_argument("--local-worker", metavar="ROOT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.local_worker:
        return local_worker(args.local_worker)
    if args.epochs < 2:
        parser.error("--epochs: at least 2 (a first epoch and a warm one)")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    workdir = Path(tempfile.mkdtemp(prefix="bench-demo-epochs-")).resolve()
    marker, result = mark_run(), 1
    try:
        result = bench(workdir, args.epochs, args.events, args.ui)
    finally:
        left = wait_for_none(marker)
        if result == 0:
            shutil.rmtree(workdir, ignore_errors=True)
        else:  # what went wrong is in its logs
            print(f"kept {workdir} (Airflow's and Spark's logs in it)", file=sys.stderr)
    if left:
        print("\nprocesses this bench started are still running:", file=sys.stderr)
        for process in left:
            print(f"   {process}", file=sys.stderr)
        return 1
    print("no process left behind")
    return result


if __name__ == "__main__":
    sys.exit(main())
