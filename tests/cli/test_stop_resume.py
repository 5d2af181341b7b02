"""A stopped pipeline as the command line and the status pages see it, read from the
control record: `stats` and the overview say STOPPED (STOPPING while the savepoint runs),
a trigger is refused, `resume` starts it again (exit 1 with a clear message when it is
not stopped), `savepoint --stop` needs an epoch, and `gc` says what it settled."""

from __future__ import annotations

import time

import pytest

from batchpoint.errors import TriggerRefused
from batchpoint.ops.epoch import finalize
from batchpoint.ops.overview import pipeline_overview
from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointType
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.runtime.driver import PipelineDriver
from support.fake_epochs import ack_all, epoch, land_a_file

STOP = CheckpointProperties(stop_pipeline=True)


def overview_status(driver: PipelineDriver) -> tuple[str, str]:
    c = driver.coordinator
    overview = pipeline_overview(c, c.store, c.stats.page(None, 10))
    return overview.status, overview.status_detail


def test_stats_and_the_overview_read_the_stop_from_the_control_record(payments, cli):
    assert cli("stats", "--json").json["pipeline_status"] == "RUNNING"
    land_a_file(payments)
    pending = payments.trigger(CheckpointType.SAVEPOINT, properties=STOP)
    stop = pending.checkpoint_id
    assert overview_status(payments) == ("stopping", f"savepoint {stop} is stopping it")
    assert cli("stats", "--json").json["pipeline_status"] == "STOPPING"

    ack_all(payments, pending)
    assert finalize(payments, stop).outcome.completed is not None  # type: ignore[union-attr]
    status, detail = overview_status(payments)
    assert status == "stopped" and detail.startswith(f"stopped with savepoint {stop} at ")
    body = cli("stats", "--json").json
    assert body["pipeline_status"] == "STOPPED" and "batchpoint resume" in body["reason"]
    text = cli("stats").out
    assert "pipeline payments: STOPPED" in text and f"savepoint {stop}" in text

    land_a_file(payments)
    with pytest.raises(TriggerRefused) as refused:
        payments.trigger()
    assert refused.value.reason is CheckpointFailureReason.STOPPED

    run = cli("resume")
    assert run.code == 0 and f"stopped with savepoint {stop}" in run.out
    assert overview_status(payments) == ("running", "")
    assert epoch(payments) > stop

    again = cli("resume", "--json")
    assert again.code == 1
    assert again.json == {
        "json_version": 2,
        "pipeline": "payments",
        "resumed": False,
        "reason": "pipeline 'payments' is not stopped: nothing to resume",
    }


def test_savepoint_stop_needs_an_epoch(payments, cli):
    run = cli(
        "--pipeline-ref",
        "demo.payments:pipeline",
        "savepoint",
        "--stop",
        "--checkpoint-id",
        "1",
    )
    assert run.code == 2 and "--stop needs a savepoint epoch" in run.err
    assert payments.coordinator.control.load().stopping is None


def test_gc_says_which_checkpoint_it_expired(payments, cli):
    # Triggered two hours ago and never acked (its DAG paused): past its deadline.
    long_ago = PipelineDriver(
        payments.pipeline, payments.store_ref, payments.config, lambda: time.time() - 7200
    )
    land_a_file(payments)
    pending = long_ago.trigger()
    run = cli("gc")
    assert run.code == 0
    assert f"settled checkpoint {pending.checkpoint_id}: ABORTED (expired: " in run.out
    assert payments.coordinator.control.load().pending == ()
