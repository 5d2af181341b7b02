"""The DAGs with real Spark jobs on SeaweedFS, through dag.test().

In connect mode (the default deployment) every operator task is a thin client of the
session's one Spark Connect server: a job killed mid-epoch aborts its checkpoint, the
next run recovers, a restore with a new parallelism continues from the restored
checkpoint, and the published sinks always equal the pandas reference over exactly the
input read so far.

In submit mode (kept for clusters reached through spark-submit) a `--conf` given in
BATCHPOINT_SPARK_SUBMIT_ARGS reaches the job's session, over batchpoint's defaults; in
connect mode BATCHPOINT_SPARK_CONF reaches the job's Connect session, on the server its
Airflow `spark_connect` connection names."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointStatus
from support.payments import assert_sinks_match_reference

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow, pytest.mark.s3]

SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
TESTS = Path(__file__).resolve().parents[1]


def test_spark_jobs_failure_recovery_and_rescaling_restore(
    bp, write_epoch, monkeypatch, connect_server
):
    bp.connect(connect_server)
    bp.set(checkpoint_timeout=1800, ack_poll_interval=1)
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
    assert sorted(str(a.task) for a in third.completed.acks if a.task.operator == "balances") == [
        "balances#0",
        "balances#1",
        "balances#2",
    ]
    assert_sinks_match_reference(bp.store, bp.driver().coordinator, 3)


def test_submit_mode_a_submit_conf_reaches_the_jobs_session(bp, write_epoch, monkeypatch):
    from batchpoint.protocol.coordinator import CheckpointCoordinator
    from batchpoint.protocol.sinks import read_sink_table
    from batchpoint.spark.fast_start import submit_args

    # The probe pipeline lives in tests/support: the job's Python must find it too.
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), path])))
    bp.set(
        spark_mode="submit",
        spark_submit=SPARK_SUBMIT,
        spark_master="local[1]",
        pipeline_ref="support.conf_probe:pipeline",
        # 3 where batchpoint's default is 4: the user's setting must win
        spark_submit_args=submit_args()
        + " --conf spark.sql.shuffle.partitions=3 --conf spark.batchpoint.probe=from-airflow",
        checkpoint_timeout=1800,
        ack_poll_interval=1,
    )
    write_epoch(0)
    run, states = bp.run("confprobe_checkpoint")
    assert run.state == "success", states
    coordinator = CheckpointCoordinator(bp.store, "confprobe")
    assert coordinator.get_outcome(1).status is CheckpointStatus.COMPLETED
    table = read_sink_table(bp.store, "confprobe", "probe_table").to_pandas()
    assert len(table) == 40  # every account of the input
    assert set(table["spark_sql_shuffle_partitions"]) == {"3"}
    assert set(table["spark_batchpoint_probe"]) == {"from-airflow"}


def test_connect_mode_the_spark_conf_setting_reaches_the_jobs_session_on_the_connections_server(
    bp, write_epoch, monkeypatch, connect_server
):
    from batchpoint.protocol.coordinator import CheckpointCoordinator
    from batchpoint.protocol.sinks import read_sink_table

    # The probe pipeline lives in tests/support: the job's Python must find it too.
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), path])))
    # The server comes from the Airflow connection; the variable, its fallback, names a
    # port where nothing listens (a job that used it would fail unreachable).
    monkeypatch.setenv(
        "AIRFLOW_CONN_BP_SPARK",
        json.dumps(
            {"conn_type": "spark_connect", "host": connect_server.host, "port": connect_server.port}
        ),
    )
    bp.set(
        spark_mode="connect",
        spark_remote="sc://127.0.0.1:1",
        spark_conn_id="bp_spark",
        connect_client="subprocess",
        pipeline_ref="support.conf_probe:pipeline",
        # 3 where the server's session would say otherwise: the user's setting must win
        spark_conf=json.dumps(
            {"spark.sql.shuffle.partitions": "3", "spark.batchpoint.probe": "from-conf"}
        ),
        checkpoint_timeout=1800,
        ack_poll_interval=1,
    )
    write_epoch(0)
    run, states = bp.run("confprobe_checkpoint")
    assert run.state == "success", states
    coordinator = CheckpointCoordinator(bp.store, "confprobe")
    assert coordinator.get_outcome(1).status is CheckpointStatus.COMPLETED
    table = read_sink_table(bp.store, "confprobe", "probe_table").to_pandas()
    assert len(table) == 40  # every account of the input
    assert set(table["spark_sql_shuffle_partitions"]) == {"3"}
    assert set(table["spark_batchpoint_probe"]) == {"from-conf"}
