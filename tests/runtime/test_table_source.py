"""An Iceberg table as a pipeline's source, through real Spark epochs: orders appended
between epochs are each counted once (the sink equals a pandas sum over every appended
row), an epoch with nothing appended reads nothing, and a rewrite of the table declines
the next epoch with the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from batchpoint.ops.local_epoch import LocalEpochRunner
from batchpoint.protocol.checkpoint import CheckpointFailureReason
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.sinks import read_sink_table
from batchpoint.runtime.api import OperatorContext, Pipeline
from batchpoint.runtime.runner import OperatorFailed
from batchpoint.storage import StoreRef
from batchpoint.tables.catalog import open_catalog
from support.clock import FakeClock

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ORDERS = "order_id STRING NOT NULL, customer STRING NOT NULL, amount BIGINT"


def _pipeline() -> Pipeline:
    p = Pipeline("shop")
    p.source("orders", table="shop.orders", schema=ORDERS, key=["order_id"])

    @p.operator(
        inputs=["orders"],
        key=["customer"],
        states={"totals": "customer STRING NOT NULL, amount BIGINT, orders BIGINT"},
    )
    def totals(ctx: OperatorContext) -> Any:
        from pyspark.sql import functions as F

        new = (
            ctx.input("orders")
            .groupBy("customer")
            .agg(F.sum("amount").alias("amount"), F.count("*").alias("orders"))
        )
        merged = (
            ctx.state("totals")
            .unionByName(new)
            .groupBy("customer")
            .agg(F.sum("amount").alias("amount"), F.sum("orders").alias("orders"))
        )
        ctx.set_state("totals", merged)
        return merged

    p.sink("totals_out", inputs=["totals"], key=["customer"], mode="snapshot")
    return p


def test_appended_orders_are_counted_once_and_a_rewrite_declines(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BATCHPOINT_TABLE_CATALOG", raising=False)
    ref = StoreRef.of((tmp_path / "store").as_uri())
    catalog = open_catalog("batchpoint", ref.open())  # the file root's default catalog
    catalog.create_namespace_if_not_exists("shop")
    table = catalog.create_table(
        "shop.orders",
        schema=pa.schema(
            [("order_id", pa.string()), ("customer", pa.string()), ("amount", pa.int64())]
        ),
    )
    appended: list[dict[str, Any]] = []

    def append(n: int) -> None:
        start = len(appended)
        rows = [
            {"order_id": f"o{i}", "customer": f"c{i % 3}", "amount": i}
            for i in range(start, start + n)
        ]
        appended.extend(rows)
        table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))

    clock = FakeClock()
    runner = LocalEpochRunner(
        _pipeline(), ref, spark, CheckpointConfig(skip_idle=False), clock=clock
    )

    def epoch() -> pd.DataFrame:
        clock.advance(1)
        result = runner.run_epoch()
        assert result.outcome is not None and result.outcome.completed is not None
        got = read_sink_table(ref.open(), "shop", "totals_out").to_pandas()
        return got.sort_values("customer", ignore_index=True)[["customer", "amount", "orders"]]

    def expected() -> pd.DataFrame:
        frame = pd.DataFrame(appended).groupby("customer", as_index=False)
        return frame.agg(amount=("amount", "sum"), orders=("order_id", "count"))

    append(5)
    pd.testing.assert_frame_equal(epoch(), expected(), check_dtype=False)
    append(4)
    append(3)  # two snapshots between the epochs
    pd.testing.assert_frame_equal(epoch(), expected(), check_dtype=False)
    pd.testing.assert_frame_equal(epoch(), expected(), check_dtype=False)  # nothing new

    table.overwrite(pa.Table.from_pylist(appended[:2], schema=table.schema().as_arrow()))
    cid = runner.driver.trigger().checkpoint_id
    with pytest.raises(OperatorFailed, match="rewritten, not appended to"):
        runner.run_operators(cid)
    outcome = runner.driver.coordinator.get_outcome(cid)
    assert outcome is not None and outcome.reason is CheckpointFailureReason.DECLINED
