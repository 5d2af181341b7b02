"""spark_session's defaults fill gaps only: what the user set (spark-submit --conf, `conf`)
wins, and a cluster master never gets the local driver address."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from batchpoint.spark.session import DEFAULT_CONF, LOCAL_DRIVER_CONF, defaults_for

_PROBE = """
import json
from batchpoint.spark.session import spark_session

spark = spark_session("conf-probe")
conf = spark.sparkContext.getConf()
print("PROBE " + json.dumps({
    "master": spark.sparkContext.master,
    "driver.host": conf.get("spark.driver.host"),
    "driver.bindAddress": conf.get("spark.driver.bindAddress"),
    "shuffle.partitions": spark.conf.get("spark.sql.shuffle.partitions"),
    "timeZone": spark.conf.get("spark.sql.session.timeZone"),
}))
spark.stop()
"""


def test_defaults_for_a_local_master_with_nothing_set() -> None:
    assert defaults_for("local[2]", lambda key: False) == {**DEFAULT_CONF, **LOCAL_DRIVER_CONF}


def test_defaults_leave_what_is_set_alone() -> None:
    given = {"spark.sql.shuffle.partitions", "spark.driver.host"}
    out = defaults_for("local[2]", given.__contains__)
    assert not given & set(out)
    # Spark binds to spark.driver.host when no bindAddress is set: no 127.0.0.1 under it.
    assert "spark.driver.bindAddress" not in out
    assert out["spark.sql.session.timeZone"] == "UTC"


@pytest.mark.parametrize("master", ["spark://master:7077", "yarn", "k8s://https://api:6443"])
def test_a_cluster_master_gets_no_local_driver_address(master: str) -> None:
    out = defaults_for(master, lambda key: False)
    assert not set(LOCAL_DRIVER_CONF) & set(out)
    assert out["spark.sql.shuffle.partitions"] == DEFAULT_CONF["spark.sql.shuffle.partitions"]


@pytest.mark.spark
def test_the_test_session_got_the_defaults(spark: Any) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.host") == "127.0.0.1"
    # pyspark's own launcher sets a shell's progress bar; that is nobody's choice.
    assert conf.get("spark.ui.showConsoleProgress") == "false"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"


@pytest.mark.spark
def test_spark_submit_conf_reaches_the_session(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE)
    submit = Path(sys.executable).with_name("spark-submit")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    argv = [
        str(submit),
        "--master",
        "local[1]",
        "--conf",
        "spark.driver.host=localhost",
        "--conf",
        "spark.driver.bindAddress=0.0.0.0",
        "--conf",
        "spark.sql.shuffle.partitions=7",
        str(probe),
    ]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-4000:]
    seen = json.loads(lines[0].removeprefix("PROBE "))
    assert seen == {
        "master": "local[1]",  # spark-submit's --master, not spark_session's default
        "driver.host": "localhost",
        "driver.bindAddress": "0.0.0.0",
        "shuffle.partitions": "7",
        "timeZone": "UTC",  # a default where nothing was set
    }
