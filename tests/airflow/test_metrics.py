"""Checkpoint metrics reach Airflow's configured metrics backend: here Airflow's own
StatsD logger, sending real UDP datagrams to a socket the test listens on."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.s3]


class StatsdListener:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []

    def batchpoint(self) -> dict[str, list[tuple[float, str]]]:
        """name -> [(value, type)] of the batchpoint metrics received so far."""
        self._drain()
        out: dict[str, list[tuple[float, str]]] = {}
        for line in self.lines:
            name, _, rest = line.partition(":")
            if ".batchpoint." not in f".{name}":
                continue
            value, _, kind = rest.partition("|")
            out.setdefault(name.removeprefix("airflow."), []).append((float(value), kind))
        return out

    def wait_for(self, names: list[str], timeout: float = 10) -> dict[str, list[tuple[float, str]]]:
        deadline = time.monotonic() + timeout
        seen = self.batchpoint()
        while not all(n in seen for n in names) and time.monotonic() < deadline:
            seen = self.batchpoint()
        return seen

    def _drain(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return
            self.lines.extend(data.decode().splitlines())


@pytest.fixture
def statsd(monkeypatch) -> Iterator[StatsdListener]:
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    listener = StatsdListener()
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(listener.port))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "airflow")
    # What a task runner does at start (dag.test() runs tasks in this process).
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
    yield listener
    stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
    listener.sock.close()


def test_checkpoint_metrics_reach_statsd(bp, write_epoch, monkeypatch, statsd):
    write_epoch(0)
    assert bp.run("payments_checkpoint")[0].state == "success"
    outcome = bp.driver().coordinator.get_outcome(1)
    completed = outcome.completed
    p = "batchpoint.payments.checkpoint"
    seen = statsd.wait_for([f"{p}.duration", f"{p}.state_size", f"{p}.completed.checkpoint"])
    ((duration, kind),) = seen[f"{p}.duration"]
    expected_ms = (completed.completed_at - outcome.pending.trigger_time) * 1000
    assert kind == "ms" and duration == pytest.approx(expected_ms, abs=1)
    assert seen[f"{p}.state_size"] == [(completed.state_size, "g")]
    assert seen[f"{p}.acks"] == [(len(completed.acks), "g")]
    assert seen[f"{p}.completed"] == [(1, "c")]

    write_epoch(1)
    monkeypatch.setenv("FAKE_JOB_FAIL", "balances")
    assert bp.run("payments_checkpoint")[0].state == "failed"
    aborted = bp.driver().coordinator.get_outcome(2)
    reason = aborted.reason.code
    seen = statsd.wait_for([f"{p}.failed.{reason}"])
    assert seen[f"{p}.failed"] == [(1, "c")]
    assert seen[f"{p}.failed.{reason}"] == [(1, "c")]
    assert f"{p}.duration" in seen and len(seen[f"{p}.duration"]) == 1  # none for the abort


def test_a_metrics_backend_that_fails_does_not_fail_the_task(bp, write_epoch, caplog):
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.observability import stats

    from batchpoint.airflow import metrics

    class FailingForBatchpoint(NoStatsLogger):
        """The fault: sending any batchpoint metric fails (Airflow's own still work)."""

        def _fail(self, stat, *args, **kwargs):
            if str(stat).startswith("batchpoint."):
                raise OSError("statsd: network unreachable")

        incr = gauge = timing = _fail

    stats.initialize(factory=FailingForBatchpoint, export_legacy_names=False)
    try:
        write_epoch(0)
        assert bp.run("payments_checkpoint")[0].state == "success"
        metrics.restored("payments")  # directly too: logged, not raised
    finally:
        stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
    assert "could not emit a metric" in caplog.text
