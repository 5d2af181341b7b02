"""A Delta table as a pipeline's source, through real Spark epochs: orders appended
between epochs are each counted once (the sink equals a pandas sum over every appended
row), an epoch with nothing appended reads nothing, and a delete declines the next epoch
naming its version and operation; with changes=True and the change data feed on,
updates, merges and deletes reach the totals once (they equal a pandas sum over the
table now)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from batchpoint.ops.local_epoch import LocalEpochRunner
from batchpoint.protocol.checkpoint import CheckpointFailureReason
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.sinks import read_sink_table
from batchpoint.runtime.api import OperatorContext, Pipeline
from batchpoint.runtime.runner import OperatorFailed
from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.delta_location import table_uri
from support.clock import FakeClock

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ORDERS = "order_id STRING NOT NULL, customer STRING NOT NULL, amount BIGINT"
ARROW = pa.schema([("order_id", pa.string()), ("customer", pa.string()), ("amount", pa.int64())])


def _pipeline(changes: bool) -> Pipeline:
    p = Pipeline("shop")
    p.source(
        "orders", table="shop.orders", table_format="delta", schema=ORDERS, key=["order_id"],
        changes=changes,
    )  # fmt: skip

    @p.operator(
        inputs=["orders"],
        key=["customer"],
        states={"totals": "customer STRING NOT NULL, amount BIGINT, orders BIGINT"},
    )
    def totals(ctx: OperatorContext) -> Any:
        from pyspark.sql import functions as F

        orders = ctx.input("orders")
        if "_row_kind" in orders.columns:
            sign = F.when(F.col("_row_kind").isin("+I", "+U"), 1).otherwise(-1)
        else:
            sign = F.lit(1)
        new = orders.groupBy("customer").agg(
            F.sum(sign * F.col("amount")).alias("amount"), F.sum(sign).alias("orders")
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


class Shop:
    """The pipeline's store, its Delta table of orders and a runner of its epochs."""

    def __init__(self, spark: Any, tmp_path: Path, changes: bool) -> None:
        self.ref = StoreRef.of((tmp_path / "store").as_uri())
        self.uri = table_uri(self.ref.open(), TableBinding("shop.orders", format="delta"))
        self.clock = FakeClock()
        config = CheckpointConfig(skip_idle=False)
        self.runner = LocalEpochRunner(
            _pipeline(changes), self.ref, spark, config, clock=self.clock
        )

    def write(self, rows: list[dict[str, Any]], **kw: Any) -> None:
        write_deltalake(self.uri, pa.Table.from_pylist(rows, schema=ARROW), mode="append", **kw)

    def table(self) -> DeltaTable:
        return DeltaTable(self.uri)

    def epoch(self) -> pd.DataFrame:
        self.clock.advance(1)
        result = self.runner.run_epoch()
        assert result.outcome is not None and result.outcome.completed is not None
        got = read_sink_table(self.ref.open(), "shop", "totals_out").to_pandas()
        return got.sort_values("customer", ignore_index=True)[["customer", "amount", "orders"]]


def _totals(rows: pd.DataFrame) -> pd.DataFrame:
    frame = rows.groupby("customer", as_index=False)
    return frame.agg(amount=("amount", "sum"), orders=("order_id", "count"))


def _orders(start: int, n: int) -> list[dict[str, Any]]:
    return [
        {"order_id": f"o{i}", "customer": f"c{i % 3}", "amount": i} for i in range(start, start + n)
    ]


def test_appended_orders_are_counted_once_and_a_delete_declines(spark: Any, tmp_path: Path) -> None:
    shop = Shop(spark, tmp_path, changes=False)
    appended: list[dict[str, Any]] = []

    def append(n: int) -> None:
        rows = _orders(len(appended), n)
        appended.extend(rows)
        shop.write(rows)

    append(5)
    pd.testing.assert_frame_equal(shop.epoch(), _totals(pd.DataFrame(appended)), check_dtype=False)
    append(4)
    append(3)  # two versions between the epochs
    pd.testing.assert_frame_equal(shop.epoch(), _totals(pd.DataFrame(appended)), check_dtype=False)
    pd.testing.assert_frame_equal(shop.epoch(), _totals(pd.DataFrame(appended)), check_dtype=False)

    shop.table().delete("order_id = 'o0'")  # version 3
    cid = shop.runner.driver.trigger().checkpoint_id
    with pytest.raises(OperatorFailed, match="version 3 is a DELETE commit that removed rows"):
        shop.runner.run_operators(cid)
    outcome = shop.runner.driver.coordinator.get_outcome(cid)
    assert outcome is not None and outcome.reason is CheckpointFailureReason.DECLINED


def test_updates_and_deletes_are_read_through_the_change_data_feed(
    spark: Any, tmp_path: Path
) -> None:
    """changes=True: appends, updates, a merge and deletes each reach the totals once."""
    shop = Shop(spark, tmp_path, changes=True)
    shop.write(_orders(0, 9), configuration={"delta.enableChangeDataFeed": "true"})

    def epoch_matches_the_table() -> None:
        want = _totals(shop.table().to_pandas())
        pd.testing.assert_frame_equal(shop.epoch(), want, check_dtype=False)

    epoch_matches_the_table()
    shop.table().update(updates={"amount": "amount * 10"}, predicate="amount < 4")
    shop.table().delete("order_id = 'o5'")
    shop.write(_orders(9, 2))
    epoch_matches_the_table()
    merged = pa.Table.from_pylist(
        [{"order_id": "o1", "customer": "c2", "amount": 7}, *_orders(11, 1)], schema=ARROW
    )  # o1 moves to another customer
    shop.table().merge(
        merged, "t.order_id = s.order_id", source_alias="s", target_alias="t"
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    shop.table().delete("customer = 'c0'")
    epoch_matches_the_table()
    epoch_matches_the_table()  # nothing since: nothing read, the totals hold
