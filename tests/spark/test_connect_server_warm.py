"""A devstack Spark Connect server as the launcher starts it (issue 28): it schedules
FAIR, it ran its warm-up job before serving, its warm-up started the Python workers of
the session of the pipeline it was given (Spark keeps a worker daemon per session), every
operator's client joins that one session and puts its jobs in the pipeline's pool, and
two operators of one pipeline side by side in it keep apart: interrupting one attempt's
tag leaves the other's jobs running. Read back through the server's REST API (its UI on
for the test), the sessions' conf and the server's processes; the clients run in a
subprocess (this process may hold a classic Spark session)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from batchpoint.jobs.warm_up import WARM_UP_TAG
from batchpoint.spark.connect import pipeline_pool, pipeline_session_id
from support import spark_rest
from support.spark_rest import tagged

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

#: Operators of two pipelines, jobs in turn: each client's session and pool as the
#: client saw them, by the tag of its job.
CLIENT = """
import json, sys
from batchpoint.jobs.run_operator import operator_session
from batchpoint.settings import Settings
remote = sys.argv[1]
settings = Settings.from_env()
seen = {}
turns = [("payments", "dedup"), ("payments", "balances"), ("orders", "dedup")]
for turn, (pipeline, name) in enumerate([*turns, ("payments", "dedup")]):
    spark = operator_session(pipeline, name, settings, remote)
    tag = f"pool-check-{turn}-{pipeline}"
    spark.addTag(tag)
    spark.range(1000).selectExpr("id % 7 as k").groupBy("k").count().collect()
    spark.removeTag(tag)
    seen[tag] = [spark.conf.get("spark.scheduler.pool"), spark.session_id]
print(json.dumps(seen))
"""

#: Two sinks of one pipeline side by side in its session, as Airflow runs them: the
#: first one's job is held in its Python task until interrupted by its attempt's tag
#: (what the task's on_kill does), the second one's jobs run meanwhile and after.
SIDE_BY_SIDE = """
import json, os, sys, threading, time
from batchpoint.jobs.run_operator import operator_session
from batchpoint.settings import Settings
from batchpoint.spark.remote import interrupt_attempt
remote, folder = sys.argv[1:3]
started = os.path.join(folder, "started")
settings = Settings.from_env()
held_spark = operator_session("payments", "balances_table", settings, remote)
other = operator_session("payments", "alerts", settings, remote)

def held(batches):
    import os, time
    open(started, "w").close()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until interrupted (or a test gone wrong)
        time.sleep(0.05)
    yield from batches

outcome = {}
def run_held():
    held_spark.addTag("attempt-held")
    try:
        rows = held_spark.range(0, 1, 1, 1)
        rows.mapInArrow(held, rows.schema).collect()
        outcome["held"] = "completed"
    except Exception as exc:
        outcome["held"] = type(exc).__name__ + ": " + str(exc)[:300]

thread = threading.Thread(target=run_held)
thread.start()
deadline = time.monotonic() + 120
while not os.path.exists(started) and time.monotonic() < deadline:
    time.sleep(0.05)
other.addTag("attempt-other")
during = other.range(10000).selectExpr("id % 13 as k").groupBy("k").count().count()
interrupted = interrupt_attempt(remote, "payments", "attempt-held")
thread.join(60)
after = other.range(500).count()
print(json.dumps({
    "same_session": held_spark.session_id == other.session_id,
    "started": os.path.exists(started), "during": during, "after": after,
    "interrupted": len(interrupted), "held": outcome.get("held"), "alive": thread.is_alive(),
}))
"""

DAEMON_MODULE = "batchpoint.spark.worker_daemon"

#: The pipeline whose session the server's warm-up opens.
PIPELINE = "demo.payments:pipeline"

#: One Python task in a session: `operator` names an operator of PIPELINE (its client
#: joins as its jobs join), "" a session of its own.
PYTHON_TASK = """
import sys
from batchpoint.jobs.run_operator import operator_session
from batchpoint.settings import Settings
from batchpoint.spark.connect import connect_session
remote, operator = sys.argv[1:3]
if operator:
    spark = operator_session("payments", operator, Settings.from_env(), remote)
else:
    spark = connect_session(remote, "not-warmed")
rows = spark.range(0, 4, 1, 2)
print(rows.mapInArrow(lambda batches: batches, rows.schema).count())
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from devstack.spark_connect import SparkConnectServer

    conf = {"spark.ui.enabled": "true", "spark.ui.port": "0"}
    workdir = tmp_path_factory.mktemp("warm-server")
    with SparkConnectServer(workdir, conf=conf, pipelines=[PIPELINE]) as started:
        yield started


def rest(server: Any, path: str) -> Any:
    return spark_rest.rest(server.log_path, path)


def test_the_server_schedules_fair_and_ran_its_warm_up_first(server: Any) -> None:
    environment = rest(server, "environment")
    spark_conf = dict(environment["sparkProperties"])
    assert spark_conf.get("spark.scheduler.mode") == "FAIR"
    jobs = rest(server, "jobs?status=succeeded")
    warm = tagged(jobs, WARM_UP_TAG)
    # mapInArrow/applyInArrow through a shuffle, a Parquet write and a read back.
    assert len(warm) >= 2, [j.get("jobTags") for j in jobs]
    assert server.warm_up_seconds is not None
    assert min(j["jobId"] for j in jobs) == min(j["jobId"] for j in warm)


def client_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_CONNECT_MODE_ENABLED", "MASTER")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "include"), str(ROOT), str(ROOT / "tests")])
    env["BATCHPOINT_ROOT"] = (tmp_path / "store").as_uri()
    return env


def run_client(code: str, *args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def worker_daemons(server: Any) -> set[int]:
    """The server's Python worker daemons: its descendants running the daemon module
    whose parent is not one (a forked worker's parent is its daemon)."""
    processes: dict[int, tuple[int, list[str]]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().decode().split("\0")
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        processes[int(entry.name)] = (parent, command)

    def under_server(pid: int) -> bool:
        while pid > 1 and pid in processes:
            if pid == server.pid:
                return True
            pid = processes[pid][0]
        return False

    def is_daemon(pid: int) -> bool:
        # python -m batchpoint.spark.worker_daemon (the JVM's own command line names
        # the module too, in its conf)
        return pid in processes and processes[pid][1][1:3] == ["-m", DAEMON_MODULE]

    return {
        pid
        for pid, (parent, _) in processes.items()
        if is_daemon(pid) and not is_daemon(parent) and under_server(pid)
    }


def test_the_warm_up_starts_the_python_workers_of_the_pipelines_session(
    server: Any, tmp_path: Path
) -> None:
    warm = tagged(rest(server, "jobs?status=succeeded"), WARM_UP_TAG)
    session = pipeline_session_id("payments", server.url)
    assert [j for j in warm if any(f"_Session_{session}_" in t for t in j["jobTags"])], (
        "no warm-up job ran in the pipeline's session"
    )
    env = client_env(tmp_path)
    before = worker_daemons(server)
    # Each operator's first Python task forks from the session's running daemon...
    for operator in ("dedup", "balances", "alerts"):
        assert run_client(PYTHON_TASK, server.url, operator, env=env).split()[-1] == "4"
    assert worker_daemons(server) == before
    # ...where a session the warm-up did not open starts a daemon of its own.
    assert run_client(PYTHON_TASK, server.url, "", env=env).split()[-1] == "4"
    assert len(worker_daemons(server) - before) == 1


def test_a_pipelines_operators_share_its_session_and_pool(server: Any, tmp_path: Path) -> None:
    done_stdout = run_client(CLIENT, server.url, env=client_env(tmp_path))
    seen = json.loads(done_stdout.strip().splitlines()[-1])
    jobs = rest(server, "jobs")
    stages = {s["stageId"]: s for s in rest(server, "stages")}
    for tag, (conf_pool, session_id) in seen.items():
        pipeline = tag.rsplit("-", 1)[1]
        assert session_id == pipeline_session_id(pipeline, server.url), tag
        assert conf_pool == pipeline_pool(pipeline)
        ran = tagged(jobs, tag)
        assert ran, f"no job tagged {tag}"
        # A stage a job skipped (its shuffle output was there) never ran in any pool.
        ran_stages = [stages[s] for j in ran for s in j["stageIds"] if s in stages]
        pools = {s["schedulingPool"] for s in ran_stages if s["status"] != "SKIPPED"}
        assert pools == {pipeline_pool(pipeline)}, (tag, pools)
    assert pipeline_pool("payments") != pipeline_pool("orders")


def test_interrupting_one_attempt_leaves_the_other_operators_jobs_running(
    server: Any, tmp_path: Path
) -> None:
    done_stdout = run_client(SIDE_BY_SIDE, server.url, str(tmp_path), env=client_env(tmp_path))
    result = json.loads(done_stdout.strip().splitlines()[-1])
    assert result["same_session"] and result["started"], result
    # the other sink's jobs ran while the held one's task ran, and after its interrupt
    assert (result["during"], result["after"]) == (13, 500), result
    assert result["interrupted"] >= 1 and not result["alive"], result
    assert "OPERATION_CANCELED" in result["held"], result
