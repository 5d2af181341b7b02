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


def _changes_pipeline() -> Pipeline:
    p = Pipeline("shop")
    p.source("orders", table="shop.orders", schema=ORDERS, key=["order_id"], changes=True)

    @p.operator(
        inputs=["orders"],
        key=["customer"],
        states={"totals": "customer STRING NOT NULL, amount BIGINT, orders BIGINT"},
    )
    def totals(ctx: OperatorContext) -> Any:
        from pyspark.sql import functions as F

        sign = F.when(F.col("_row_kind").isin("+I", "+U"), 1).otherwise(-1)
        new = (
            ctx.input("orders")
            .groupBy("customer")
            .agg(F.sum(sign * F.col("amount")).alias("amount"), F.sum(sign).alias("orders"))
        )
        merged = (
            ctx.state("totals").unionByName(new).groupBy("customer")
            .agg(F.sum("amount").alias("amount"), F.sum("orders").alias("orders"))
            .where(F.col("orders") != 0)
        )  # fmt: skip
        ctx.set_state("totals", merged)
        return merged

    p.sink("totals_out", inputs=["totals"], key=["customer"], mode="snapshot")
    return p


def test_a_table_other_engines_rewrite_is_read_as_its_changes(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """changes=True: appends, an overwrite that updates, removes and adds orders, and a
    delete each reach the totals once: they equal a pandas sum over the table now."""
    from pyiceberg.expressions import EqualTo

    monkeypatch.delenv("BATCHPOINT_TABLE_CATALOG", raising=False)
    ref = StoreRef.of((tmp_path / "store").as_uri())
    catalog = open_catalog("batchpoint", ref.open())
    catalog.create_namespace_if_not_exists("shop")
    arrow = pa.schema(
        [("order_id", pa.string()), ("customer", pa.string()), ("amount", pa.int64())]
    )
    table = catalog.create_table("shop.orders", schema=arrow)
    rows = [{"order_id": f"o{i}", "customer": f"c{i % 3}", "amount": i} for i in range(9)]
    table.append(pa.Table.from_pylist(rows, schema=arrow))
    clock = FakeClock()
    runner = LocalEpochRunner(
        _changes_pipeline(), ref, spark, CheckpointConfig(skip_idle=False), clock=clock
    )

    def epoch_matches_the_table() -> None:
        clock.advance(1)
        result = runner.run_epoch()
        assert result.outcome is not None and result.outcome.completed is not None
        got = read_sink_table(ref.open(), "shop", "totals_out").to_pandas()
        got = got.sort_values("customer", ignore_index=True)[["customer", "amount", "orders"]]
        now = table.refresh().scan().to_pandas().groupby("customer", as_index=False)
        want = now.agg(amount=("amount", "sum"), orders=("order_id", "count"))
        pd.testing.assert_frame_equal(got, want, check_dtype=False)

    epoch_matches_the_table()
    rewritten = [dict(r, amount=r["amount"] * 10) for r in rows[:4]]  # updated
    rewritten += [{"order_id": "o9", "customer": "c3", "amount": 5}]  # added; o4..o8 gone
    table.overwrite(pa.Table.from_pylist(rewritten, schema=arrow))
    table.append(
        pa.Table.from_pylist([{"order_id": "o10", "customer": "c1", "amount": 7}], schema=arrow)
    )
    epoch_matches_the_table()
    table.delete(EqualTo("order_id", "o0"))
    epoch_matches_the_table()
    epoch_matches_the_table()  # nothing since: nothing read, the totals hold
