"""A deploy plan holds a table sink's binding against the table's writer as the catalog
names it, where the base checkpoint records no sink of the table (seed 20554: a restore
took back the epoch that made it, and a sink of another uid then bound it: planned
deployable, every sync failed). On both stores, with a real catalog."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from batchpoint.protocol.config import CheckpointConfig
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.deploy import plan_on
from batchpoint.storage import StoreRef
from tables.table_epochs import PIPELINE, SINK, TABLE, TableEpochs


def _code(sink_uid: str) -> Pipeline:
    pipeline = Pipeline(PIPELINE)
    pipeline.source("events", root="src", schema=pa.schema([("account_id", pa.string())]))
    pipeline.sink(
        "balances", inputs=["events"], key=["account_id"], mode="snapshot", table=TABLE,
        uid=sink_uid,
    )  # fmt: skip
    return pipeline


@pytest.fixture
def made(table_store: StoreRef, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TableEpochs:
    epochs = TableEpochs(table_store, tmp_path, monkeypatch, CheckpointConfig(num_retained=3))
    epochs.epoch({"a": 1})
    assert epochs.read() == {"a": 1}  # the table exists, written by sink uid SINK
    return epochs


def test_a_table_another_sink_uid_made_is_refused_on_a_base_without_it(
    made: TableEpochs,
) -> None:
    plan = plan_on(_code("balances2"), made.store, None)
    assert not plan.deployable, plan.render()
    assert any(f"sink uid '{SINK}'" in p and f"uid='{SINK}'" in p for p in plan.problems), (
        plan.problems
    )


def test_the_sink_that_made_the_table_goes_on_in_it(made: TableEpochs) -> None:
    plan = plan_on(_code(SINK), made.store, None)
    assert plan.deployable, plan.render()


def test_a_catalog_that_cannot_be_read_leaves_the_binding_to_the_sync(
    made: TableEpochs,
) -> None:
    with made.outage():
        plan = plan_on(_code("balances2"), made.store, None)
    assert plan.deployable, plan.render()
