from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.iceberg import IcebergSinkTable
from batchpoint.tables.service import sink_table
from tables.sinkfiles import PIPELINE, SINK


@pytest.fixture
def open_table(table_store: StoreRef, tmp_path: Path) -> Callable[..., IcebergSinkTable]:
    """``open_table(identifier="pay.balances", sink=SINK)``: the sink's table adapter on
    `table_store`, its SQL catalog a SQLite file of the test's (on S3 roots it must be
    named; file roots default to one under the root)."""
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"

    def make(identifier: str = "pay.balances", sink: str = SINK, **kw: Any) -> IcebergSinkTable:
        return sink_table(table_store, PIPELINE, sink, TableBinding(identifier), catalog, **kw)

    return make
