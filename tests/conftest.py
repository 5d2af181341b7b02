"""Fixtures shared by the whole suite.

Storage: `store` runs a test against every backend (local directory and a real
SeaweedFS); `s3_store`/`local_store` pick one. Each S3 test gets its own prefix in one
session-wide server, so tests never see each other's objects.

Payments on Spark: `make_run` makes a `PaymentsRun` (tests/support/payments.py) on a
fresh store or a copy of one; `after_first_epoch` and `good_epochs` are stores with
completed checkpoints to copy; `make_gate` builds a quality gate over a run.

`./dev test` runs the files on three pytest-xdist workers (BATCHPOINT_TEST_WORKERS), the
longest first (LONGEST_FILES below).

This file also puts tests/ on sys.path (pytest's default `prepend` import mode inserts
the folder of a conftest.py that is not in a package), so every test imports its shared
helpers as `support.*`, and the project root on the PYTHONPATH of the processes the
tests start (PROJECT_ROOT below).
"""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from batchpoint.storage import StoreRef
from batchpoint.storage.base import ObjectStore
from batchpoint.storage.local import LocalObjectStore
from batchpoint.storage.probe import probe_conditional_writes
from batchpoint.storage.s3 import S3ObjectStore, S3Settings
from devstack.seaweed import SeaweedServer
from support.connect_env import WRONG_SERVER_ENV

if TYPE_CHECKING:
    from batchpoint.quality.gate import QualityGate
    from support.payments import PaymentsRun

#: demo/ and devstack/ are folders of the checkout, not of the installed package: pytest
#: imports them from the project root (`pythonpath` in pyproject.toml), and the processes
#: the tests start (Spark workers, Airflow task runners, the CLI) get it on PYTHONPATH, as
#: under ./dev.
PROJECT_ROOT = Path(__file__).resolve().parents[1]
_PATH = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*_PATH, str(PROJECT_ROOT)]))

MiB = 1024 * 1024
# Small enough that a 12 MiB test file is a real multipart upload.
TEST_MULTIPART = {"multipart_threshold": 5 * MiB, "multipart_chunksize": 5 * MiB}


#: The files that take longest, longest first (the seconds of their tests in one quiet
#: fresh-clone `./dev test` at 51d4a73: 1493 s on three workers; CI's machines have been
#: up to 3.5 times slower). Only the order matters, and only for speed: `./dev test` hands
#: files to the pytest-xdist workers in collection order (--dist loadfile
#: --no-loadscope-reorder), and a long file handed out last runs alone while the other
#: workers idle. Files not named here follow, those with slow tests first.
LONGEST_FILES = {
    # docker-compose.yaml on hosts of its own through faults: first, so that it overlaps
    # the whole rest of the suite
    "tests/devstack/test_stack.py": 732,
    "tests/spark/test_connect.py": 328,
    "tests/demo/test_demo_run.py": 284,
    "tests/devstack/test_faults.py": 174,
    "tests/runtime/test_deploy_regressions.py": 158,
    "tests/runtime/test_deploy_model.py": 156,
    "tests/airflow/test_audit_dag.py": 129,
    "tests/spark/test_connect_job_counts.py": 120,
    "tests/airflow/test_connect_failures.py": 110,
    "tests/ops/test_state_source.py": 107,
    "tests/runtime/test_exactly_once.py": 106,
    "tests/quality/test_gate.py": 99,
    "tests/jobs/test_run_operator.py": 86,
    "tests/runtime/test_payments_deploys.py": 76,
    "tests/airflow/test_standalone_cluster.py": 75,
    "tests/quality/test_gate_identity.py": 70,
    "tests/spark/test_state_io.py": 68,
    "tests/spark/test_connect_server_warm.py": 64,
    "tests/airflow/test_checkpoint_dag.py": 57,
    "tests/protocol/test_concurrency_model.py": 56,
    "tests/airflow/test_savepoint_restore_dags.py": 55,
    "tests/runtime/test_incremental.py": 55,
    "tests/airflow/test_rest_stack.py": 54,
    "tests/packaging/test_wheel.py": 53,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def weight(item: pytest.Item) -> tuple[int, bool]:
        path = item.nodeid.split("::", 1)[0]
        return -LONGEST_FILES.get(path, 0), item.get_closest_marker("slow") is None

    items.sort(key=weight)


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    with SeaweedServer(tmp_path_factory.mktemp("seaweed")) as server:
        # Probed here, once: a store probes before its first conditional write, and a
        # test's injected faults must not meet the probe's requests instead.
        probe = S3ObjectStore(server.bucket, "", S3Settings.from_options(server.storage_options()))
        probe_conditional_writes(probe)
        probe.close()
        yield server


@pytest.fixture
def make_s3_store(
    seaweed: SeaweedServer, request: pytest.FixtureRequest
) -> Iterator[Callable[..., S3ObjectStore]]:
    """``make_s3_store(prefix=None, bucket=None, **settings)``: a store on the session's
    SeaweedFS under a fresh prefix unless one is given; closed after the test."""
    made: list[S3ObjectStore] = []

    def make(
        prefix: str | None = None, *, bucket: str | None = None, **settings: Any
    ) -> S3ObjectStore:
        options = {**seaweed.storage_options(), **TEST_MULTIPART, **settings}
        store = S3ObjectStore(
            bucket or seaweed.bucket,
            prefix if prefix is not None else unique_prefix(request),
            S3Settings.from_options(options),
        )
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
def s3_store(make_s3_store: Callable[..., S3ObjectStore]) -> S3ObjectStore:
    return make_s3_store()


@pytest.fixture
def local_store(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "store")


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store(request: pytest.FixtureRequest) -> ObjectStore:
    """Every storage backend in turn: tests using it are the cross-backend contract."""
    return request.getfixturevalue(f"{request.param}_store")


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def table_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreRef:
    """A store reference on each backend: a folder, or a fresh prefix on SeaweedFS."""
    if request.param == "local":
        return StoreRef.of((tmp_path / "store").as_uri())
    seaweed = request.getfixturevalue("seaweed")
    fresh = request.getfixturevalue("make_s3_store")()  # a fresh prefix of the test's
    return StoreRef.of(fresh.uri, seaweed.storage_options())


@pytest.fixture(scope="session")
def process_pool() -> Iterator[ProcessPoolExecutor]:
    """Worker processes for races between processes. Forked from a clean 'forkserver'
    (no lock or connection of this threaded test process is inherited half-way) that has
    the stores imported already, so workers start fast; they get their objects by
    pickling, exactly like Spark executors do."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["batchpoint.storage.local", "batchpoint.storage.s3"])
    workers = 4
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        # Start every worker now, so that a test's simultaneous start is simultaneous.
        for future in [pool.submit(time.sleep, 0.2) for _ in range(workers)]:
            future.result()
        yield pool


@pytest.fixture(autouse=True)
def _no_connect_switch_left_behind() -> Iterator[None]:
    """A test that opens a Spark Connect session in this process (the audit's gate in
    dag.test(), cancelling a killed task's operations) turns pyspark's Connect switch on
    for the process; switched back after the test, or the next test that uses the
    classic `spark` fixture in this worker would build Connect plans."""
    from batchpoint.spark.session import CONNECT_CLIENT_VARIABLES

    before = {name: os.environ.get(name) for name in CONNECT_CLIENT_VARIABLES}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark for the whole run (starting Spark costs seconds). `local[2,2]`:
    two cores, and a failed task is retried once, as on a cluster."""
    from pyspark.sql import SparkSession

    from batchpoint.spark.session import spark_session

    # An in-process caller (the CLI, the quality gate inside dag.test()) may have started
    # Spark first with the deployment's master, e.g. `local[1]`, which never retries a
    # failed task; the retry tests need this session's master.
    active = SparkSession.getActiveSession()
    if active is not None and active.sparkContext.master != "local[2,2]":
        active.stop()
    started = time.monotonic()
    session = spark_session("batchpoint-tests", "local[2,2]")
    print(f"\nSpark session started in {time.monotonic() - started:.1f}s")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Spark Connect server for the whole run, started on first use on a free port,
    with WRONG_SERVER_ENV in its environment. Its clients must run in subprocesses: a
    Connect session cannot live in this process beside the classic `spark` fixture."""
    from devstack.spark_connect import SparkConnectServer

    started = time.monotonic()
    server = SparkConnectServer(tmp_path_factory.mktemp("spark-connect"), env=WRONG_SERVER_ENV)
    with server:
        print(f"\nSpark Connect server started in {time.monotonic() - started:.1f}s")
        yield server


# -- the payments pipeline on Spark ------------------------------------------------------
# The imports are in the functions: pandas, the ops layer and Great Expectations take
# seconds to import, and a run of the storage or CLI tests needs none of them.


@pytest.fixture
def make_run(spark: Any, tmp_path: Path) -> Callable[..., PaymentsRun]:
    """``make_run(parallelism=2, copy_from=None, **config)``: a PaymentsRun on a fresh store
    in the test's folder, or on a copy of `copy_from`."""
    from support.payments import PaymentsRun

    def make(*, copy_from: Path | None = None, **options: Any) -> PaymentsRun:
        root = tmp_path / f"store-{len(list(tmp_path.iterdir()))}"
        if copy_from is not None:
            shutil.copytree(copy_from, root)
        return PaymentsRun.on(spark, root, **options)

    return make


def _completed_epochs(spark: Any, root: Path, epochs: int, tick: float) -> Path:
    """`epochs` completed payments checkpoints in `root`, the clock moved by `tick` before
    each one."""
    from support.payments import PaymentsRun

    run = PaymentsRun.on(spark, root)
    for epoch in range(epochs):
        run.add_input(epoch)
        run.clock.advance(tick)
        result = run.runner.run_epoch()
        assert result.outcome is not None and result.outcome.completed is not None
    return root


@pytest.fixture(scope="module")
def after_first_epoch(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with one completed checkpoint of payments: each failure test copies it
    instead of paying for epoch 1 again."""
    return _completed_epochs(spark, tmp_path_factory.mktemp("first-epoch") / "store", 1, tick=0)


@pytest.fixture(scope="session")
def good_epochs(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with GOOD_EPOCHS completed payments checkpoints: tests copy it."""
    from support.payments import GOOD_EPOCHS

    root = tmp_path_factory.mktemp("good-epochs") / "store"
    return _completed_epochs(spark, root, GOOD_EPOCHS, tick=1)


@pytest.fixture
def good_run(make_run: Callable[..., PaymentsRun], good_epochs: Path) -> PaymentsRun:
    """A fresh copy of the good store, as a PaymentsRun that can go on with epochs."""
    return make_run(copy_from=good_epochs)


@pytest.fixture
def make_gate(spark: Any) -> Callable[..., QualityGate]:
    """``make_gate(run, **options)``: the quality gate over a PaymentsRun, on its clock."""
    from batchpoint.quality.gate import QualityGate

    def make(run: PaymentsRun, **options: Any) -> QualityGate:
        options.setdefault("clock", run.clock)
        return QualityGate(run.runner.pipeline, run.store_ref, spark=spark, **options)

    return make


def unique_prefix(request: pytest.FixtureRequest) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name).strip("-")[:60]
    return f"tests/{name}-{uuid.uuid4().hex[:8]}"
