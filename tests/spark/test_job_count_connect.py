"""An attempt's Spark work counted over Connect: the server's UI (REST API) lists each
job with the server's own form of the client's tag, and an ack records what ran under
its attempt's tag only (issue 28). The client runs in a subprocess, as an operator task
does: a Connect session cannot live in this process beside a classic one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from batchpoint.devstack.seaweed import free_ports
from batchpoint.devstack.spark_connect import SparkConnectServer
from support.connect_env import client_env

pytestmark = [pytest.mark.spark, pytest.mark.slow]

INCLUDE = Path(__file__).resolve().parents[2] / "include"

CLIENT = """
import json, sys
from batchpoint.spark import job_count
from batchpoint.spark.connect import connect_session
from batchpoint.spark.job_count import spark_work, tagged

# What is asked here is whose jobs count, not how long a loaded machine's UI takes to
# answer: a slow answer gives no count (None), as the REST timeout bounds an ack's wait.
job_count.REST_TIMEOUT = 120.0

spark = connect_session(sys.argv[1], "job-count-test")
spark.range(5).collect()  # under no tag: no attempt's work
with tagged(spark, "attempt-1"):
    spark.range(10).collect()
    spark.range(1000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
with tagged(spark, "attempt-11"):  # another attempt: not attempt-1's work
    spark.range(3).collect()
print(json.dumps([spark_work(spark, tag) for tag in ("attempt-1", "attempt-11", "none")]))
"""


@pytest.fixture(scope="module")
def server_with_ui(tmp_path_factory: pytest.TempPathFactory) -> Any:
    port = free_ports(1, "127.0.0.1")[0]
    conf = {"spark.ui.enabled": "true", "spark.ui.port": str(port)}
    workdir = tmp_path_factory.mktemp("spark-connect-ui")
    with SparkConnectServer(workdir, conf=conf, warm_up=False) as server:
        yield server


def test_a_connect_clients_work_is_counted_by_its_tag(server_with_ui: Any) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, server_with_ui.url],
        env=client_env(INCLUDE),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    tagged, other, none = json.loads(out.stdout.strip().splitlines()[-1])
    # range(10).collect(): one job of one stage; the aggregation under adaptive
    # execution: a job for its shuffle map stage, then one whose map stage is skipped.
    assert tagged == [3, 3]
    assert other == [1, 1]
    assert none == [0, 0]
