"""The DAGs with real Spark jobs (pyspark's spark-submit, local mode) on SeaweedFS,
through dag.test(): a job killed mid-epoch aborts its checkpoint, the next run recovers,
a restore with a new parallelism continues from the restored checkpoint, and the
published sinks always equal the pandas reference over exactly the input read so far.

Nine Spark jobs in all (each is a JVM start plus a few small Spark stages), so this is the
slowest test of the Airflow suite."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointStatus
from batchpoint.spark.fast_start import submit_args
from support.payments import assert_sinks_match_reference

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow, pytest.mark.s3]

SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"


def test_spark_jobs_failure_recovery_and_rescaling_restore(bp, write_epoch, monkeypatch):
    bp.set(
        spark_submit=SPARK_SUBMIT,
        spark_master="local[2]",
        # Short jobs on tiny data: start-up dominates (see batchpoint.spark.fast_start).
        spark_submit_args=submit_args(),
        checkpoint_timeout=1800,
        ack_poll_interval=1,
    )
    c = bp.driver().coordinator

    # 1. dedup's job dies before its snapshot (like SIGKILL: no decline of its own) and
    #    has no retry left: the task declines for it, the checkpoint aborts, nothing is
    #    published.
    write_epoch(0)
    monkeypatch.setenv("BATCHPOINT_FAULT", "dedup:before-snapshot")
    run, states = bp.run("payments_checkpoint")
    monkeypatch.delenv("BATCHPOINT_FAULT")
    assert run.state == "failed"
    assert states["operators.dedup"] == "failed", states
    assert states["operators.balances"] == "upstream_failed"
    outcome = c.get_outcome(1)
    assert outcome.reason is CheckpointFailureReason.DECLINED
    assert bp.driver().sinks.manifest("balances_table") is None

    # 2. the next run reads everything since the last *completed* checkpoint (none):
    #    both epochs' input, exactly once.
    write_epoch(1)
    run, states = bp.run("payments_checkpoint")
    assert run.state == "success", states
    assert c.get_outcome(2).status is CheckpointStatus.COMPLETED
    assert_sinks_match_reference(bp.store, bp.driver().coordinator, 2)

    # 3. restore checkpoint 2 with other parallelisms; the next epoch rescales the state
    #    by key group and continues from checkpoint 2's barrier.
    run, states = bp.run(
        "payments_restore", {"source": "2", "parallelism": {"dedup": 1, "balances": 3}}
    )
    assert run.state == "success", states
    write_epoch(2)
    run, states = bp.run("payments_checkpoint")
    assert run.state == "success", states
    third = c.get_outcome(3)
    assert third.pending.base_checkpoint_id == 2
    assert sorted(a.task for a in third.completed.acks if a.task.startswith("balances#")) == [
        "balances#0",
        "balances#1",
        "balances#2",
    ]
    assert_sinks_match_reference(bp.store, bp.driver().coordinator, 3)
