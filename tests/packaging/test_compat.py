"""The compatibility job (bench/compat.py) on the lowest versions the extras allow: Spark
4.0 and Airflow 3.0 (their newest patch releases), in an environment of their own made
with uv from the built wheel, never this checkout's. In it the checkout's DAG folder
parses, the installed plugin and provider load, the payments pipeline runs two epochs
through its checkpoint DAG (operator tasks as clients of a Spark 4.0 Connect server, on
SeaweedFS), the restore DAG goes back to the first checkpoint, the next epoch continues
from it, and the published sinks equal the pandas reference.

The environment is kept in build/compat (about 1.1 GB) and reused by the next run; once
uv's cache holds the packages, making it takes about two minutes, and the job about ten
on 2 busy cores (580 s at a load of 15 to 70)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.airflow,
    pytest.mark.s3,
    pytest.mark.timeout(1800),
]

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lowest(tmp_path_factory) -> dict:
    results = tmp_path_factory.mktemp("compat") / "results.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [sys.executable, str(PROJECT / "bench" / "compat.py"), "--pair", "lowest",
         "--timeout", "1200", "--results", str(results)],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1700,
    )  # fmt: skip
    print(done.stdout[-4000:], done.stderr[-4000:])
    assert results.exists(), f"exit {done.returncode}:\n{done.stdout}\n{done.stderr}"
    (result,) = json.loads(results.read_text())
    return {**result, "exit": done.returncode, "envs": str(PROJECT / "build" / "compat")}


def test_the_lowest_versions_ran(lowest):
    assert lowest["versions"]["pyspark"].startswith("4.0.")
    assert lowest["versions"]["apache-airflow"].startswith("3.0.")
    assert (lowest["spark"], lowest["airflow"]) == (
        lowest["versions"]["pyspark"],
        lowest["versions"]["apache-airflow"],
    )
    # the wheel installed in the pair's environment, not this checkout's include/
    assert lowest["versions"]["batchpoint"].startswith(lowest["envs"])
    assert "site-packages" in lowest["versions"]["batchpoint"]


def test_the_dags_parse_and_the_pipeline_epochs_and_restore_pass(lowest):
    assert lowest["failure"] is None
    assert lowest["passed"] is True and lowest["exit"] == 0
    assert list(lowest["phases"]) == [
        "servers", "parse", "airflow-db", "epochs", "restore", "check"
    ]  # fmt: skip
