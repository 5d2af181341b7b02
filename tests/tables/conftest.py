from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.service import sink_table
from batchpoint.tables.sync import SinkTableAdapter
from tables.sinkfiles import PIPELINE, SINK


@pytest.fixture
def table_format() -> str:
    """The format `open_table` opens (a module parametrizes it to run on both)."""
    return "iceberg"


@pytest.fixture
def open_table(
    table_store: StoreRef, tmp_path: Path, table_format: str
) -> Callable[..., SinkTableAdapter]:
    """``open_table(identifier="pay.balances", sink=SINK)``: the sink's table adapter on
    `table_store` in `table_format`; an Iceberg table's
    `table_store`, its SQL catalog a SQLite file of the test's (on S3 roots it must be
    named; file roots default to one under the root)."""
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"

    def make(identifier: str = "pay.balances", sink: str = SINK, **kw: Any) -> SinkTableAdapter:
        binding = TableBinding(identifier, format=table_format)
        return sink_table(table_store, PIPELINE, sink, binding, catalog, **kw)

    return make
