"""The compatibility job's run inside one environment (bench/compat.py makes it and
starts this with its interpreter): the installed batchpoint wheel with one Spark and one
Airflow version, the checkout's demo/ and devstack/ on PYTHONPATH, never its include/.

    <env>/bin/python bench/compat_run.py WORKDIR [--epochs 2]

In WORKDIR, timing each phase:

1. servers: SeaweedFS and the Spark Connect server (warmed for the payments operators);
2. parse: Airflow's DagBag parses the checkout's dags/ folder (the three payments DAGs,
   no import error), and the installed plugin and provider entry points load;
3. airflow-db: the SQLite metadata database is migrated (and, on Airflow 3.0 and 3.1, the
   DAGs and their assets stored in it as the DAG processor stores them);
4. epochs: new payments, then a run of `payments_checkpoint` (dag.test(), each operator
   task a Connect client), EPOCHS times; each checkpoint must complete;
5. restore: `payments_restore` back to the first checkpoint (quality gate off, as its
   form allows with the confirmation), then one more epoch, which must continue from it;
6. check: the published sinks against the pandas reference at the head's barrier.

It prints a line per phase and, last, one line `@compat {json}`: the versions, each
phase's seconds and the first failure (None when all passed). Exit 0 when all passed.
Airflow's and Spark's own output go to WORKDIR/airflow-tasks.log.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata as md
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the checkout's demo/ and devstack/ (not in the wheel)
    sys.path.append(str(ROOT))

#: The payments pipeline with file sinks: its Iceberg table needs the `tables` extra,
#: which cannot share an environment with Airflow 3.0 or 3.1 (README, Compatibility).
PIPELINE_REF = "demo.payments:pipeline"
DAGS = ["payments_checkpoint", "payments_restore", "payments_savepoint"]
#: A small epoch: the job checks that the versions work, not how fast.
DATA = {"accounts": 100, "events_per_epoch": 500}
#: The prefix of the result line.
RESULT = "@compat "


class PhaseFailed(Exception):
    """A phase did not do what the job checks; the message says what."""


class Phases:
    """Runs the phases in order, timing each; the first failure ends the run."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.failure: str | None = None

    def run(self, name: str, step: Callable[[], str]) -> None:
        if self.failure is not None:
            return
        started = time.monotonic()
        detail = ""
        try:
            detail = step()
        except Exception as exc:
            self.failure = f"{name}: {type(exc).__name__}: {exc}"
            traceback.print_exc()
        self.seconds[name] = round(time.monotonic() - started, 1)
        said = f"FAILED {self.failure}" if self.failure else f"ok     {detail}"
        print(f"{name:<11} {self.seconds[name]:6.1f}s  {said}", flush=True)


def versions() -> dict[str, str]:
    """The versions that ran, and where batchpoint was imported from (the environment's
    site-packages, not the checkout)."""
    import batchpoint

    found = {d: md.version(d) for d in ("pyspark", "apache-airflow")}
    return {**found, "batchpoint": batchpoint.__file__}


def parse_dags() -> str:
    """The checkout's dags/ through Airflow's DagBag; the installed provider's entry
    points (the UI plugin, the provider info) load."""
    from airflow.models.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))  # examples off: AIRFLOW__CORE__LOAD_EXAMPLES
    if bag.import_errors or sorted(bag.dag_ids) != DAGS:
        raise PhaseFailed(f"DAGs {sorted(bag.dag_ids)}, import errors {bag.import_errors}")
    groups = ("airflow.plugins", "apache_airflow_provider")
    loaded = [
        ep.load() for g in groups for ep in md.entry_points(group=g) if ep.dist.name == "batchpoint"
    ]
    if len(loaded) != len(groups):
        raise PhaseFailed(f"batchpoint's entry points: {loaded}, expected one of each {groups}")
    return f"{', '.join(sorted(bag.dag_ids))}; plugin and provider entry points load"


class PaymentsEpochs:
    """The demo's pipeline driven through its DAGs, as demo.run drives it."""

    def __init__(self, workdir: Path, airflow: Any) -> None:
        from batchpoint.protocol.coordinator import CheckpointCoordinator
        from batchpoint.settings import Settings

        self.airflow = airflow
        self.settings = Settings.from_env()
        self.store = self.settings.store_ref.open()
        self.coordinator = CheckpointCoordinator(self.store, "payments", self.settings.checkpoint)
        self.epoch = 0
        self.completed: list[int] = []

    def run_dag(self, dag_id: str, conf: dict[str, Any] | None = None) -> None:
        summary = self.airflow.run(dag_id, conf)
        if not summary.ok:
            tasks = ", ".join(f"{t}={s}" for t, s in summary.task_states().items())
            raise PhaseFailed(f"{dag_id} {summary.state} ({tasks}); see airflow-tasks.log")

    def head(self) -> int:
        return self.coordinator.head.get().checkpoint_id

    def checkpoint(self) -> int:
        from demo.payments import SOURCE_ROOT
        from demo.payments_data import write_epoch_files

        write_epoch_files(self.store, SOURCE_ROOT, self.epoch, **DATA)
        self.epoch += 1
        self.run_dag("payments_checkpoint")
        head = self.head()
        outcome = self.coordinator.get_outcome(head)
        if outcome is None or outcome.completed is None:
            raise PhaseFailed(f"checkpoint {head} did not complete: {outcome}")
        self.completed.append(head)
        return head

    def epochs(self, count: int) -> str:
        for _ in range(count):
            self.checkpoint()
        return f"checkpoints {', '.join(map(str, self.completed))} completed"

    def restore_and_continue(self) -> str:
        from batchpoint.runtime.restore_options import ungated_phrase

        first = self.completed[0]
        conf = {
            "source": str(first),
            "quality_gate": False,
            "confirm_ungated": ungated_phrase("payments"),
        }
        self.run_dag("payments_restore", conf)
        if self.head() != first:
            raise PhaseFailed(f"the restore left the head at {self.head()}, not {first}")
        after = self.checkpoint()
        base = self.coordinator.get_outcome(after).pending.base_checkpoint_id
        if base != first:
            raise PhaseFailed(f"checkpoint {after} continued from {base}, not {first}")
        return f"restored {first}; checkpoint {after} continued from it"

    def check_sinks(self) -> str:
        import pandas as pd

        from batchpoint.protocol.sinks import read_sink_table
        from demo.payments import SOURCE_ROOT
        from demo.payments_reference import compute_reference

        head = self.coordinator.completed.get(self.head())
        expected = compute_reference(self.store, SOURCE_ROOT, upto=head.pending.barrier["events"])
        for sink, frame in (("balances_table", expected.balances), ("alerts", expected.alerts)):
            got = read_sink_table(self.store, "payments", sink).to_pandas()
            got = got.sort_values("account_id", ignore_index=True)[list(frame.columns)]
            try:
                pd.testing.assert_frame_equal(got, frame, check_dtype=False)
            except AssertionError as exc:
                raise PhaseFailed(f"sink {sink} differs from the reference: {exc}") from exc
        return f"{len(expected.balances)} balances, {len(expected.alerts)} alerts as the reference"


def prepare_database(setup: Any) -> str:
    """The metadata database migrated, and the DAGs and their assets stored in it as the
    DAG processor stores them where dag.test() does not (Airflow 3.0 and 3.1, whose
    DagBag still has sync_to_db): there a task whose outlet asset was never stored fails
    as 'inactive'."""
    from airflow.models.dagbag import DagBag

    setup.init_database()
    if not hasattr(DagBag, "sync_to_db"):
        return "migrated"
    from airflow.dag_processing.bundles.manager import DagBundlesManager

    DagBundlesManager().sync_bundles_to_db()
    DagBag(dag_folder=str(ROOT / "dags")).sync_to_db("dags-folder", None)
    return "migrated; the DAGs and their assets stored as the DAG processor stores them"


def parse_first_reschedule_dates() -> None:
    """apache/airflow#58777: under dag.test() (the in-process supervisor), Airflow 3.0 and
    3.1 hand a reschedule-mode sensor its first reschedule date as a string, and the ack
    sensor fails at its second look (`datetime - str`). Deployed Airflow parses it; here
    it is parsed where the sensor asks for it. Newer Airflow returns a datetime, untouched."""
    from datetime import datetime

    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    asked = RuntimeTaskInstance.get_first_reschedule_date

    def parsed(self: Any, context: Any) -> Any:
        found = asked(self, context)
        return datetime.fromisoformat(found) if isinstance(found, str) else found

    RuntimeTaskInstance.get_first_reschedule_date = parsed  # type: ignore[method-assign]


def job_env(s3: Any, workdir: Path, spark_url: str) -> dict[str, str]:
    """The demo's deployment (demo.run) with the file-sink pipeline and no table catalog."""
    from demo.run import deployment_env

    env = deployment_env(s3, workdir, spark_url)
    env.pop("BATCHPOINT_TABLE_CATALOG", None)
    env.pop("BATCHPOINT_CHECKPOINT_INTERVALS", None)  # names the demo's reports: not here
    env["BATCHPOINT_PIPELINE_REF"] = PIPELINE_REF
    return env


def run(workdir: Path, epochs: int) -> Phases:
    from demo.airflow_env import AirflowSetup, DemoAirflow
    from demo.run import stop_spark

    phases = Phases()
    setup = AirflowSetup(workdir / "airflow")
    setup.apply()
    airflow = DemoAirflow(workdir / "airflow-tasks.log")
    with contextlib.ExitStack() as servers:
        phases.run("servers", lambda: _start_servers(servers, workdir))
        phases.run("parse", lambda: airflow.quietly(parse_dags))
        phases.run("airflow-db", lambda: airflow.quietly(lambda: prepare_database(setup)))
        parse_first_reschedule_dates()
        payments: list[PaymentsEpochs] = []
        phases.run("epochs", lambda: _first_epochs(payments, workdir, airflow, epochs))
        phases.run("restore", lambda: payments[0].restore_and_continue())
        phases.run("check", lambda: payments[0].check_sinks())
        airflow.quietly(stop_spark)
    return phases


def _start_servers(servers: contextlib.ExitStack, workdir: Path) -> str:
    """SeaweedFS and a Spark Connect server (warmed for the payments operators), stopped
    when `servers` closes; the deployment's variables set for them."""
    from devstack.seaweed import SeaweedServer
    from devstack.spark_connect import SparkConnectServer

    s3 = servers.enter_context(SeaweedServer(workdir / "s3"))
    spark = servers.enter_context(
        SparkConnectServer(workdir / "spark-connect", pipelines=[PIPELINE_REF])
    )
    os.environ.update(job_env(s3, workdir, spark.url))
    return f"S3 {s3.endpoint_url}, Spark Connect {spark.url}"


def _first_epochs(payments: list[PaymentsEpochs], workdir: Path, airflow: Any, n: int) -> str:
    payments.append(PaymentsEpochs(workdir, airflow))
    return payments[0].epochs(n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--epochs", type=int, default=2, help="epochs before the restore")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    found = versions()
    print(f"pyspark {found['pyspark']}, apache-airflow {found['apache-airflow']}", flush=True)
    phases = run(args.workdir.resolve(), args.epochs)
    result = {"versions": found, "seconds": phases.seconds, "failure": phases.failure}
    print(RESULT + json.dumps(result), flush=True)
    return 0 if phases.failure is None else 1


if __name__ == "__main__":
    sys.exit(main())
