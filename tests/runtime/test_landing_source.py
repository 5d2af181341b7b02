"""A source outside the pipeline's storage: payments land in another bucket of SeaweedFS,
reached with credentials taken from the environment (`${VAR}` in the options), while
the checkpoints live in a local folder. Epochs read each landed file once, and the
published sinks equal the reference over the landing bucket up to each barrier."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from batchpoint.errors import PipelineSpecError
from batchpoint.ops.local_epoch import LocalEpochRunner
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.sinks import read_sink_table
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from demo.payments_data import write_epoch_files
from demo.payments_reference import compute_reference
from devstack.seaweed import SeaweedServer
from support.clock import FakeClock

pytestmark = [pytest.mark.spark, pytest.mark.s3]

OPTIONS = {
    "endpoint_url": "${LANDING_ENDPOINT}",
    "region": "us-east-1",
    "access_key_id": "${LANDING_KEY}",
    "secret_access_key": "${LANDING_SECRET}",
}


@pytest.fixture
def landing(seaweed: SeaweedServer, monkeypatch: pytest.MonkeyPatch, request: Any) -> str:
    """A fresh prefix of a second bucket, its S3 settings in LANDING_* variables."""
    client = seaweed.client()
    if "landing" not in {b["Name"] for b in client.list_buckets()["Buckets"]}:
        client.create_bucket(Bucket="landing")
    monkeypatch.setenv("LANDING_ENDPOINT", seaweed.endpoint_url)
    monkeypatch.setenv("LANDING_KEY", seaweed.access_key)
    monkeypatch.setenv("LANDING_SECRET", seaweed.secret_key)
    return f"s3://landing/{request.node.name}"


def test_epochs_read_a_landing_bucket_once(
    spark: Any,
    tmp_path: Path,
    landing: str,
    seaweed: SeaweedServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="batchpoint")
    pipeline = build_pipeline(source_root=landing, source_options=OPTIONS)
    source = pipeline.sources["events"]
    assert source.location is not None and source.uri == landing
    # The secret from ${LANDING_SECRET} is shown nowhere (invariant 13) ...
    assert seaweed.secret_key not in repr(source) and seaweed.secret_key not in repr(pipeline)
    landed = source.location.open()
    state = StoreRef.of((tmp_path / "state").as_uri())
    clock = FakeClock()
    runner = LocalEpochRunner(pipeline, state, spark, CheckpointConfig(), clock=clock)
    for epoch in range(2):
        write_epoch_files(landed, "", epoch, accounts=30, events_per_epoch=200)
        clock.advance(1)
        result = runner.run_epoch()
        assert result.outcome is not None and result.outcome.completed is not None
        barrier = result.outcome.pending.barrier["events"]
        expected = compute_reference(landed, "", upto=barrier).balances
        got = read_sink_table(state.open(), "payments", "balances_table").to_pandas()
        got = got.sort_values("account_id", ignore_index=True)[list(expected.columns)]
        pd.testing.assert_frame_equal(got, expected, check_dtype=False)
    # nothing of the source was copied under the pipeline's storage
    assert not [i.key for i in state.open().list("sources/")]
    # ... neither stored (the registered spec, the records) nor logged.
    stored = state.open()
    holding = [
        i.key for i in stored.list() if seaweed.secret_key.encode() in stored.get(i.key).data
    ]
    assert stored.exists("pipelines/payments/spec.json") and holding == []
    assert [r.getMessage() for r in caplog.records if seaweed.secret_key in r.getMessage()] == []


def test_a_missing_variable_or_options_without_a_uri_are_clear_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LANDING_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.delenv("LANDING_KEY", raising=False)
    with pytest.raises(PipelineSpecError, match="LANDING_KEY is not set"):
        build_pipeline(source_root="s3://landing/x", source_options=OPTIONS)
    with pytest.raises(PipelineSpecError, match="need a root URI"):
        build_pipeline(source_root="sources/x", source_options={"region": "us-east-1"})
