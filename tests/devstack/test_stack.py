"""docker-compose.yaml started as `./dev stack` starts it (each service on a host of its
own, from the file itself) and run the way users run it: the scheduler on Postgres fires
the checkpoint DAG every 30 s while new payment files arrive, operator tasks on the
scheduler's host are Spark Connect clients of a server on the cluster's hosts, and
SeaweedFS is another host. Through the run: the scheduler killed -9 mid-run, the Connect
server killed mid-epoch, the Spark worker cut off from SeaweedFS for longer than a task's
retry delay, SeaweedFS restarted; a savepoint through the REST API with the form's conf; a
bad deploy, then a gated restore through the REST API. At the end every DAG run is
accounted for, the Iceberg table and the alerts sink equal the pandas reference over the
head's input, a final GC leaves no orphan file, and Browse -> Checkpoints, loaded in
headless Chromium on the api-server's host, shows the history and the restore. The figures
(intervals, faults, runs by state, time from each fault to the next completed checkpoint,
the stack's start and stop) are written to build/stack-report.txt."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from batchpoint.airflow.ui_pages import HISTORY_COLUMNS
from devstack.compose import ComposeFile, read_dotenv
from devstack.stack import Stack, StackEvent
from support.browser import INSTALL_HINT, chromium_paths
from support.stack_run import (
    FINISHED,
    PaymentsFeed,
    RestApi,
    SparkApp,
    account_runs,
    seconds_of,
    table_data_keys,
    why_not_triggered,
)

pytestmark = [pytest.mark.stack, pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]

PROJECT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
REPORT = PROJECT / "build" / "stack-report.txt"
SCREENSHOTS = PROJECT / "build" / "ui-screenshots"
LOGS_ON_FAILURE = PROJECT / "build" / "stack-logs"
INTERVAL = 30.0
#: the issue's bar: at least 10 intervals of new payment files
MIN_INTERVALS = 10
ADMIN_PASSWORD = "bp-stack-admin"
BUGGY_REF = "demo.payments_buggy:table_pipeline"
CHECKPOINT_DAG = "payments_checkpoint"
SAVEPOINT_DAG = "payments_savepoint"
RESTORE_DAG = "payments_restore"
#: what runs the pipeline's code: a deploy recreates them (every Celery worker replica)
CODE_SERVICES = ("airflow-dag-processor", "airflow-scheduler", "airflow-worker")
#: the cut outlasts a task's retry delay (BATCHPOINT_TASK_RETRY_DELAY in the override),
#: and lasts until it has failed task attempts on the worker (at most MAX_CUT_SECONDS)
CUT_SECONDS = 45.0
MAX_CUT_SECONDS = 300.0


def _missing() -> str | None:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "needs root on Linux (network namespaces)"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"needs {tool} (iproute2, util-linux)"
    if not list(Path("/usr/lib/postgresql").glob("*/bin/postgres")):
        return "needs PostgreSQL (apt-get install postgresql)"
    if shutil.which("redis-server") is None:
        return "needs Redis, Celery's broker (apt-get install redis-server)"
    if chromium_paths() is None:
        return f"no chromium here: {INSTALL_HINT}"
    return None


def _variables() -> dict[str, str]:
    """trial.env's secrets, the test's admin password, and the Airflow services' user:
    the image's (50000) where it can run this machine's Python, else root (as ./dev stack
    decides: devstack.stack_main.variables_of)."""
    from devstack.images import AIRFLOW_IMAGE_UID, interpreter_unreachable_by

    unreachable = interpreter_unreachable_by(AIRFLOW_IMAGE_UID)
    return {
        **read_dotenv(PROJECT / "trial.env"),
        "AIRFLOW_ADMIN_PASSWORD": ADMIN_PASSWORD,
        "AIRFLOW_UID": "0" if unreachable else str(AIRFLOW_IMAGE_UID),
    }


class Run:
    """The test's view of the running stack: REST, storage, the checkpoint history."""

    def __init__(self, stack: Stack) -> None:
        from batchpoint.protocol.coordinator import CheckpointCoordinator
        from batchpoint.settings import Settings

        self.stack = stack
        env = stack.compose.services["airflow-scheduler"].environment
        options = {
            "endpoint_url": f"http://{stack.address('seaweedfs')}:8333",
            "region": env["BATCHPOINT_S3_REGION"],
            "access_key_id": env["BATCHPOINT_S3_ACCESS_KEY_ID"],
            "secret_access_key": env["BATCHPOINT_S3_SECRET_ACCESS_KEY"],
        }
        self.settings = Settings(env["BATCHPOINT_ROOT"], options, "local[1]")
        self.store = self.settings.store_ref.open()
        self.coordinator = CheckpointCoordinator(self.store, "payments")
        catalog = env["BATCHPOINT_TABLE_CATALOG"]
        self.catalog_uri = catalog.replace("@postgres:", f"@{stack.address('postgres')}:")
        self.api = RestApi(
            f"http://{stack.address('airflow-apiserver')}:8080", "admin", ADMIN_PASSWORD
        )
        self.spark = SparkApp(stack.address("spark-connect"))

    # -- the history ------------------------------------------------------------------------

    def outcomes(self) -> dict[int, Any]:
        out = {}
        for cid in range(1, self.coordinator.ids.peek()):
            outcome = self.coordinator.get_outcome(cid)
            if outcome is not None:
                out[cid] = outcome
        return out

    def completed_after(
        self, moment: float, timeout: float = 900, *, triggered_after: float = 0.0
    ) -> tuple[int, float]:
        """The first checkpoint (not savepoint) completed after `moment` (wall clock),
        of those triggered after `triggered_after`: its id and how long after `moment`."""
        from batchpoint.errors import StorageUnavailable

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                outcomes = self.outcomes()
            except StorageUnavailable:  # SeaweedFS restarting: look again
                time.sleep(3)
                continue
            done = [
                (o.completed.completed_at, cid)
                for cid, o in outcomes.items()
                if _completed_checkpoint(o)
                and o.completed.completed_at > moment
                and o.pending.trigger_time > triggered_after
            ]
            if done:
                at, cid = min(done)
                return cid, at - moment
            time.sleep(3)
        runs = [
            r
            for r in self.api.runs(CHECKPOINT_DAG)
            if r["run_after"] and seconds_of(r["run_after"]) > moment
        ]
        said = [str(a) for a in account_runs(runs, self.coordinator, self.why_no_checkpoint)]
        raise AssertionError(
            f"no checkpoint completed within {timeout:.0f}s after {moment}; the checkpoint "
            f"DAG's runs since: {said}"
        )

    def completed_checkpoints(self) -> list[int]:
        """Every completed checkpoint (savepoints aside), quarantined ones included."""
        return [cid for cid, o in self.outcomes().items() if _completed_checkpoint(o)]

    def completed_at(self, checkpoint_id: int) -> float:
        return float(self.coordinator.get_outcome(checkpoint_id).completed.completed_at)

    def running_operator(self, timeout: float = 600) -> RunningTask:
        """Wait until an operator task of a checkpoint run is running: which, of which
        run, and the host (Celery worker) it runs on."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for run in self.api.runs(CHECKPOINT_DAG):
                if run["state"] != "running":
                    continue
                tasks = self.api.task_instances(CHECKPOINT_DAG, run["dag_run_id"])
                busy = [
                    RunningTask(t, run["dag_run_id"], ti["hostname"])
                    for t, ti in tasks.items()
                    if t.startswith("operators.") and ti["state"] == "running" and ti["hostname"]
                ]
                if busy:
                    return busy[0]
            time.sleep(1)
        raise AssertionError("no operator task ran")

    def run_of(self, checkpoint_id: int) -> str:
        """The id of the checkpoint DAG run that triggered `checkpoint_id`."""
        from batchpoint.ops.runs import RUN_PROPERTY

        return str(self.coordinator.get_checkpoint(checkpoint_id).properties[RUN_PROPERTY])

    def redeploy(self, environment: dict[str, str]) -> None:
        """The services that run the pipeline's code recreated with `environment` over
        the file's, with the checkpoint DAG paused meanwhile (as a careful operator
        deploys: the run in flight waits, none starts on a half-deployed stack)."""
        self.api.set_paused(CHECKPOINT_DAG, True)
        for service in CODE_SERVICES:
            self.stack.recreate(service, environment)
            self.stack.wait_healthy(service)

    def head(self) -> int:
        return int(self.coordinator.head.get().checkpoint_id)

    def balances_table(self) -> Any:
        from batchpoint.tables.binding import TableBinding
        from batchpoint.tables.service import sink_table
        from demo.payments import BALANCES_TABLE

        binding = TableBinding(BALANCES_TABLE)
        return sink_table(self.store, "payments", "balances_table", binding, self.catalog_uri)

    def sinks_against_reference(self) -> tuple[pd.DataFrame, pd.DataFrame, Any]:
        """(balances read from the Iceberg table, alerts, the reference at the head)."""
        from batchpoint.protocol.sinks import read_sink_table
        from demo.payments import SOURCE_ROOT
        from demo.payments_reference import compute_reference

        head = self.coordinator.completed.get(self.head())
        reference = compute_reference(self.store, SOURCE_ROOT, upto=head.pending.barrier["events"])
        balances = self.balances_table().read().to_pandas()
        balances = balances.sort_values("account_id", ignore_index=True)
        alerts = read_sink_table(self.store, "payments", "alerts").to_pandas()
        alerts = alerts.sort_values("account_id", ignore_index=True)
        return (
            balances[list(reference.balances.columns)],
            alerts[list(reference.alerts.columns)],
            reference,
        )

    def wrong_balances(self) -> int:
        balances, _, reference = self.sinks_against_reference()
        merged = reference.balances.merge(
            balances, on="account_id", how="outer", suffixes=("", "_t")
        )
        return int((merged["balance"] != merged["balance_t"]).sum())

    def why_no_checkpoint(self, run: dict[str, Any]) -> str:
        trigger = self.api.task_instances(CHECKPOINT_DAG, run["dag_run_id"]).get("trigger", {})
        state, tries = trigger.get("state"), trigger.get("try_number") or 0
        if tries:
            log = self.api.task_log(CHECKPOINT_DAG, run["dag_run_id"], "trigger", tries)
            said = why_not_triggered(log)
            if said:
                return said
        return f"no checkpoint: trigger {state} after {tries} tries, saying nothing why"


def _completed_checkpoint(outcome: Any) -> bool:
    """A completed checkpoint, not a savepoint."""
    from batchpoint.protocol.checkpoint import CheckpointStatus, CheckpointType

    return bool(
        outcome.status is CheckpointStatus.COMPLETED
        and outcome.pending.type is CheckpointType.CHECKPOINT
    )


@dataclass(frozen=True)
class RunningTask:
    """An operator task that a fault hits."""

    task_id: str
    run_id: str
    host: str

    def __str__(self) -> str:
        return f"{self.task_id} of {self.run_id}"


@dataclass(frozen=True)
class Recovery:
    """A fault and the first checkpoint that completed after it."""

    fault: StackEvent
    during: str
    checkpoint_id: int
    seconds: float
    #: for a cut: the first completed after the link came back, and how long after that
    after_restore: tuple[int, float] | None = None
    #: what the runs in between did, in seconds from the fault
    timeline: tuple[str, ...] = ()

    def __str__(self) -> str:
        text = f"{self.fault} during {self.during}: checkpoint {self.checkpoint_id} "
        text += f"completed {self.seconds:.0f}s later ({self.seconds / INTERVAL:.1f} intervals)"
        if self.after_restore is not None:
            back = self.after_restore[1]
            text += f"; {back:.0f}s after the link came back ({back / INTERVAL:.1f} intervals)"
        return "\n      ".join([text, *self.timeline])


@dataclass(frozen=True)
class Deploy:
    good_before: int
    #: the first checkpoint triggered after v2 was deployed
    bad: int
    wrong_balances: int
    restored: int
    quarantined: tuple[int, ...]
    after_restore: int
    restore_run: str
    restore_seconds: float

    def __str__(self) -> str:
        return (
            f"bad deploy after checkpoint {self.good_before}: checkpoint {self.bad} (the "
            f"first of v2 alone) completed with {self.wrong_balances} wrong balances "
            f"published; the gated restore ({self.restore_seconds:.0f}s) quarantined "
            f"{list(self.quarantined)} and went back to {self.restored}; the first "
            f"checkpoint after it: {self.after_restore}"
        )


def _say(line: str) -> None:
    print(line, flush=True)


@pytest.mark.timeout(4800)
def test_the_compose_deployment_runs_across_hosts_through_faults(monkeypatch):
    missing = _missing()
    if missing:
        pytest.skip(missing)
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="bp-stack-test-", dir="/var/tmp"))
    compose = ComposeFile.load(
        PROJECT / "docker-compose.yaml",
        variables=_variables(),
        overrides=[HERE / "stack-test.override.yaml"],
    )
    stack = Stack(compose, workdir, say=_say)
    report: list[str] = ["images and what ran in their place:", *stack.describe_images()]
    feed = None
    try:
        stack.up()
        report.append(f"stack up at {_clock(stack.up_at)} ({stack.up_at - _epoch(started):.0f}s)")
        run = Run(stack)
        assert stack.admin_password() == ADMIN_PASSWORD  # written by airflow-init

        feed = PaymentsFeed(run.settings.store_ref, INTERVAL)
        feed.write()
        for dag in (CHECKPOINT_DAG, SAVEPOINT_DAG, RESTORE_DAG):
            run.api.set_paused(dag, False)
        feed.start()
        first, took = run.completed_after(time.time() - 1)
        _say(f"checkpoint {first} completed (the first, {took:.0f}s after unpausing)")

        recoveries = _faults(run, stack)
        report += ["faults (time to the next completed checkpoint):"]
        report += [f"  {r}" for r in recoveries]
        savepoint_run = _savepoint(run)
        deploy = _bad_deploy_then_gated_restore(run)
        report.append(str(deploy))

        # the window ends with a checkpoint that reads all the input: the runs after it
        # find nothing new and skip
        last = _last_interval(run, feed)
        runs = run.api.runs_before(CHECKPOINT_DAG, run.completed_at(last), timeout=900)
        stack.stop("airflow-scheduler")  # no run after the window writes anything
        accounts = _accounting(run, runs)
        report += _runs_figures(feed, accounts)
        completed = [a for a in accounts if a.outcome == "COMPLETED"]
        assert len(feed.written) >= MIN_INTERVALS and len(completed) >= MIN_INTERVALS

        # the sinks: exactly once over the head's input
        balances, alerts, reference = run.sinks_against_reference()
        pd.testing.assert_frame_equal(balances, reference.balances, check_dtype=False)
        pd.testing.assert_frame_equal(alerts, reference.alerts, check_dtype=False)

        _check_browse(stack, run, deploy)

        # a final GC once compute is stopped (no late writer can be left): no orphan
        for service in ("spark-connect", "spark-worker"):  # every worker replica
            stack.stop(service)
        orphans = _gc_then_orphans(run, monkeypatch)
        assert orphans == [], orphans[:10]

        for dag, run_id in ((SAVEPOINT_DAG, savepoint_run), (RESTORE_DAG, deploy.restore_run)):
            report.append(f"{dag} run {run_id}: {run.api.run(dag, run_id)['state']}")
    finally:
        report += [f"stack events: {len(stack.events)}", *(f"  {e}" for e in stack.events)]
        if feed is not None:
            feed.stop()
        left = stack.down()
        if sys.exc_info()[0] is not None:  # each service's log, for whoever looks into it
            shutil.copytree(workdir / "logs", LOGS_ON_FAILURE, dirs_exist_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)
        if stack.up_at and stack.down_at:
            report.append(
                f"stack stopped at {_clock(stack.down_at)}; up for "
                f"{stack.down_at - stack.up_at:.0f}s; test wall time "
                f"{time.monotonic() - started:.0f}s; left behind: {left or 'nothing'}"
            )
        REPORT.parent.mkdir(parents=True, exist_ok=True)
        REPORT.write_text("\n".join(report) + "\n")
        _say("\n".join(report))
    assert left == []


def _faults(run: Run, stack: Stack) -> list[Recovery]:
    """Each fault while an operator task runs, then the wait for the next completed
    checkpoint."""
    recoveries = []

    def recovered(
        fault: StackEvent, hit: RunningTask, said: str = "", restored: StackEvent | None = None
    ) -> None:
        cid, seconds = run.completed_after(fault.at)
        after = run.completed_after(restored.at) if restored is not None else None
        timeline = tuple(
            f"{run_id}: {line}"
            for run_id in dict.fromkeys([hit.run_id, run.run_of(cid)])
            for line in run.api.timeline(CHECKPOINT_DAG, run_id, fault.at)
        )
        recoveries.append(Recovery(fault, f"{hit}{said}", cid, seconds, after, timeline))
        _say(f"{recoveries[-1]}")

    # Each fault while the task it names runs (found first: an argument list evaluated
    # left to right would fault first and name whichever task ran next).
    # its restart policy (unless-stopped) brings the killed process back, as Docker's would
    hit = run.running_operator()
    recovered(stack.kill("airflow-scheduler"), hit)
    # the Celery worker the task runs on, with every process on its host
    hit = run.running_operator()
    recovered(stack.kill(_worker_on(stack, hit.host)), hit, f" (on {hit.host})")
    hit = run.running_operator()
    run.spark.wait_running_job()  # executors on both workers are reading or writing state
    recovered(stack.kill("spark-worker-2"), hit)
    hit = run.running_operator()
    recovered(stack.kill("spark-connect"), hit)
    hit = run.running_operator()
    run.spark.wait_running_job()  # the worker's executor is reading or writing state
    failed_before = run.spark.failed_tasks()
    cut = stack.cut("spark-worker-1", "seaweedfs")
    while time.time() - cut.at < CUT_SECONDS or (
        run.spark.failed_tasks() == failed_before and time.time() - cut.at < MAX_CUT_SECONDS
    ):
        time.sleep(2)  # the outage itself: it lasts until the worker's tasks meet it
    failed = run.spark.failed_tasks() - failed_before
    restored = stack.restore("spark-worker-1", "seaweedfs")
    assert failed > 0, f"no task attempt failed on the worker in {restored.at - cut.at:.0f}s"
    said = f"; {failed} task attempt(s) failed on the worker in the {restored.at - cut.at:.0f}s"
    recovered(cut, hit, said, restored)
    hit = run.running_operator()
    recovered(stack.restart("seaweedfs"), hit)
    return recoveries


def _worker_on(stack: Stack, host: str) -> str:
    """The Celery worker replica whose host is `host` (a task instance's hostname)."""
    found = [
        n for n in stack.replicas("airflow-worker") if stack.containers[n].service.hostname == host
    ]
    assert found, f"{host} is none of the Celery workers {stack.replicas('airflow-worker')}"
    return found[0]


def _savepoint(run: Run) -> str:
    """A savepoint triggered with the conf the trigger form sends."""
    from batchpoint.protocol.savepoint_paths import SavepointLocation
    from batchpoint.protocol.savepoints import read_savepoint

    conf = run.api.form_conf(SAVEPOINT_DAG, description="before v2")
    assert conf["stop_pipeline"] is False and not conf["target"]  # the form's defaults
    run_id = run.api.trigger(SAVEPOINT_DAG, conf)
    assert run.api.wait_run(SAVEPOINT_DAG, run_id, 900)["state"] == "success"
    folders = run.store.list_dirs("savepoints/payments/")
    described = [read_savepoint(SavepointLocation(run.store, f)).description for f in folders]
    assert described == ["before v2"]
    return run_id


def _bad_deploy_then_gated_restore(run: Run) -> Deploy:
    """v2 of `balances` doubles every balance: once deployed, checkpoints complete and
    publish wrong balances. Then the fix is deployed and a gated restore through the
    REST API quarantines what v2 made and goes back to the newest checkpoint that passes
    the gate."""
    from batchpoint.protocol.layout import PipelineLayout
    from batchpoint.quality.quarantine import QuarantineStore

    good_before = run.head()  # the run in flight when paused may be v1's or v2's work
    run.redeploy({"BATCHPOINT_PIPELINE_REF": BUGGY_REF})
    deployed = time.time()
    run.api.set_paused(CHECKPOINT_DAG, False)
    bad, _ = run.completed_after(deployed, triggered_after=deployed)  # all v2's work
    assert run.api.wait_run(CHECKPOINT_DAG, run.run_of(bad), 600)["state"] == "success"
    wrong = run.wrong_balances()
    assert wrong > 0  # published, wrong, and the checkpoint "completed"

    run.redeploy({})  # the fix: the file's own environment again
    conf = run.api.form_conf(RESTORE_DAG, source="latest")
    assert conf["quality_gate"] is True and conf["dry_run"] is False  # the form's defaults
    restore_run = run.api.trigger(RESTORE_DAG, conf)
    restore = run.api.wait_run(RESTORE_DAG, restore_run, 1800)
    assert restore["state"] == "success", restore
    restore_seconds = seconds_of(restore["end_date"]) - seconds_of(restore["start_date"])
    restored = run.head()
    quarantined = tuple(sorted(QuarantineStore(run.store, PipelineLayout("payments")).ids()))
    assert good_before <= restored < bad and restored not in quarantined, (restored, quarantined)
    # the gate went back through every newer checkpoint: none passed
    newer = {cid for cid in run.completed_checkpoints() if cid > restored}
    assert bad in newer and newer <= set(quarantined), (newer, quarantined)
    assert run.coordinator.control.load().restore_generation == 1
    run.api.set_paused(CHECKPOINT_DAG, False)
    after_restore, _ = run.completed_after(time.time())
    return Deploy(
        good_before, bad, wrong, restored, quarantined, after_restore, restore_run, restore_seconds
    )


def _last_interval(run: Run, feed: PaymentsFeed) -> int:
    """Checkpoints complete until one is missing to the bar of intervals; then the feed
    stops, writes its last interval, and the next checkpoint triggered after that write
    reads all it wrote. Its id.

    The last write comes after the stop, not from the feed's thread: a checkpoint
    triggered between the thread's last write and the stop would read everything, and
    every run after it would skip as idle (no-new-input), leaving none to wait for."""
    while len(run.completed_checkpoints()) < MIN_INTERVALS - 1:
        run.completed_after(time.time())
    feed.stop()
    feed.write()
    written = time.time()
    last, _ = run.completed_after(written, triggered_after=written)
    return last


def _accounting(run: Run, runs: list[dict[str, Any]]) -> list[Any]:
    """Every checkpoint DAG run of the window: its checkpoint completed, or aborted with
    its reason, or it triggered none and says why; nothing pending."""
    accounts = account_runs(runs, run.coordinator, run.why_no_checkpoint)
    assert all(a.state in FINISHED for a in accounts), [str(a) for a in accounts]
    assert not [a for a in accounts if a.outcome == "PENDING"]
    assert run.coordinator.control.load().pending == ()
    outcomes = run.outcomes()
    assert sorted(outcomes) == list(range(1, run.coordinator.ids.peek()))  # all settled
    for outcome in outcomes.values():
        assert outcome.status.value == "COMPLETED" or (outcome.reason and outcome.message)
    return accounts


def _check_browse(stack: Stack, run: Run, deploy: Deploy) -> None:
    """Browse -> Checkpoints in a browser on the api-server's host: the history with
    the quarantined checkpoints and the one after the restore."""
    seen = _browse(stack, str(deploy.after_restore))
    history = {int(row[0]): row for row in seen["history"] if row and row[0].isdigit()}
    assert f"head\ncheckpoint {run.head()}\n" in seen["pipeline_page"]
    column = {key: i for i, (key, _) in enumerate(HISTORY_COLUMNS)}
    for cid in deploy.quarantined:
        row = history[cid]
        assert row[column["status"]] == "quarantined", row
        assert row[column["quarantined"]] == "quarantined", row
    # the checkpoint the restore went back to carries it, as Flink's "Latest Restore"
    assert "restore generation 1" in history[deploy.restored][column["restores"]]
    assert history[deploy.after_restore][column["status"]] in ("head", "retained")
    assert "restore generation\n1" in seen["checkpoint_page"], seen["checkpoint_page"][:2000]
    assert any("payments" in row and str(run.head()) in row for row in seen["index_rows"])


def _browse(stack: Stack, checkpoint_id: str) -> dict[str, Any]:
    api = stack.containers["airflow-apiserver"]
    script = [sys.executable, str(HERE / "browse_checkpoints.py"), "http://localhost:8080"]
    # as root (`docker compose exec --user root`): the screenshots go to the checkout
    argv = api.inside(
        [*script, "admin", ADMIN_PASSWORD, checkpoint_id, str(SCREENSHOTS)], as_root=True
    )
    done = subprocess.run(argv, env=api.environment(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _gc_then_orphans(run: Run, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """GC with no grace (nothing runs any more), then the data files nothing references:
    no retained checkpoint, pending ack or sink chain (the tests' own checker) and no
    unexpired snapshot of the Iceberg table."""
    from batchpoint.ops.maintenance import sink_tables
    from support.checker import Checker

    monkeypatch.setenv("BATCHPOINT_TABLE_CATALOG", run.catalog_uri)  # reached from here
    for _ in range(2):  # the second pass sweeps what the first one collected
        tables = sink_tables(run.coordinator, run.coordinator.store)
        run.coordinator.garbage_collector(grace=0.0, tables=tables).collect()
    table = run.balances_table().require()
    referenced = table_data_keys(table, run.settings.root.partition("://")[2].partition("/")[2])
    checker = Checker(run.store, 0, 1, pipeline="payments")
    return [k for k in checker.orphans() if k not in referenced]


def _runs_figures(feed: PaymentsFeed, accounts: list[Any]) -> list[str]:
    by_state = Counter(a.state for a in accounts)
    by_outcome = Counter(a.outcome.split(" (")[0].split(":")[0] for a in accounts)
    return [
        f"intervals with new payment files: {len(feed.written)} (every {INTERVAL:.0f}s, "
        f"{sum(n for _, _, n in feed.written)} files); feed errors: {feed.errors or 'none'}",
        f"{CHECKPOINT_DAG} runs of the window: {len(accounts)}, by final state "
        f"{dict(by_state)}, by outcome {dict(by_outcome)}",
        *(f"  {a}" for a in accounts),
    ]


def _clock(at: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at or 0))


def _epoch(monotonic: float) -> float:
    """A time.monotonic() reading as wall clock."""
    return time.time() - (time.monotonic() - monotonic)
