"""The demo's pipeline through the checkpoint DAG in submit and in connect mode, on the
same data, in one run.

    .venv/bin/python bench/bench_spark_modes.py [--epochs 3] [--modes submit,connect]

It starts SeaweedFS and one local Spark Connect server, prepares Airflow (SQLite) and
runs the `payments_checkpoint` DAG with dag.test() (the scheduler's own task-running
code, in this process), alternating the modes epoch by epoch so that both see the same
background load; each mode has its own storage prefix with identical input. It prints:

- per epoch and mode, the run's wall time, and the ratio connect/submit;
- per operator task, the split of its time: `start` (Airflow: from the previous task's
  end to this task's start, plus the task's own work before its job starts), `connect`
  (the job's start to its first line from the operator runner: imports and the Spark
  session, a JVM in submit mode, a Connect session in connect mode, where the client
  runs in the task's process and pays its imports once), `work` (the runner's first
  line to its acks: the Spark work, the executors' state I/O included), `storage` (the
  job's driver-side storage requests, count and seconds, counted by a wrapper around
  botocore's HTTP send in a job process of its own: submit mode only), `rest` (acks to
  exit);
- whether a `java` process was started under the task (a child of the job's process in
  submit mode, a new child of this process in connect mode);
- an epoch with no new input against a no-op DAG of the same shape (the same task
  graph, each task a Python callable that does nothing), and their ratio: once as
  deployed (BATCHPOINT_SKIP_IDLE_EPOCHS on: the trigger skips the run) and once forced
  through every task (off).

Heavy (a spark-submit JVM per operator task in submit mode): about 3 minutes an epoch
on 2 busy cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (the checkout's demo/ and devstack/)
from spark_modes_jobs import SITECUSTOMIZE, JobRecorder, JobTiming, task_rows

BENCH_DIR = Path(__file__).resolve().parent
DATA = {"accounts": 200, "events_per_epoch": 2_000}


@dataclass
class EpochRun:
    mode: str
    epoch: int
    state: str
    seconds: float
    jobs: list[JobTiming]
    rows: list[str] = field(default_factory=list)


def run_dag(dag: Any, log_file: Path) -> tuple[Any, float]:
    from demo.airflow_env import output_to

    started = time.monotonic()
    with output_to(log_file):
        run = dag.test()
    return run, time.monotonic() - started


def noop_dag_like(dag: Any) -> Any:
    """A DAG with `dag`'s task graph (ids, edges, trigger rules), each task a Python
    callable that does nothing: what Airflow alone costs for an epoch's shape."""
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG

    with DAG(f"{dag.dag_id}_noop", schedule=None, start_date=dag.start_date) as noop:
        made = {
            t.task_id: PythonOperator(
                task_id=t.task_id, python_callable=lambda: None, trigger_rule=t.trigger_rule
            )
            for t in dag.tasks
        }
    for t in dag.tasks:
        for upstream in t.upstream_task_ids:
            made[upstream] >> made[t.task_id]
    return serialized(noop)


def serialized(dag: Any) -> Any:
    """Write `dag` to the metadata database as the dag-processor would: dag.test() runs
    only DAGs it finds serialized, and it re-parses only the DAGs folder, where this one
    is not."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()
    empty = Path(tempfile.mkdtemp(prefix="noop-dag-"))
    bag = DagBag(dag_folder=str(empty))
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)
    return dag


class Bench:
    """The shared SeaweedFS and Spark Connect server, Airflow's database, and each
    mode's deployment (its own storage prefix and catalog) to load the DAGs with."""

    def __init__(self, workdir: Path, s3: Any, server: Any, recorder: JobRecorder) -> None:
        self.workdir, self.s3, self.server, self.recorder = workdir, s3, server, recorder
        self.log_file = workdir / "airflow-tasks.log"
        self.base = {k: v for k, v in os.environ.items() if not k.startswith("BATCHPOINT_")}

    def environment(self, mode: str) -> dict[str, str]:
        from demo.run import deployment_env

        connect = self.server.url if mode == "connect" else None
        env = deployment_env(self.s3, self.workdir, connect)
        env["BATCHPOINT_ROOT"] = f"s3://{self.s3.bucket}/bench-{mode}"
        # Its own Iceberg catalog too: a table belongs to the storage it was created on,
        # and both modes publish `payments.balances`.
        env["BATCHPOINT_TABLE_CATALOG"] = f"sqlite:///{self.workdir / f'catalog-{mode}.db'}"
        env["BATCHPOINT_TASK_RETRIES"] = "0"
        return env

    def dags(self, mode: str, **extra: str) -> dict[str, Any]:
        from batchpoint.airflow.config import AirflowDeployment
        from batchpoint.airflow.dag_factory import load_dags

        os.environ.clear()
        os.environ.update({**self.base, **self.environment(mode), **extra})
        return load_dags(AirflowDeployment.from_env())

    def one_epoch(self, mode: str, epoch: int, new_input: bool, **extra: str) -> EpochRun:
        from batchpoint.settings import Settings
        from demo.payments import SOURCE_ROOT
        from demo.payments_data import write_epoch_files

        dag = self.dags(mode, **extra)["payments_checkpoint"]
        if new_input:
            store = Settings.from_env().store_ref.open()
            write_epoch_files(store, SOURCE_ROOT, epoch, **DATA)
        run, seconds = run_dag(dag, self.log_file)
        jobs = self.recorder.take()
        return EpochRun(mode, epoch, str(run.state), seconds, jobs, task_rows(run, jobs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--modes", default="submit,connect")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]

    workdir = Path(tempfile.mkdtemp(prefix="bench-spark-modes-"))
    set_up(workdir)

    from devstack.seaweed import SeaweedServer
    from devstack.spark_connect import SparkConnectServer

    recorder = JobRecorder()
    recorder.install()
    print(f"workdir {workdir} (task logs: {workdir / 'airflow-tasks.log'})", flush=True)
    with SeaweedServer(workdir / "s3") as s3:
        started = time.monotonic()
        with SparkConnectServer(workdir / "spark-connect") as server:
            print(f"Spark Connect server up in {time.monotonic() - started:.1f}s", flush=True)
            bench = Bench(workdir, s3, server, recorder)
            runs = run_epochs(bench, modes, args.epochs)
            idle_ratios = run_idle_epochs(bench, modes, args.epochs)
    print_summary(runs, modes, idle_ratios)
    return 0


def set_up(workdir: Path) -> None:
    """The storage-timing sitecustomize on the jobs' PYTHONPATH, and Airflow (SQLite)
    configured and its database initialized."""
    site = workdir / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(site), os.environ.get("PYTHONPATH")])
    )

    from demo.airflow_env import AirflowSetup, output_to

    setup = AirflowSetup(workdir / "airflow")
    setup.apply()
    with output_to(workdir / "airflow-tasks.log"):
        setup.init_database()


def run_epochs(bench: Bench, modes: list[str], epochs: int) -> list[EpochRun]:
    """Each epoch in each mode, alternating, with new input: its wall and task rows,
    and the ratio connect/submit."""
    runs: list[EpochRun] = []
    for epoch in range(epochs):
        for mode in modes:
            result = bench.one_epoch(mode, epoch, new_input=True)
            runs.append(result)
            print(
                f"epoch {epoch} {mode:<8} {result.state:<8} wall {result.seconds:6.1f}s",
                flush=True,
            )
            for row in result.rows:
                print(row, flush=True)
        walls = {r.mode: r.seconds for r in runs if r.epoch == epoch}
        if {"submit", "connect"} <= set(walls):
            ratio = walls["connect"] / walls["submit"]
            print(f"epoch {epoch}: connect/submit = {ratio:.2f}", flush=True)
    return runs


def run_idle_epochs(bench: Bench, modes: list[str], epoch: int) -> dict[str, float]:
    """An epoch with no new input against a no-op DAG of the same shape, skipped as
    deployed and forced through; each mode's skipped one's ratio to the no-op DAG."""
    idle_ratios: dict[str, float] = {}
    print("\nan epoch with no new input vs a no-op DAG of the same shape:", flush=True)
    for mode in modes:
        dag = bench.dags(mode)["payments_checkpoint"]
        noop_run, noop_seconds = run_dag(noop_dag_like(dag), bench.log_file)
        print(f"  {mode:<8} no-op DAG: {noop_run.state} {noop_seconds:6.1f}s", flush=True)
        # The default skips an idle epoch at its trigger; the second run forces it
        # through every task, as a pipeline whose operators act without input would.
        for label, extra in [
            ("skipped (default)", {}),
            ("forced to run", {"BATCHPOINT_SKIP_IDLE_EPOCHS": "false"}),
        ]:
            empty = bench.one_epoch(mode, epoch, False, **extra)
            ratio = empty.seconds / noop_seconds
            if not extra:
                idle_ratios[mode] = ratio
            print(
                f"  {mode:<8} no input, {label}: {empty.state} {empty.seconds:6.1f}s;"
                f" ratio to the no-op DAG {ratio:.2f}",
                flush=True,
            )
            for row in empty.rows:
                print(row, flush=True)
    return idle_ratios


def print_summary(runs: list[EpochRun], modes: list[str], idle_ratios: dict[str, float]) -> None:
    print("\nsummary (medians over epochs):", flush=True)
    medians = {}
    for mode in modes:
        walls = [r.seconds for r in runs if r.mode == mode]
        if walls:
            medians[mode] = statistics.median(walls)
            java = any(j.java_children for r in runs if r.mode == mode for j in r.jobs)
            print(
                f"  {mode:<8} epoch wall median {medians[mode]:6.1f}s "
                f"(all: {', '.join(f'{w:.1f}' for w in walls)}); java under a task: "
                f"{'yes' if java else 'no'}",
                flush=True,
            )
    if {"submit", "connect"} <= set(medians):
        print(f"  connect/submit: {medians['connect'] / medians['submit']:.2f}", flush=True)
    for mode, ratio in idle_ratios.items():
        print(f"  {mode:<8} idle epoch / no-op DAG: {ratio:.2f}", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH_DIR.parent))
    sys.exit(main())
