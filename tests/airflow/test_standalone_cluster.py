"""A real cluster without Docker: a Spark standalone master and one worker, a Spark
Connect server whose master is that cluster, and one epoch of the demo pipeline through
Airflow's checkpoint DAG (dag.test(), the scheduler's own task-running code, in this
process: the full api-server/scheduler stack of tests/support/airflow_stack.py costs
more than the two cores here can spare beside a cluster). The operator tasks are thin
clients; their Spark work runs in the worker's executor."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchpoint.protocol.checkpoint import CheckpointStatus
from support.payments import assert_sinks_match_reference
from support.spark_cluster import StandaloneCluster

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow, pytest.mark.s3]


@pytest.mark.timeout(1800)
def test_one_demo_epoch_through_airflow_on_a_standalone_cluster(bp, write_epoch, tmp_path: Path):
    from devstack.spark_connect import SparkConnectServer

    with StandaloneCluster(tmp_path / "cluster", worker_cores=2, worker_memory="2g") as cluster:
        server = SparkConnectServer(
            tmp_path / "spark-connect",
            master=cluster.master_url,
            conf={"spark.executor.memory": "1g", "spark.cores.max": "2"},
        )
        with server:
            bp.connect(server)
            bp.set(checkpoint_timeout=1800, ack_poll_interval=1)
            write_epoch(0)
            run, states = bp.run("payments_checkpoint")
            assert run.state == "success", states
            c = bp.driver().coordinator
            assert c.get_outcome(1).status is CheckpointStatus.COMPLETED
            assert_sinks_match_reference(bp.store, c, 1)

            # the work ran on the cluster: the server is its application, with executors
            apps = cluster.state().get("activeapps", [])
            mine = [a for a in apps if a.get("name", "").startswith("batchpoint-connect")]
            assert mine and mine[0]["cores"] > 0, apps
            workers = cluster.state()["workers"]
            assert [w["coresused"] for w in workers if w["state"] == "ALIVE"] != [0], workers
