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
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
DATA = {"accounts": 200, "events_per_epoch": 2_000}

#: Loaded into the operator job's interpreter (PYTHONPATH): times botocore's HTTP sends
#: of the job's own process and prints the total at exit.
SITECUSTOMIZE = """
import sys
if "run_operator" in " ".join(getattr(sys, "orig_argv", [])):
    import atexit, importlib.abc, importlib.util, time
    _stats = [0, 0.0]

    def _patch(module):
        send = module.URLLib3Session.send
        def timed(self, request):
            started = time.perf_counter()
            try:
                return send(self, request)
            finally:
                _stats[0] += 1
                _stats[1] += time.perf_counter() - started
        module.URLLib3Session.send = timed

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "botocore.httpsession":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            loader = spec.loader
            exec_module = loader.exec_module
            def exec_and_patch(module):
                exec_module(module)
                _patch(module)
            loader.exec_module = exec_and_patch
            return spec

    sys.meta_path.insert(0, _Finder())
    atexit.register(lambda: print(f"[bench-storage] {_stats[0]} {_stats[1]:.3f}", flush=True))
"""


@dataclass
class JobTiming:
    operator: str
    called: float
    spawned: float = 0.0
    first_runner_line: float | None = None
    acks_line: float | None = None
    exited: float = 0.0
    storage_requests: int = 0
    storage_seconds: float = 0.0
    java_children: set[str] = field(default_factory=set)

    def saw(self, line: str) -> None:
        """Times the phases from one output line of the job."""
        now = time.monotonic()
        if line.startswith("[bench-storage]"):
            count, seconds = line.split()[1:3]
            self.storage_requests, self.storage_seconds = int(count), float(seconds)
        elif line.startswith(f"[{self.operator}]"):
            if self.first_runner_line is None:
                self.first_runner_line = now
            if ": acks " in line:
                self.acks_line = now


class JobRecorder:
    """Wraps the launchers' `run` (the real one runs) to time each job's phases from its
    output lines and to look for `java` among its child processes."""

    def __init__(self) -> None:
        self.jobs: list[JobTiming] = []

    def install(self) -> None:
        import psutil

        from batchpoint.airflow import hooks

        real_run = hooks.OperatorJobLauncher.run
        recorder = self

        def run(self: Any, argv: list[str], env: Any, log: Any, tail_lines: int = 40) -> Any:
            operator = argv[argv.index("--operator") + 1]
            timing = JobTiming(operator, called=time.monotonic())
            recorder.jobs.append(timing)
            done = threading.Event()

            def watch() -> None:
                while not done.is_set():
                    process = self._process
                    if process is not None:
                        if not timing.spawned:
                            timing.spawned = time.monotonic()
                        try:
                            for child in psutil.Process(process.pid).children(recursive=True):
                                if "java" in child.name():
                                    timing.java_children.add(child.name())
                        except psutil.Error:
                            pass
                    done.wait(0.1)

            def record(line: str) -> None:
                timing.saw(line)
                log(line)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            try:
                return real_run(self, argv, env, record, tail_lines)
            finally:
                timing.exited = time.monotonic()
                done.set()
                watcher.join()

        hooks.OperatorJobLauncher.run = run  # type: ignore[method-assign]

        real_launch = hooks.ConnectLauncher.launch

        def launch(
            self: Any, settings: Any, checkpoint_id: int, operator: str, attempt: str, log: Any
        ) -> Any:
            if not self.runs_here():
                return real_launch(self, settings, checkpoint_id, operator, attempt, log)
            # The client in this process: its "connect" is the session (and, the first
            # time, the imports); a JVM would be a new java child of this process.
            me = psutil.Process()
            before = {c.pid for c in me.children(recursive=True) if "java" in c.name()}
            timing = JobTiming(operator, called=time.monotonic(), spawned=time.monotonic())
            recorder.jobs.append(timing)

            def record(line: str) -> None:
                timing.saw(line)
                log(line)

            try:
                return real_launch(self, settings, checkpoint_id, operator, attempt, record)
            finally:
                timing.exited = time.monotonic()
                timing.java_children = {
                    c.name()
                    for c in me.children(recursive=True)
                    if "java" in c.name() and c.pid not in before
                }

        hooks.ConnectLauncher.launch = launch  # type: ignore[method-assign]

    def take(self) -> list[JobTiming]:
        jobs, self.jobs = self.jobs, []
        return jobs


@dataclass
class EpochRun:
    mode: str
    epoch: int
    state: str
    seconds: float
    jobs: list[JobTiming]
    rows: list[str] = field(default_factory=list)


def run_dag(dag: Any, log_file: Path) -> tuple[Any, float]:
    from batchpoint.demo.airflow_env import output_to

    started = time.monotonic()
    with output_to(log_file):
        run = dag.test()
    return run, time.monotonic() - started


def task_rows(run: Any, jobs: list[JobTiming]) -> list[str]:
    tis = sorted(
        (ti for ti in run.get_task_instances() if ti.start_date is not None),
        key=lambda ti: ti.start_date,
    )
    by_operator = {j.operator: j for j in jobs}  # the last try of each
    rows = []
    previous_end = None
    for ti in tis:
        gap = (ti.start_date - previous_end).total_seconds() if previous_end else 0.0
        previous_end = ti.end_date or previous_end
        duration = ti.duration or 0.0
        job = by_operator.get(ti.task_id.removeprefix("operators."))
        if job is None or not ti.task_id.startswith("operators."):
            rows.append(f"    {ti.task_id:<24} {duration:6.1f}s  (start gap {gap:4.1f}s)")
            continue
        # the task's own time outside its job: settings, hook, connection, XCom
        in_task = duration - (job.exited - job.called)
        first = job.first_runner_line or job.exited
        acks = job.acks_line or job.exited
        rows.append(
            f"    {ti.task_id:<24} {duration:6.1f}s  start {gap + max(in_task, 0):4.1f}s"
            f"  connect {first - (job.spawned or job.called):5.1f}s"
            f"  work {acks - first:5.1f}s"
            f"  storage {job.storage_requests:4d} req {job.storage_seconds:5.2f}s"
            f"  rest {job.exited - acks:4.1f}s"
            f"  java child: {'yes' if job.java_children else 'no'}"
        )
    return rows


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--modes", default="submit,connect")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]

    workdir = Path(tempfile.mkdtemp(prefix="bench-spark-modes-"))
    site = workdir / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(site), os.environ.get("PYTHONPATH")])
    )

    from batchpoint.demo.airflow_env import AirflowSetup, output_to

    setup = AirflowSetup(workdir / "airflow")
    setup.apply()
    log_file = workdir / "airflow-tasks.log"
    with output_to(log_file):
        setup.init_database()

    from batchpoint.demo.payments import SOURCE_ROOT
    from batchpoint.demo.payments_data import write_epoch_files
    from batchpoint.demo.run import deployment_env
    from batchpoint.devstack.seaweed import SeaweedServer
    from batchpoint.devstack.spark_connect import SparkConnectServer
    from batchpoint.settings import Settings

    recorder = JobRecorder()
    recorder.install()
    runs: list[EpochRun] = []
    idle_ratios: dict[str, float] = {}
    print(f"workdir {workdir} (task logs: {log_file})", flush=True)
    with SeaweedServer(workdir / "s3") as s3:
        started = time.monotonic()
        with SparkConnectServer(workdir / "spark-connect") as server:
            print(f"Spark Connect server up in {time.monotonic() - started:.1f}s", flush=True)
            base = {k: v for k, v in os.environ.items() if not k.startswith("BATCHPOINT_")}

            def environment(mode: str) -> dict[str, str]:
                env = deployment_env(s3, workdir, server.url if mode == "connect" else None)
                env["BATCHPOINT_ROOT"] = f"s3://{s3.bucket}/bench-{mode}"
                # Its own Iceberg catalog too: a table belongs to the storage it was
                # created on, and both modes publish `payments.balances`.
                env["BATCHPOINT_TABLE_CATALOG"] = f"sqlite:///{workdir / f'catalog-{mode}.db'}"
                env["BATCHPOINT_TASK_RETRIES"] = "0"
                return env

            def dags(mode: str, **extra: str) -> dict[str, Any]:
                from batchpoint.airflow.config import AirflowDeployment
                from batchpoint.airflow.dag_factory import load_dags

                os.environ.clear()
                os.environ.update({**base, **environment(mode), **extra})
                return load_dags(AirflowDeployment.from_env())

            def one_epoch(mode: str, epoch: int, new_input: bool, **extra: str) -> EpochRun:
                dag = dags(mode, **extra)["payments_checkpoint"]
                if new_input:
                    store = Settings.from_env().store_ref.open()
                    write_epoch_files(store, SOURCE_ROOT, epoch, **DATA)
                run, seconds = run_dag(dag, log_file)
                jobs = recorder.take()
                return EpochRun(mode, epoch, str(run.state), seconds, jobs, task_rows(run, jobs))

            for epoch in range(args.epochs):
                for mode in modes:
                    result = one_epoch(mode, epoch, new_input=True)
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

            print("\nan epoch with no new input vs a no-op DAG of the same shape:", flush=True)
            for mode in modes:
                dag = dags(mode)["payments_checkpoint"]
                noop_run, noop_seconds = run_dag(noop_dag_like(dag), log_file)
                print(f"  {mode:<8} no-op DAG: {noop_run.state} {noop_seconds:6.1f}s", flush=True)
                # The default skips an idle epoch at its trigger; the second run forces it
                # through every task, as a pipeline whose operators act without input would.
                for label, extra in [
                    ("skipped (default)", {}),
                    ("forced to run", {"BATCHPOINT_SKIP_IDLE_EPOCHS": "false"}),
                ]:
                    empty = one_epoch(mode, args.epochs, False, **extra)
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
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH_DIR.parent))
    sys.exit(main())
