"""`spark.read.format("batchpoint")` (ops/state_source.py) reads what read_state and
read_sink read, on a store with two completed payments checkpoints (the head's state
has a changelog layer over a full one), and names every wrong option with the choices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.errors import PySparkException

from batchpoint.ops.dataframes import read_sink, read_state
from batchpoint.ops.local_epoch import LocalEpochRunner
from batchpoint.ops.state_source import register
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.settings import Settings
from batchpoint.spark.remote import error_line
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from devstack.seaweed import SeaweedServer
from support.clock import FakeClock
from support.payments import PaymentsRun

pytestmark = [pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "tests" / "support" / "state_source_client.py"


@pytest.fixture
def settings(good_run: PaymentsRun, spark: Any) -> Settings:
    settings = Settings.from_env({"BATCHPOINT_ROOT": good_run.store_ref.uri})
    register(spark, settings)
    return settings


def _frame(df: Any) -> pd.DataFrame:
    return df.toPandas().sort_values(df.columns[0], ignore_index=True)


def _load(spark: Any, **options: Any) -> Any:
    return spark.read.format("batchpoint").options(**options).load()


def _assert_same(got: Any, expected: Any) -> None:
    assert [(f.name, f.dataType) for f in got.schema] == [
        (f.name, f.dataType) for f in expected.schema
    ]
    pd.testing.assert_frame_equal(_frame(got), _frame(expected))


@pytest.mark.parametrize(("operator", "state"), [("balances", "balances"), ("dedup", "seen")])
def test_the_format_reads_a_state_as_read_state_does_at_the_head_and_an_older_checkpoint(
    spark: Any, settings: Settings, operator: str, state: str
) -> None:
    head = _load(spark, pipeline="payments", operator=operator, state=state)
    expected_head = read_state(spark, "payments", operator, state, settings=settings)
    _assert_same(head, expected_head)
    assert head.count() > 0
    older = _load(spark, pipeline="payments", operator=operator, state=state, checkpoint=1)
    expected_older = read_state(spark, "payments", operator, state, 1, settings=settings)
    _assert_same(older, expected_older)
    # Checkpoint 2 read more input: its rows differ from checkpoint 1's.
    assert not _frame(older).equals(_frame(head))


def test_the_format_reads_a_sinks_published_rows_as_read_sink_does(
    spark: Any, settings: Settings
) -> None:
    for sink, checkpoint in (("balances_table", "1"), ("balances_table", "latest")):
        got = _load(spark, pipeline="payments", sink=sink, checkpoint=checkpoint)
        _assert_same(got, read_sink(spark, "payments", sink, checkpoint, settings=settings))
    alerts = _load(spark, sink="alerts")  # the only pipeline on the store
    _assert_same(alerts, read_sink(spark, "payments", "alerts", settings=settings))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pipeline": "nope", "operator": "dedup", "state": "seen"}, "no pipeline 'nope' in "),
        (
            {"operator": "nope", "state": "seen"},
            "no stateful operator 'nope' (stateful: balances, dedup)",
        ),
        ({"operator": "dedup", "state": "nope"}, "has no state 'nope' (states: seen)"),
        (
            {"operator": "dedup", "state": "seen", "checkpoint": "9"},
            "checkpoint 9 of 'payments' does not exist (or was pruned): retained are [1, 2]",
        ),
        ({"operator": "dedup", "state": "seen", "checkpoint": "x"}, "checkpoint 'x': give an id"),
        (
            {"sink": "nope"},
            "pipeline 'payments' has no sink 'nope' (sinks: alerts, balances_table)",
        ),
        (
            {"operator": "dedup", "state": "seen", "chekpoint": "1"},
            "unknown option(s) chekpoint (options: root, pipeline, operator, state, sink, "
            "checkpoint)",
        ),
        ({"operator": "dedup"}, "option 'state' is missing"),
        ({"sink": "alerts", "state": "seen"}, "or 'sink' (a sink's published rows), not both"),
    ],
)
def test_a_wrong_option_is_one_error_naming_it_and_the_choices(
    spark: Any, settings: Settings, options: dict[str, str], message: str
) -> None:
    with pytest.raises(PySparkException) as raised:
        _load(spark, **options).collect()
    # Spark wraps a Python source's error with the worker's traceback; its one line
    # (what the CLI and the operators print of a server-side failure) is ours.
    kind, _, line = error_line(raised.value).partition(": ")
    assert kind in {"BatchpointError", "ConfigError", "UnknownPipeline"}, kind
    assert message in line


# -- over Spark Connect, and on SeaweedFS ----------------------------------------------


def _connect_read(remote: str, env: dict[str, str], **options: str) -> dict[str, Any]:
    """The format read by a Connect client (a subprocess with only `env`'s settings)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "BATCHPOINT_"))}
    clean.pop("SPARK_CONNECT_MODE_ENABLED", None)
    clean["PYTHONPATH"] = os.pathsep.join([str(ROOT / "include"), str(ROOT), str(ROOT / "tests")])
    argv = [sys.executable, str(CLIENT), remote, *(f"{k}={v}" for k, v in options.items())]
    done = subprocess.run(
        argv, env={**clean, **env}, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _as_client_shows(df: Any) -> dict[str, Any]:
    frame = df.orderBy(df.columns[0]).toPandas()
    rows = json.loads(frame.to_json(orient="records", date_format="iso"))
    return {"columns": df.columns, "rows": rows}


@pytest.mark.slow
def test_a_connect_client_reads_the_state_read_state_reads_and_gets_named_errors(
    spark: Any, settings: Settings, connect_server: Any
) -> None:
    env = {"BATCHPOINT_ROOT": settings.root}
    for checkpoint in ("latest", "1"):
        got = _connect_read(
            connect_server.url, env, operator="balances", state="balances", checkpoint=checkpoint
        )
        expected = read_state(
            spark, "payments", "balances", "balances", checkpoint, settings=settings
        )
        assert got == _as_client_shows(expected)
    wrong = _connect_read(connect_server.url, env, operator="nope", state="seen")
    assert "no stateful operator 'nope' (stateful: balances, dedup)" in wrong["error"]


@pytest.mark.s3
@pytest.mark.slow
def test_on_seaweedfs_the_format_reads_what_read_state_reads_in_both_session_kinds(
    spark: Any, seaweed: SeaweedServer, connect_server: Any
) -> None:
    root = seaweed.uri(f"tests/state-source-{uuid.uuid4().hex[:8]}")
    ref = StoreRef.of(root, seaweed.storage_options())
    clock = FakeClock()
    runner = LocalEpochRunner(
        build_pipeline(parallelism=2), ref, spark, CheckpointConfig(), clock=clock
    )
    run = PaymentsRun(ref, runner, clock)
    for epoch in range(2):
        assert run.epoch(epoch).outcome.completed is not None
    settings = Settings(root, dict(ref.options))
    register(spark, settings)
    for checkpoint in ("latest", "1"):
        got = _load(spark, operator="dedup", state="seen", checkpoint=checkpoint)
        _assert_same(
            got, read_state(spark, "payments", "dedup", "seen", checkpoint, settings=settings)
        )
    # The server's own environment holds wrong S3 settings: the registered ones travel.
    env = {
        "BATCHPOINT_ROOT": root,
        "BATCHPOINT_S3_ENDPOINT_URL": seaweed.endpoint_url,
        "BATCHPOINT_S3_REGION": seaweed.region,
        "AWS_ACCESS_KEY_ID": seaweed.access_key,
        "AWS_SECRET_ACCESS_KEY": seaweed.secret_key,
    }
    over_connect = _connect_read(connect_server.url, env, operator="dedup", state="seen")
    head = read_state(spark, "payments", "dedup", "seen", settings=settings)
    assert over_connect == _as_client_shows(head)
