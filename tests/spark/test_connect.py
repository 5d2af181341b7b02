"""The runtime over Spark Connect: operator tasks are thin clients (subprocesses, as
Airflow tasks are) of one shared server (the `connect_server` fixture), whose own
environment holds wrong S3 settings and credentials."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from batchpoint.ops.local_epoch import LocalEpochRunner
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from devstack.seaweed import SeaweedServer
from support.clock import FakeClock
from support.connect_env import WRONG_SERVER_ENV
from support.payments import PaymentsRun

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "tests" / "support" / "connect_client.py"
TASKS = ("dedup", "balances", "balances_table", "alerts")


def client_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "BATCHPOINT_"))}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "include"), str(ROOT), str(ROOT / "tests")])
    return {**env, **extra}


def storage_env(seaweed: SeaweedServer, root: str) -> dict[str, str]:
    """The task's storage settings: root and endpoint as batchpoint settings, the
    credentials from the standard AWS variables (the client's boto3 chain)."""
    return {
        "BATCHPOINT_ROOT": root,
        "BATCHPOINT_S3_ENDPOINT_URL": seaweed.endpoint_url,
        "BATCHPOINT_S3_REGION": seaweed.region,
        "AWS_ACCESS_KEY_ID": seaweed.access_key,
        "AWS_SECRET_ACCESS_KEY": seaweed.secret_key,
    }


def start_operator(
    remote: str,
    checkpoint_id: int,
    operator: str,
    env: dict[str, str],
    attempt: str = "",
    client: str = "operator",
) -> subprocess.Popen[str]:
    """`client`: "operator" runs batchpoint.jobs.run_operator (a connect-mode task's
    child), "task" the client inside a process that plays the Airflow task's."""
    return subprocess.Popen(
        [
            sys.executable,
            str(CLIENT),
            client,
            "--remote",
            remote,
            "--pipeline",
            "demo.payments:pipeline",
            "--checkpoint-id",
            str(checkpoint_id),
            "--operator",
            operator,
            *(["--attempt", attempt] if attempt else []),
        ],
        env=client_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str], timeout: float = 300) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def s3_run(spark: Any, seaweed: SeaweedServer) -> PaymentsRun:
    """A payments run on SeaweedFS; its driver (trigger, finalize) runs here."""
    root = seaweed.uri(f"tests/connect-{uuid.uuid4().hex[:8]}")
    ref = StoreRef.of(root, seaweed.storage_options())
    clock = FakeClock()
    runner = LocalEpochRunner(
        build_pipeline(parallelism=2), ref, spark, CheckpointConfig(), clock=clock
    )
    return PaymentsRun(ref, runner, clock)


def test_payments_epochs_over_connect_match_the_reference(
    spark: Any, seaweed: SeaweedServer, connect_server: Any
) -> None:
    run = s3_run(spark, seaweed)
    env = storage_env(seaweed, run.store_ref.uri)
    for epoch in range(2):
        run.add_input(epoch)
        run.clock.advance(1)
        cid = run.runner.driver.trigger().checkpoint_id
        # All four tasks at once, as Airflow may start them: they align on the acks, and
        # share the pipeline's server session.
        started = time.monotonic()
        tasks = {name: start_operator(connect_server.url, cid, name, env) for name in TASKS}
        for name, process in tasks.items():
            code, out, err = finish(process)
            assert code == 0, f"{name}: {err[-3000:]}"
            assert f"[{name}] checkpoint {cid}: acks" in out, out
        print(f"epoch {epoch}: four Connect tasks in {time.monotonic() - started:.1f}s")
        outcome, _ = run.runner.complete(cid)
        assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    run.assert_matches_reference()


def test_the_server_holds_wrong_storage_settings(connect_server: Any) -> None:
    """What the test above relies on: the server's own environment would fail."""
    environ = Path(f"/proc/{connect_server.pid}/environ").read_bytes().split(b"\0")
    for key, value in WRONG_SERVER_ENV.items():
        assert f"{key}={value}".encode() in environ


def test_a_client_of_another_batchpoint_version_is_refused(
    seaweed: SeaweedServer, connect_server: Any
) -> None:
    env = storage_env(seaweed, seaweed.uri(f"tests/skew-{uuid.uuid4().hex[:8]}"))
    process = start_operator(
        connect_server.url, 1, "dedup", {**env, "BATCHPOINT_TEST_CLIENT_VERSION": "0.0.0-skew"}
    )
    code, _, err = finish(process)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "batchpoint version mismatch: the client runs 0.0.0-skew" in lines[0]


def test_a_spark_setting_the_server_refuses_is_one_line_naming_it_and_exit_2(
    seaweed: SeaweedServer, connect_server: Any
) -> None:
    """BATCHPOINT_SPARK_CONF reaches the Connect session key by key: a static setting,
    which no session may change, is named, where pyspark's builder would ignore it."""
    env = storage_env(seaweed, seaweed.uri(f"tests/refused-{uuid.uuid4().hex[:8]}"))
    conf = json.dumps({"spark.sql.warehouse.dir": "/elsewhere"})
    code, _, err = finish(
        start_operator(connect_server.url, 1, "dedup", {**env, "BATCHPOINT_SPARK_CONF": conf})
    )
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(
        "error: Spark setting spark.sql.warehouse.dir: the server refused it: "
    ), err


def test_an_unreachable_server_is_one_line_and_exit_2(
    seaweed: SeaweedServer, tmp_path: Path
) -> None:
    from devstack.seaweed import free_ports

    remote = f"sc://127.0.0.1:{free_ports(1)[0]}"
    env = storage_env(seaweed, seaweed.uri("tests/unreachable"))
    code, _, err = finish(start_operator(remote, 1, "dedup", env))
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: Spark Connect server at {remote} is unreachable: "), err


def test_a_file_root_the_server_cannot_see_is_refused(connect_server: Any, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            str(CLIENT),
            "unshared",
            connect_server.url,
            root.as_uri(),
            str(tmp_path / "client-disk"),
        ],
        env=client_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stdout.strip() == (
        f"error: storage root {root.as_uri()} is not visible to the Spark server: a file:// "
        "root needs a filesystem shared by client and server (use s3:// otherwise)"
    )


def test_pyspark_connect_imports_and_serves_a_session(connect_server: Any) -> None:
    """`import pyspark.sql.connect` and a Connect session from a file, not `python -c`."""
    done = subprocess.run(
        [sys.executable, str(CLIENT), "session", connect_server.url],
        env=client_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rows=3 connect=pyspark.sql.connect.session" in done.stdout


def _wait_for(what: str, check: Any, timeout: float = 300) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_killed_clients_server_job_cannot_ack_and_its_late_files_are_collected(
    spark: Any, seaweed: SeaweedServer, connect_server: Any, tmp_path: Path
) -> None:
    """SIGKILL a client while the server runs its snapshot job: the job runs on and
    writes its files late, after a retry completed the checkpoint; acks are written by
    the client after its jobs, so the dead attempt never acks, the checkpoint does not
    reference its files, and GC collects them."""
    from batchpoint.ops.maintenance import gc

    run = s3_run(spark, seaweed)
    env = storage_env(seaweed, run.store_ref.uri)
    run.add_input(0)
    run.clock.advance(1)
    cid = run.runner.driver.trigger().checkpoint_id
    coordinator = run.runner.driver.coordinator
    pause = tmp_path / "pause"
    pause.mkdir()
    zombie = start_operator(
        connect_server.url,
        cid,
        "dedup",
        {
            **env,
            "BATCHPOINT_FAULT": f"dedup:spark-pause:{cid}",
            "BATCHPOINT_FAULT_PAUSE": str(pause),
        },
        attempt="zombie",
    )
    _wait_for("the server's job to reach the pause", (pause / "reached").exists)
    zombie.kill()
    zombie.wait()
    assert not any(t.operator == "dedup" for t in coordinator.acks(cid))

    # The retry (a new attempt), and the rest of the epoch, while the zombie job waits.
    tasks = {name: start_operator(connect_server.url, cid, name, env) for name in TASKS}
    for name, process in tasks.items():
        code, _, err = finish(process)
        assert code == 0, f"{name}: {err[-3000:]}"
    outcome, _ = run.runner.complete(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED

    # Now the dead attempt's server-side job goes on and writes.
    (pause / "release").touch()
    store = run.store
    data = coordinator.layout.data_prefix(cid)

    def zombie_files() -> list[str]:
        return [i.key for i in store.list(data) if "/zombie/" in i.key]

    completed = coordinator.completed.get(cid)
    referenced = {h.path for ack in completed.acks for h in ack.handles}
    # The dead attempt writes what the retry wrote (same input, same plan), stream by
    # stream: wait for all of it, or GC could list the folder between two of its files.
    retried = [p for p in referenced if p.startswith(data) and "/dedup/" in p]

    def all_late() -> list[str]:
        found = zombie_files()
        return found if len(found) >= len(retried) else []

    late = _wait_for("the dead attempt's late writes", all_late)
    assert not referenced & set(late)
    assert all(ack.attempt != "zombie" for ack in completed.acks)

    report = gc(coordinator, coordinator.store)
    assert set(late) <= set(report.deleted_files)
    assert not zombie_files()
    run.assert_matches_reference()


def _paused_client(
    remote: str, cid: int, env: dict[str, str], pause: Path, attempt: str, client: str = "operator"
) -> subprocess.Popen[str]:
    pause.mkdir()
    process = start_operator(
        remote,
        cid,
        "dedup",
        {
            **env,
            "BATCHPOINT_FAULT": f"dedup:spark-pause:{cid}",
            "BATCHPOINT_FAULT_PAUSE": str(pause),
        },
        attempt=attempt,
        client=client,
    )
    _wait_for("the server's job to reach the pause", (pause / "reached").exists)
    return process


@pytest.mark.parametrize("client", ["operator", "task"])
def test_sigterm_interrupts_the_attempts_server_jobs(
    spark: Any, seaweed: SeaweedServer, connect_server: Any, tmp_path: Path, client: str
) -> None:
    """Airflow's kill (SIGTERM) interrupts the attempt's job tag on the server: the
    job's own process before it exits (`operator`), or the task's on_kill when the client
    runs in the task's process (`task`). It declines nothing, so the retry completes the
    checkpoint."""
    run = s3_run(spark, seaweed)
    env = storage_env(seaweed, run.store_ref.uri)
    run.add_input(0)
    run.clock.advance(1)
    cid = run.runner.driver.trigger().checkpoint_id
    killed = _paused_client(connect_server.url, cid, env, tmp_path / "pause", "killed", client)
    killed.terminate()
    code, out, err = finish(killed)
    # The operator's writes run at once: the paused one, and any other not yet done.
    if client == "operator":
        assert code == 143, err[-3000:]
        assert re.search(r"\[dedup\] SIGTERM: interrupted [1-9]\d* Spark operation", out), out + err
    else:
        assert code == 0 and "exit=143" in out, out + err[-3000:]
        assert re.search(r"\[dedup\] killed: interrupted [1-9]\d* Spark operation", out), out + err
        assert "error: dedup was interrupted in checkpoint" in out, out
    coordinator = run.runner.driver.coordinator
    assert not coordinator.progress(cid).declines

    tasks = {name: start_operator(connect_server.url, cid, name, env) for name in TASKS}
    for name, process in tasks.items():
        code, _, err = finish(process)
        assert code == 0, f"{name}: {err[-3000:]}"
    outcome, _ = run.runner.complete(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    (tmp_path / "pause" / "release").touch()


def test_a_server_killed_mid_epoch_fails_the_task_in_one_line_and_a_retry_completes(
    spark: Any, seaweed: SeaweedServer, tmp_path: Path
) -> None:
    from devstack.spark_connect import SparkConnectServer

    run = s3_run(spark, seaweed)
    env = storage_env(seaweed, run.store_ref.uri)
    run.add_input(0)
    run.clock.advance(1)
    cid = run.runner.driver.trigger().checkpoint_id
    server = SparkConnectServer(tmp_path / "server").start()
    try:
        remote, port = server.url, server.port
        client = _paused_client(remote, cid, env, tmp_path / "pause", "orphaned")
        server.stop()
        code, _, err = finish(client)
        assert code == 2, err[-3000:]
        assert len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"error: Spark Connect server at {remote} is unreachable: "), err
        # Not the operator's fault: nothing declined, the checkpoint is still pending.
        progress = run.runner.driver.coordinator.progress(cid)
        assert progress.status is CheckpointStatus.PENDING and not progress.declines

        server = SparkConnectServer(tmp_path / "server", port=port).start()
        tasks = {name: start_operator(remote, cid, name, env) for name in TASKS}
        for name, process in tasks.items():
            code, _, err = finish(process)
            assert code == 0, f"{name}: {err[-3000:]}"
    finally:
        server.stop()
    outcome, _ = run.runner.complete(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    run.assert_matches_reference()


def test_clients_of_a_pipeline_share_one_session_and_move_on_when_it_is_closed(
    connect_server: Any,
) -> None:
    from batchpoint.spark.session import pipeline_session_id, successor_session_id

    pipeline = f"shared-{uuid.uuid4().hex[:8]}"
    first = pipeline_session_id(pipeline, connect_server.url)

    def join(*extra: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, str(CLIENT), "join", connect_server.url, pipeline, *extra],
            env=client_env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    assert f"session={first}" in join().stdout
    assert f"session={first}" in join("release").stdout  # and the server closes it
    moved = join()
    successor = successor_session_id(first)
    assert f"session={successor}" in moved.stdout
    assert f"has closed session {first}; using {successor} instead" in moved.stderr
