"""Counting an attempt's Spark jobs over Connect (issue 28): an operator task that is a
Connect client of a real local server records in its ack the jobs and stages the
server's REST API lists under the attempt's tag, the same counts the same epoch records
on a classic session; a server without a UI records no count, never a wrong one; a sink
with nothing new runs no job over Connect either."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from batchpoint.ops.local_epoch import LocalEpochRunner
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.runtime.api import Pipeline
from batchpoint.storage import StoreRef
from demo.payments import SOURCE_ROOT, build_pipeline
from demo.payments_data import write_epoch_files
from devstack.seaweed import free_ports
from devstack.spark_connect import SparkConnectServer
from support import fresh_sink
from support.clock import FakeClock
from support.connect_env import client_env

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "tests" / "support" / "connect_client.py"
#: The payments tasks in an order each finds its inputs acknowledged.
TASKS = ("dedup", "balances", "balances_table", "alerts")
DATA = {"accounts": 20, "events_per_epoch": 60}
PAYMENTS = "demo.payments:pipeline"
#: Payments with a sink on dedup's output (its client imports it from tests/).
FRESH_SINK = "support.fresh_sink:pipeline"


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkConnectServer]:
    """A Connect server whose UI (and so its REST API) runs, on a port of its own."""
    conf = {"spark.ui.enabled": "true", "spark.ui.port": str(free_ports(1)[0])}
    server = SparkConnectServer(tmp_path_factory.mktemp("connect-ui"), conf=conf, warm_up=False)
    with server:
        yield server


def runner_on(
    spark: Any, root: Path, pipeline: Pipeline | None = None
) -> tuple[LocalEpochRunner, FakeClock]:
    """Payments (or `pipeline`) on a store in `root` holding input epoch 0; its driver
    runs here."""
    ref = StoreRef.of(root.as_uri())
    write_epoch_files(ref.open(), SOURCE_ROOT, 0, **DATA)
    clock = FakeClock()
    return LocalEpochRunner(pipeline or build_pipeline(), ref, spark, clock=clock), clock


def run_over_connect(
    runner: LocalEpochRunner, remote: str, tasks: tuple[str, ...], pipeline: str = PAYMENTS
) -> Any:
    """One checkpoint whose `tasks` run as Connect clients of `remote` (subprocesses,
    as Airflow tasks are), loading `pipeline`; the acks of the checkpoint, once every
    task acknowledged."""
    checkpoint_id = runner.driver.trigger().checkpoint_id
    env = {**client_env(ROOT / "include"), "BATCHPOINT_ROOT": runner.driver.store_ref.uri}
    env["PYTHONPATH"] += f":{ROOT / 'tests'}"
    for name in tasks:
        done = subprocess.run(
            [
                sys.executable, str(CLIENT), "operator", "--remote", remote,
                "--pipeline", pipeline,
                "--checkpoint-id", str(checkpoint_id), "--operator", name,
            ],
            env=env, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{name}: {done.stderr[-3000:]}"
    return runner.driver.coordinator, checkpoint_id


def counts(acks: Any) -> dict[str, set[tuple[int | None, int | None]]]:
    out: dict[str, set[tuple[int | None, int | None]]] = {}
    for ack in acks:
        metrics = ack.metrics
        out.setdefault(ack.task.operator, set()).add((metrics.spark_jobs, metrics.spark_stages))
    return out


def storage_requests(acks: Any) -> dict[str, Any]:
    return {str(ack.task): ack.metrics.storage_requests for ack in acks}


def test_acks_over_connect_count_the_jobs_a_classic_session_counts(
    spark: Any, ui_server: SparkConnectServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Connect client cannot see the server's physical plan, so its writes always
    # shuffle by subtask (spark/aligned_writes.py); the classic epoch compared with it
    # takes that same path.
    import batchpoint.spark.stream_writer as stream_writer

    monkeypatch.setattr(stream_writer, "units", lambda df, spec: None)
    classic, clock = runner_on(spark, tmp_path / "classic")
    clock.advance(60)
    result = classic.run_epoch()
    assert result.outcome is not None and result.outcome.status is CheckpointStatus.COMPLETED
    expected = counts(result.outcome.completed.acks)

    remote, clock = runner_on(spark, tmp_path / "connect")
    clock.advance(60)
    _, checkpoint_id = run_over_connect(remote, ui_server.url, TASKS)
    outcome, _ = remote.complete(checkpoint_id)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    got = counts(outcome.completed.acks)
    print(f"classic: {expected}\nconnect: {got}")
    assert got == expected
    assert got["dedup"] != {(0, 0)}  # an epoch with input ran jobs: they were counted
    # the storage requests come back from the server's Python workers with their files
    connect_requests = storage_requests(outcome.completed.acks)
    assert connect_requests == storage_requests(result.outcome.completed.acks)
    assert connect_requests["dedup#0"] is not None and connect_requests["dedup#0"].put > 0


def test_a_server_without_ui_records_no_count(spark: Any, tmp_path: Path) -> None:
    # devstack's default: no UI, so no REST API to count by
    server = SparkConnectServer(tmp_path / "server", warm_up=False)
    with server:
        runner, clock = runner_on(spark, tmp_path / "store")
        clock.advance(60)
        coordinator, checkpoint_id = run_over_connect(runner, server.url, ("dedup",))
        acks = [a for a in coordinator.acks(checkpoint_id).values()]
    assert acks and counts(acks) == {"dedup": {(None, None)}}


def test_a_sink_with_nothing_new_runs_no_spark_job_over_connect(
    spark: Any, ui_server: SparkConnectServer, tmp_path: Path
) -> None:
    # The server proves the sink's input empty (spark.plan_facts), as a classic session
    # does. dedup unions its state with nothing new: proven idle on a classic session
    # only, so it runs its jobs here.
    runner, clock = runner_on(spark, tmp_path / "store", fresh_sink.pipeline())
    clock.advance(60)
    first = runner.run_epoch()
    assert first.outcome is not None and first.outcome.status is CheckpointStatus.COMPLETED
    clock.advance(60)  # no new input
    tasks = (*TASKS, "fresh")
    _, checkpoint_id = run_over_connect(runner, ui_server.url, tasks, FRESH_SINK)
    outcome, _ = runner.complete(checkpoint_id)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    got = counts(outcome.completed.acks)
    print(f"connect, nothing new: {got}")
    assert got["fresh"] == {(0, 0)}
    assert got["dedup"] != {(0, 0)}
    staged = [h for a in outcome.completed.acks if a.task.operator == "fresh" for h in a.handles]
    assert staged and all(h.rows == 0 for h in staged)
