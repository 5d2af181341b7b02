"""`read_sink` of a Delta table sink reads the Delta version each checkpoint published
(ops/dataframes.py::_delta_keys): the table's copies, not the manifest's staged files,
with the table's rows as of the checkpoint. Small: no pipeline run, real Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from batchpoint.ops.dataframes import read_sink
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.settings import Settings
from batchpoint.storage import StoreRef
from batchpoint.tables.delta import DeltaSinkTable
from tables.table_epochs import PIPELINE, SINK, TableEpochs

pytestmark = [pytest.mark.spark]


def test_read_sink_of_a_delta_sink_is_the_table_as_of_each_checkpoint(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = (tmp_path / "store").as_uri()
    monkeypatch.setenv("BATCHPOINT_ROOT", root)
    config = CheckpointConfig(num_retained=3)
    epochs = TableEpochs(StoreRef.of(root), tmp_path, monkeypatch, config, table_format="delta")
    one = epochs.epoch({"a": 1, "b": 2})
    two = epochs.epoch({"a": 5, "c": 7})
    table = epochs.table()
    assert isinstance(table, DeltaSinkTable)

    read_keys: list[list[str]] = []
    real = DeltaSinkTable.keys_at

    def spied(self: DeltaSinkTable, checkpoint_id: int | None = None) -> list[str]:
        read_keys.append(real(self, checkpoint_id))
        return read_keys[-1]

    monkeypatch.setattr(DeltaSinkTable, "keys_at", spied)
    settings = Settings.from_env()
    for cid in (one, two):
        rows = read_sink(spark, PIPELINE, SINK, cid, settings=settings).toPandas()
        got = dict(zip(rows["account_id"], rows["balance"], strict=True))
        assert got == epochs.read(cid) == epochs.rows[cid], cid
        # the version's files: the table's copies of the checkpoint's staged file
        (key,) = read_keys[-1]
        assert key.startswith("delta/pay/balances/batchpoint/"), key
        assert read_keys[-1] == sorted(table.version_keys(table.snapshot_of(cid)))
    latest = read_sink(spark, PIPELINE, SINK, settings=settings).toPandas()
    assert dict(zip(latest["account_id"], latest["balance"], strict=True)) == epochs.read()
