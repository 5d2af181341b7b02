"""Airflow test setup.

Airflow reads AIRFLOW_HOME and its database URL when it is first imported, so this
module sets them at import time (before any test module imports Airflow): one
AIRFLOW_HOME per session in a temp dir, a SQLite database migrated once per session,
the project's dags/ folder as the only bundle, examples off, low parallelism.

`bp` gives each test its own storage prefix on the session's SeaweedFS and the
BATCHPOINT_* environment the DAG file is parsed with; by default operator jobs run the
fake spark-submit (fake_spark/, submit mode), which acks in a fraction of a second. The
slow tests that run real Spark jobs switch to connect mode with `bp.connect()`: thin
clients of the one Spark Connect server of the whole run (`connect_server`, in
tests/conftest.py); one keeps pyspark's real spark-submit (submit mode).

This folder has no __init__.py on purpose: as a package under tests/ (which has none) it
would be imported as `airflow` and shadow Apache Airflow.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PROJECT = Path(__file__).resolve().parents[2]
DAGS = PROJECT / "dags"
PLUGINS = PROJECT / "plugins"
FAKE_SPARK_SUBMIT = Path(__file__).resolve().parent / "fake_spark" / "spark-submit"

_HOME = Path(tempfile.mkdtemp(prefix="bp-airflow-home-"))
if "airflow" in sys.modules:  # pragma: no cover - a guard, not a code path
    raise RuntimeError("Airflow was imported before tests/airflow/conftest.py set its home")
os.environ.update(
    {
        "AIRFLOW_HOME": str(_HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS),
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME}/airflow.db",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(_HOME / "logs"),
        "AIRFLOW__SECRETS__USE_CACHE": "False",
    }
)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_home() -> Path:
    """The session's AIRFLOW_HOME with a migrated database (once: about 10 s)."""
    from airflow.utils.db import initdb

    initdb()
    return _HOME


@pytest.fixture(scope="session")
def storage_connection(seaweed: Any) -> dict[str, Any]:
    """The `batchpoint_storage` connection: endpoint and keys of the session's SeaweedFS.
    The root stays in BATCHPOINT_ROOT, so each test can have its own prefix."""
    return {
        "conn_type": "aws",
        "host": seaweed.endpoint_url,
        "login": seaweed.access_key,
        "password": seaweed.secret_key,
        "extra": {"region": seaweed.region},
    }


@dataclass
class BatchpointEnv:
    """One test's deployment: its storage root and BATCHPOINT_* settings."""

    root: str
    monkeypatch: pytest.MonkeyPatch
    seaweed: Any

    def set(self, **values: object) -> None:
        """BATCHPOINT_<NAME>=value for each keyword (name upper-cased)."""
        for name, value in values.items():
            self.monkeypatch.setenv(f"BATCHPOINT_{name.upper()}", str(value))

    @property
    def settings(self) -> Any:
        from batchpoint.settings import Settings

        return Settings(self.root, self.seaweed.storage_options(), "local[1]")

    @property
    def store(self) -> Any:
        return self.settings.store_ref.open()

    def connect(self, server: Any) -> None:
        """Operator tasks (and the audit) as thin clients of the Spark Connect `server`.
        Each operator's client is a child process: dag.test() runs the tasks in this
        process, which holds (or will hold) the other tests' classic session, and one
        Python process cannot hold both kinds."""
        self.set(spark_mode="connect", spark_remote=server.url, connect_client="subprocess")

    def deployment(self) -> Any:
        from batchpoint.airflow.config import AirflowDeployment

        return AirflowDeployment.from_env()

    def dags(self) -> dict[str, Any]:
        from batchpoint.airflow.dag_factory import load_dags

        return load_dags(self.deployment())

    def driver(self) -> Any:
        from batchpoint.runtime.driver import PipelineDriver
        from demo.payments import pipeline

        deployment = self.deployment()
        return PipelineDriver(pipeline, self.settings.store_ref, deployment.checkpoint)

    def run(
        self, dag_id: str, conf: dict[str, Any] | None = None, **kwargs: Any
    ) -> tuple[Any, dict[str, str]]:
        """dag.test() of one DAG built from the current environment; returns the run and
        task_id -> state."""
        dag = self.dags()[dag_id]
        run = dag.test(run_conf=conf, **kwargs)
        return run, {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


@pytest.fixture
def bp(
    airflow_home: Path,
    seaweed: Any,
    storage_connection: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[BatchpointEnv]:
    prefix = f"airflow-tests/{uuid.uuid4().hex[:10]}"
    env = BatchpointEnv(seaweed.uri(prefix), monkeypatch, seaweed)
    monkeypatch.setenv("AIRFLOW_CONN_BATCHPOINT_STORAGE", json.dumps(storage_connection))
    for name in [n for n in os.environ if n.startswith("BATCHPOINT_")]:
        monkeypatch.delenv(name)
    env.set(
        root=env.root,
        # The DAG entry builds nothing without both (batchpoint.airflow.dags).
        pipeline_ref="demo.payments:pipeline",
        spark_master="local[1]",
        # The fake spark-submit acks in a fraction of a second; the tests that run real
        # Spark switch to connect mode on the session's server (`connect_mode`).
        spark_mode="submit",
        spark_submit=FAKE_SPARK_SUBMIT,
        ack_sensor_mode="reschedule",
        ack_poll_interval=0.3,
        task_retries=0,
        checkpoint_timeout=120,
        checkpoint_interval="none",
        cleanup_grace=30,
    )
    for name in ("FAKE_JOB_FAIL", "FAKE_JOB_KILL"):
        monkeypatch.delenv(name, raising=False)
    yield env


@pytest.fixture
def write_epoch(bp: BatchpointEnv) -> Callable[[int], list[str]]:
    """Small payments input: 40 accounts, 300 events per epoch."""
    from demo.payments import SOURCE_ROOT
    from demo.payments_data import write_epoch_files

    def write(epoch: int) -> list[str]:
        return write_epoch_files(
            bp.store, SOURCE_ROOT, epoch, accounts=40, events_per_epoch=300, files_per_partition=2
        )

    return write
