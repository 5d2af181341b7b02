"""Connect mode when the Spark Connect server is not there: the operator tasks fail with
one clear line naming the server; once it is back, Airflow's retries complete the
checkpoint (or it aborts and the next run catches up), and nothing is lost. A try that
lost its server waits in the task for the server to answer again, then fails for a retry
at once (airflow/outages.py).

The server-killing test uses a server of its own (it kills it), the real one: the fault
is a SIGKILL of its process group while an operator job is working on it."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from batchpoint.protocol.checkpoint import CheckpointStatus
from devstack.seaweed import free_ports
from support.payments import assert_sinks_match_reference

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.s3]

UNREACHABLE = re.compile(r"Spark Connect server at sc://127\.0\.0\.1:(\d+) is unreachable")
RETRIED_AT_ONCE = re.compile(r"it answers again after [\d.]+s: retrying now")


@contextlib.contextmanager
def _set_on_exit(event: threading.Event) -> Iterator[None]:
    try:
        yield
    finally:
        event.set()


def test_an_unreachable_server_fails_the_task_with_one_line(bp, write_epoch, capsys):
    (port,) = free_ports(1)  # nothing listens there
    bp.set(spark_mode="connect", spark_remote=f"sc://127.0.0.1:{port}", task_retries=0)
    write_epoch(0)
    run, states = bp.run("payments_checkpoint")
    log = capsys.readouterr().out
    assert run.state == "failed"
    assert states["operators.dedup"] == "failed", states
    match = UNREACHABLE.search(log)
    assert match and int(match.group(1)) == port, log[-3000:]
    # no retry left: the task declined for its job, so the checkpoint aborted at once
    c = bp.driver().coordinator
    assert c.get_outcome(1).status is CheckpointStatus.ABORTED
    assert bp.driver().sinks.manifest("balances_table") is None


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_server_killed_mid_epoch_then_back_loses_nothing(
    bp, write_epoch, monkeypatch, capsys, tmp_path: Path
):
    from batchpoint.airflow.hooks import OperatorJobLauncher
    from devstack.spark_connect import SparkConnectServer

    (port,) = free_ports(1)
    server = SparkConnectServer(tmp_path / "spark-connect", port=port)
    killed: list[str] = []
    real_run = OperatorJobLauncher.run

    test_over = threading.Event()

    def restart() -> None:
        # stop() reaps the killed process first: start() right after the SIGKILL could
        # still see it running and return without starting anything (CI, under load).
        server.stop()
        server.start()
        # The server dies with the thread that started it (devstack/processes.py).
        test_over.wait()

    def run_and_kill_the_server(self, argv, env, log, tail_lines=40):
        """The real launcher; the first time dedup's job reports progress, the server
        is SIGKILLed under it, and started again on its port as a restart policy would
        (the task waits for it to answer, then retries at once)."""

        def log_and_kill(line: str) -> None:
            log(line)
            if not killed and line.startswith("[dedup]"):
                killed.append(line)
                os.killpg(server.pid, signal.SIGKILL)
                threading.Thread(target=restart, daemon=True).start()

        return real_run(self, argv, env, log_and_kill, tail_lines)

    monkeypatch.setattr(OperatorJobLauncher, "run", run_and_kill_the_server)
    with server, _set_on_exit(test_over):
        bp.connect(server)
        bp.set(task_retries=1, task_retry_delay=0, checkpoint_timeout=1800, ack_poll_interval=1)
        c = bp.driver().coordinator
        write_epoch(0)
        run, states = bp.run("payments_checkpoint")
        log = capsys.readouterr().out
        assert killed, "dedup's job never reported progress"
        assert UNREACHABLE.search(log), log[-4000:]
        assert RETRIED_AT_ONCE.search(log), log[-4000:]
        # the retry, on the server that came back, completed the checkpoint
        assert c.get_outcome(1).status is CheckpointStatus.COMPLETED, states
        assert run.state == "success", states
        # and the next epoch's checkpoint reads everything since
        write_epoch(1)
        run, states = bp.run("payments_checkpoint")
        assert run.state == "success", states
        assert_sinks_match_reference(bp.store, bp.driver().coordinator, 2)


def test_a_killed_tasks_interrupt_reads_the_server_from_its_environment(
    bp, connect_server, monkeypatch
):
    """on_kill of a task whose client was a child process: the launcher interrupts the
    attempt's job tag from a child of its own, which joins the pipeline's session on the
    server named in its environment, not on its command line (where a token would show
    in `ps` and the task log)."""
    import subprocess
    from types import SimpleNamespace

    from batchpoint.airflow import connect_launcher

    bp.connect(connect_server)
    seen: list[list[str]] = []

    def recording(argv, **kwargs):
        seen.append(list(argv))
        return subprocess.run(argv, **kwargs)

    patched = SimpleNamespace(run=recording, TimeoutExpired=subprocess.TimeoutExpired)
    monkeypatch.setattr(connect_launcher, "subprocess", patched)
    launcher = connect_launcher.ConnectLauncher(bp.deployment(), "demo.payments:pipeline")
    said: list[str] = []
    launcher.interrupt("payments", 1, "dedup", "attempt-x", said.append)
    assert said == [f"interrupted attempt attempt-x on {connect_server.url}"], said
    assert len(seen) == 1 and not any(connect_server.url in arg for arg in seen[0]), seen
