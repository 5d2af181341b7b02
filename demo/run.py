"""The main job: the payments pipeline end to end, through Airflow, on a real local S3.

    ./dev demo [--epochs 3] [--keep DIR] [--spark-mode connect|submit]
               [--table-format iceberg|delta]

It starts SeaweedFS (S3) and one local Spark Connect server, prepares Airflow (SQLite),
then lets Airflow drive the pipeline: every checkpoint is a run of the
`payments_checkpoint` DAG whose operator tasks are thin Spark Connect clients of that
server (with `--spark-mode submit`, a spark-submit application each, as before). It
prints each epoch's wall time. Along the way it kills a Spark job after its
snapshot (Airflow retries the task and the checkpoint completes), takes a savepoint with
the `payments_savepoint` DAG, ships a bad deploy that corrupts `balances` for two epochs,
rolls back with the quality-gated `payments_restore` DAG, deploys the fix and lets the
pipeline reprocess, then deploys a version that renames an operator (its uid kept) and
adds a column to its state, `batchpoint plan` printed before it. It prints the
checkpoint history and ends by checking the published sinks against a plain pandas
computation over all the input: exactly once, or it exits non-zero. The balances are
published as the Iceberg table payments.balances, or with `--table-format delta` as a
Delta table (demo.deployment), which the check reads with deltalake. A second pipeline,
`reports` (demo.reports), reads the balances payments publishes: its checkpoint DAG runs
after payments' epochs, the restore is a cascade of both (`payments_restore` with
cascade=true), and reports is checked against its own pandas reference. It stops both
servers and exits non-zero too if any process it started is still alive at the end.

With --keep DIR everything stays in DIR, and DIR/demo.json records how to reopen it as
last deployed (demo.record); `./dev ui DIR` opens the Airflow UI on it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from batchpoint.errors import BatchpointError
from batchpoint.settings import Settings
from demo.airflow_env import AirflowSetup, DagRunSummary, DemoAirflow
from demo.checks import PublishedChecks
from demo.deployment import (
    FORMATS,
    REPORTS_REF,
    VERSIONS,
    PaymentsVersions,
    deployed,
    deployment_env,
)
from demo.leftovers import mark_run, stop_spark, wait_for_none
from demo.record import DemoRecord, deployment_settings
from demo.say import say, step, timed
from devstack.seaweed import SeaweedServer

T = TypeVar("T")

DATA = {"accounts": 200, "events_per_epoch": 2_000}
# The demo's pipeline publishes its balances as the table payments.balances (Iceberg
# unless --table-format delta says otherwise: demo.deployment).
GOOD_REF = VERSIONS["iceberg"].good


class DemoFailed(Exception):
    """A step did not do what the demo shows; the message says which."""


class PaymentsDemo:
    def __init__(
        self,
        workdir: Path,
        s3: SeaweedServer,
        airflow: DemoAirflow,
        versions: PaymentsVersions = VERSIONS["iceberg"],
    ) -> None:
        self.workdir = workdir
        self.s3 = s3
        self.airflow = airflow
        self.versions = versions
        self.epoch = 0
        #: wall time of each epoch's checkpoint run, in order
        self.epoch_seconds: list[float] = []
        self.settings = Settings.from_env()
        self.store = self.settings.store_ref.open()
        self.checks = PublishedChecks(self.settings, self.store, versions.table_format)

    # -- the pieces -------------------------------------------------------------------

    @property
    def coordinator(self) -> Any:
        from batchpoint.protocol.coordinator import CheckpointCoordinator

        return CheckpointCoordinator(self.store, "payments", self.settings.checkpoint)

    def new_input(self) -> None:
        from demo.payments import SOURCE_ROOT
        from demo.payments_data import write_epoch_files

        files = write_epoch_files(self.store, SOURCE_ROOT, self.epoch, **DATA)
        say(f"epoch {self.epoch}: {len(files)} new payment files in s3://.../{SOURCE_ROOT}")
        self.epoch += 1

    def run_dag(self, dag_id: str, conf: dict[str, Any] | None = None) -> DagRunSummary:
        say(f"Airflow: {dag_id} {json.dumps(conf) if conf else ''}".rstrip())
        summary = self.airflow.run(dag_id, conf)
        for line in summary.lines():
            say(f"  {line}")
        say(f"run {summary.state} in {summary.seconds:.0f}s")
        if not summary.ok:
            raise DemoFailed(
                f"{dag_id} {summary.state}; the task logs are in {self.airflow.log_file} "
                f"and, one file a task, in {self.airflow.task_logs}"
            )
        return summary

    def epoch_run(self) -> DagRunSummary:
        """The epoch's checkpoint run, its wall time printed and kept."""
        summary = self.run_dag("payments_checkpoint")
        self.epoch_seconds.append(summary.seconds)
        say(f"epoch {self.epoch - 1}: wall time {summary.seconds:.1f}s")
        return summary

    def checkpoint(self) -> int:
        self.epoch_run()
        head = self.coordinator.head.get().checkpoint_id
        outcome = self.coordinator.get_outcome(head)
        say(f"checkpoint {head}: {outcome.status.value}, head is now {head}")
        return head

    # -- the story --------------------------------------------------------------------

    def good_epochs(self, epochs: int) -> None:
        from batchpoint.runtime.faults import ENV, ONCE_ENV

        for n in range(epochs):
            step(f"epoch {self.epoch}: new payments arrive, Airflow runs a checkpoint")
            self.new_input()
            if n == 1:
                say("the Spark job of 'balances' will be killed after its snapshot, before its ack")
                os.environ[ENV] = "balances:after-snapshot"
                # Once: the task's retry (a new attempt) must live.
                os.environ[ONCE_ENV] = str(self.workdir / f"fault-fired-{self.epoch}")
                try:
                    summary = self.epoch_run()
                finally:
                    del os.environ[ENV], os.environ[ONCE_ENV]
                tries = {t.task_id: t.tries for t in summary.tasks}
                if tries.get("operators.balances", 1) < 2:
                    raise DemoFailed("the killed balances task was not retried")
                last = self.coordinator.head.get().checkpoint_id
                acks = self.coordinator.get_outcome(last).completed.acks
                attempts = sorted({a.attempt for a in acks if a.task.operator == "balances"})
                say(
                    f"try 1 died before acking; Airflow retried the task and checkpoint {last} "
                    f"completed with balances acked by attempt {', '.join(attempts)}"
                )
            else:
                self.checkpoint()

    def savepoint(self) -> None:
        step("savepoint through the payments_savepoint DAG (its trigger form's conf)")
        self.run_dag(
            "payments_savepoint", {"description": "before the v2 deploy", "stop_pipeline": False}
        )
        metadata = sorted(
            o.key for o in self.store.list("savepoints/payments/") if o.key.endswith("/_metadata")
        )
        if not metadata:
            raise DemoFailed("the savepoint DAG succeeded but wrote no savepoint folder")
        folder = metadata[-1].rsplit("/", 1)[0]
        files = sum(1 for _ in self.store.list(folder + "/"))
        say(f"savepoint in {folder}/: {files} files, self-contained and relocatable")

    def bad_deploy(self) -> list[int]:
        step("deploy v2 of 'balances' (it doubles every balance): two epochs, audit off")
        os.environ["BATCHPOINT_PIPELINE_REF"] = deployed(self.versions.buggy)
        bad = []
        for _ in range(2):
            self.new_input()
            bad.append(self.checkpoint())
        wrong, total = self.checks.published_errors()
        say(
            f"the {self.checks.table_name} is now wrong for {wrong} of {total} accounts, "
            "but every checkpoint 'completed'"
        )
        return bad

    def reports_epoch(self) -> int:
        """A checkpoint of reports (its DAG scheduled on payments' sinks; the demo
        triggers it), which reads what payments published since its last one."""
        self.run_dag("reports_checkpoint")
        c = self.checks.reports
        head = c.head.get().checkpoint_id
        read = self.checks.reports_read(head)
        say(f"reports checkpoint {head} read payments' balances up to checkpoint {read}")
        return head

    def cascade_restore(self, bad: list[int], good: int, reports_good: int) -> None:
        step(
            "cascade restore through the payments_restore DAG: quality gate on, balances "
            "rescaled to 3, reports follows"
        )
        conf = {
            "source": "latest",
            "quality_gate": True,
            "cascade": True,
            "parallelism": {"balances": 3},
        }
        self.run_dag("payments_restore", conf)
        from batchpoint.protocol.layout import PipelineLayout
        from batchpoint.quality.quarantine import QuarantineStore

        quarantine = QuarantineStore(self.store, PipelineLayout("payments"))
        for cid in reversed(bad):  # the gate looks at the newest first
            held = quarantine.get(cid)
            report = None if held is None else quarantine.report(held)
            if report is None:
                raise DemoFailed(f"checkpoint {cid} of the bad deploy was not quarantined")
            for line in report.render(indent=""):
                say(line)
        head = self.coordinator.head.get().checkpoint_id
        if head != good:
            raise DemoFailed(f"the gate restored checkpoint {head}, not the last good {good}")
        say(f"head moved back to checkpoint {head}, the last one that passes the gate")
        reports = self.checks.reports.head.get().checkpoint_id
        if reports != reports_good:
            raise DemoFailed(f"the cascade restored reports to {reports}, not {reports_good}")
        say(f"reports followed: head back to checkpoint {reports}, which read only up to {good}")
        wrong, total = self.checks.published_errors()
        if wrong or self.checks.reports_check():
            raise DemoFailed(f"after the cascade {wrong} of {total} balances differ")

    def fixed_deploy(self) -> None:
        step("deploy the fix; the next checkpoint reprocesses everything since the restore")
        os.environ["BATCHPOINT_PIPELINE_REF"] = deployed(self.versions.good)
        self.new_input()
        cid = self.checkpoint()
        outcome = self.coordinator.get_outcome(cid)
        subtasks = [a.task for a in outcome.completed.acks if a.task.operator == "balances"]
        say(
            f"checkpoint {cid} continued from checkpoint {outcome.pending.base_checkpoint_id}, "
            f"with balances rescaled by key group to {len(subtasks)} subtasks"
        )
        self.reports_epoch()
        if self.checks.reports_check():
            raise DemoFailed("reports differs from its reference after the fix's epoch")

    def evolving_deploy(self) -> None:
        from demo.payments_v2 import OPERATOR

        ref = self.versions.evolved
        step(f"deploy v3: 'balances' renamed '{OPERATOR}' (uid kept), its state gains a column")
        plan = subprocess.run(
            [str(Path(sys.executable).parent / "batchpoint"), "plan", "--pipeline-ref", ref],
            capture_output=True,
            text=True,
            check=False,
        )
        say(f"$ batchpoint plan --pipeline-ref {ref}")
        for line in plan.stdout.splitlines():
            say(f"  {line}")
        if plan.returncode != 0 or "renamed" not in plan.stdout or "migrated" not in plan.stdout:
            raise DemoFailed(f"batchpoint plan exit {plan.returncode}: {plan.stderr.strip()}")
        os.environ["BATCHPOINT_PIPELINE_REF"] = deployed(ref)
        self.new_input()
        cid = self.checkpoint()
        outcome = self.coordinator.get_outcome(cid)
        tasks = sorted(str(a.task) for a in outcome.completed.acks if a.operator_uid == "balances")
        say(
            f"checkpoint {cid}: {', '.join(tasks)} restored the state of 'balances' by its "
            "uid; its stored rows read the new column 'deposits' as null"
        )

    def history(self) -> None:
        from batchpoint.cli.render import history_table

        step("checkpoint history")
        history = self.coordinator.stats.history()
        print(history_table(history), flush=True)
        from batchpoint.protocol.layout import PipelineLayout
        from batchpoint.quality.quarantine import QuarantineStore

        held = QuarantineStore(self.store, PipelineLayout("payments")).ids()
        say(f"quarantined by the quality gate: {', '.join(map(str, held)) or 'none'}")


def spark_server(
    workdir: Path, mode: str, conf: Mapping[str, str] | None = None, payments: str = GOOD_REF
) -> contextlib.AbstractContextManager[Any]:
    """The run's one Spark Connect server (connect mode), with the Spark settings `conf`
    over devstack's, or nothing (submit mode)."""
    if mode != "connect":
        return contextlib.nullcontext()
    from devstack.spark_connect import SparkConnectServer

    step(f"starting a local Spark Connect server (its log: {workdir / 'spark-connect'})")
    # Its warm-up also starts the payments operators' sessions (their Python workers).
    return SparkConnectServer(
        workdir / "spark-connect", conf=conf, pipelines=[payments, REPORTS_REF]
    )


def run_demo(
    workdir: Path, epochs: int, spark_mode: str = "connect", table_format: str = "iceberg"
) -> int:
    """The story, then a check that no process it started is left."""
    marker = mark_run()
    try:
        result = run_story(workdir, epochs, spark_mode, VERSIONS[table_format])
    finally:
        left = wait_for_none(marker)
        if left:
            print("\ndemo failed: processes it started are still running:", file=sys.stderr)
            for process in left:
                print(f"   {process}", file=sys.stderr)
    if left:
        return 1
    say("no process left behind")
    return result


def run_story(workdir: Path, epochs: int, spark_mode: str, versions: PaymentsVersions) -> int:
    # py4j says goodbye at interpreter exit, after the demo's last line.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    step(f"starting SeaweedFS (S3) in {workdir / 's3'}")
    with (
        SeaweedServer(workdir / "s3") as s3,
        spark_server(workdir, spark_mode, payments=versions.good) as spark,
    ):
        say(f"S3 endpoint {s3.endpoint_url}, bucket '{s3.bucket}'")
        if spark is not None:
            say(f"Spark Connect server at {spark.url} (master {spark.master})")
        setup = AirflowSetup(workdir / "airflow")
        setup.apply()
        os.environ.update(deployment_env(s3, workdir, spark.url if spark else None, versions))
        step(f"preparing Airflow (SQLite metadata database in {setup.home})")
        airflow = DemoAirflow(workdir / "airflow-tasks.log", setup.log_folder)
        say(
            f"Airflow's and Spark's logs go to {airflow.log_file}, each task's also to "
            f"{setup.log_folder} (its page in the Airflow UI)"
        )
        timed("database migrated", lambda: airflow.quietly(setup.init_database))
        try:
            result = tell_story(PaymentsDemo(workdir, s3, airflow, versions), epochs)
        finally:
            # As last deployed, even if a step failed: what `./dev ui` and the CLI reopen.
            record(workdir, s3, setup, spark)
        airflow.quietly(stop_spark)
        return result


def tell_story(demo: PaymentsDemo, epochs: int) -> int:
    demo.good_epochs(epochs)
    demo.savepoint()
    good = demo.coordinator.head.get().checkpoint_id
    reports_good = demo.reports_epoch()
    bad = demo.bad_deploy()
    demo.reports_epoch()  # it reads the bad deploy's balances
    demo.cascade_restore(bad, good, reports_good)
    demo.fixed_deploy()
    demo.evolving_deploy()
    demo.history()
    result = demo.checks.exactly_once()
    times = ", ".join(f"{t:.1f}s" for t in demo.epoch_seconds)
    mode = os.environ.get("BATCHPOINT_SPARK_MODE", "connect")
    say(f"epoch wall times ({mode} mode): {times}")
    return result


def record(workdir: Path, s3: SeaweedServer, setup: AirflowSetup, spark: Any) -> None:
    """What `./dev ui DIR` and the CLI need to reopen this demo: its S3, its Spark
    Connect server's port, and the deployment as this process last deployed it."""
    DemoRecord(
        s3_port=int(s3.endpoint_url.rsplit(":", 1)[1]),
        bucket=s3.bucket,
        access_key=s3.access_key,
        secret_key=s3.secret_key,
        env={**setup.environment(), **deployment_settings(os.environ)},
        spark_port=spark.port if spark is not None else None,
    ).write(workdir)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--epochs", type=int, default=3, help="good epochs before the bad deploy (at least 2)"
    )
    parser.add_argument("--keep", type=Path, help="keep all data in this directory")
    parser.add_argument(
        "--spark-mode",
        choices=("connect", "submit"),
        default="connect",
        help="operator tasks as clients of one Spark Connect server (default), or a "
        "spark-submit application each",
    )
    parser.add_argument(
        "--table-format",
        choices=FORMATS,
        default="iceberg",
        help="publish payments' balances as an Iceberg table (default) or a Delta table",
    )
    args = parser.parse_args(argv)
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (the second one shows a killed task)")
    if args.keep and any(args.keep.iterdir() if args.keep.is_dir() else []):
        parser.error(f"--keep {args.keep.resolve()}: the directory is not empty")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = (args.keep or Path(tempfile.mkdtemp(prefix="batchpoint-demo-"))).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        return run_demo(workdir, args.epochs, args.spark_mode, args.table_format)
    except (BatchpointError, DemoFailed) as exc:
        print(f"\ndemo failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"\nkept in {workdir}; open the Airflow UI on it with: ./dev ui {workdir}")


if __name__ == "__main__":
    sys.exit(main())
