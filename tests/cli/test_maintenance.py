"""`gc` and `reset`: what they delete or clear, as text and JSON; bad input refused with
nothing written."""

from __future__ import annotations

import time

import pytest

from batchpoint.protocol.checkpoint import CheckpointFailureReason
from batchpoint.protocol.layout import TaskId
from batchpoint.runtime.driver import PipelineDriver
from support.cli import listing


def test_gc_dry_run_deletes_nothing_then_gc_deletes_what_it_listed(payments, cli):
    c = payments.coordinator
    pending = payments.trigger()
    stray = c.layout.task_data_prefix(pending.checkpoint_id, TaskId("dedup", 0), "x") + "f"
    c.store.put(stray, b"staged by a task of an aborted checkpoint")
    c.abort(pending.checkpoint_id, CheckpointFailureReason.DECLINED, "declined")
    before = listing(payments)

    dry = cli("gc", "--dry-run", "--json")
    assert dry.code == 0 and dry.json["dry_run"] is True and dry.json["deleted_files"] >= 1
    assert listing(payments) == before

    run = cli("gc")
    assert run.code == 0 and "deleted 1 file(s)" in run.out.splitlines()[-1]
    assert not c.store.exists(stray)


def test_gc_history_limit_prunes_old_records(payments, cli):
    # Aborted two hours ago: past GC's grace for late writers (BATCHPOINT_GC_GRACE), so
    # their files go and then their records, beyond the newest --history-limit.
    long_ago = PipelineDriver(
        payments.pipeline, payments.store_ref, payments.config, lambda: time.time() - 7200
    )
    for _ in range(3):
        pending = long_ago.trigger()
        long_ago.coordinator.abort(
            pending.checkpoint_id, CheckpointFailureReason.DECLINED, "declined"
        )
    body = cli("--json", "gc", "--history-limit", "0").json
    assert body["pruned_checkpoints"], body


def test_reset_clears_a_failed_pipeline(payments, cli):
    c = payments.coordinator
    for _ in range(c.config.tolerable_failed_checkpoints + 1):
        pending = payments.trigger()
        c.abort(pending.checkpoint_id, CheckpointFailureReason.DECLINED, "declined")
    assert c.failures.state().status.value == "FAILED"

    body = cli("reset", "--json").json
    assert body == {"json_version": 2, "pipeline": "payments", "status": "RUNNING", "was": "FAILED"}
    assert c.failures.state().status.value == "RUNNING"
    assert cli("reset").out.strip() == "pipeline payments: RUNNING"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gc", "--history-limit", "-1"], "argument --history-limit: must be 0 or more"),
        (["gc", "--history-limit", "many"], "expected an integer"),
        (["--pipeline", "nope", "gc"], "no pipeline 'nope'"),
        (["--pipeline", "nope", "reset"], "no pipeline 'nope'"),
        (["reset", "--pipeline", "nope", "--json"], "no pipeline 'nope'"),
    ],
)
def test_bad_input_is_refused_and_creates_nothing(payments, cli, argv, message):
    before = listing(payments)
    run = cli(*argv)
    assert run.code == 2 and message in run.refusal(argv)
    assert listing(payments) == before
    assert not list(payments.store.list("pipelines/nope/"))
