"""A Delta table sink's table that another writer RESTOREd to an older version: Delta's
RESTORE brings the old files back but leaves the SetTransactions as they were, so the
table's transaction version alone would say it is still at the newest checkpoint. The
next sync sees the RESTORE to a batchpoint version after batchpoint's newest commit and
brings the table back to the manifest, without a row twice; a RESTORE by time, which
names no version, is refused as another writer's commit until undone."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sinks import SinkPublisher
from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.delta import DeltaSinkTable
from batchpoint.tables.service import sink_table
from batchpoint.tables.sync import TableError, TableSync
from tables.sinkfiles import PIPELINE, SINK, manifest, save, staged_file


@pytest.fixture
def table_format() -> str:
    return "delta"


def _sync(table: DeltaSinkTable) -> list[int | None]:
    publisher = SinkPublisher(table.store, PipelineLayout(PIPELINE))
    return TableSync(table, lambda: publisher.manifest(SINK)).run().committed


def _balances(table: DeltaSinkTable) -> list[int]:
    return sorted(table.read().to_pydict()["balance"])


def _three_epochs(table_store: StoreRef, mode: str) -> None:
    store = table_store.open()
    one = staged_file(store, 1, {"a": 1, "b": 2})
    two = staged_file(store, 2, {"a": 5})
    three = staged_file(store, 3, {"c": 7})
    save(store, manifest([(1, None, [one]), (2, 1, [two]), (3, 2, [three])], 3, mode=mode))


@pytest.mark.parametrize(("mode", "now"), [("snapshot", [7]), ("append", [1, 2, 5, 7])])
def test_a_restore_to_an_older_version_is_synced_forward_again(
    table_store: StoreRef, open_table: Callable[..., DeltaSinkTable], mode: str, now: list[int]
) -> None:
    _three_epochs(table_store, mode)
    table = open_table()
    assert _sync(table) == [1, 2, 3]
    version_of_one = table.snapshot_of(1)
    table.require().restore(version_of_one)  # another writer: RESTORE TABLE ... VERSION AS OF
    assert _balances(table) == [1, 2]
    position = table.position(table.require())
    assert position is not None and position.checkpoint_id == 1
    assert _sync(table) == [2, 3]  # the epochs after the restored one, once each
    assert _balances(table) == now
    assert _sync(table) == []


def test_a_restore_by_time_is_refused_until_undone(
    tmp_path: Path,
) -> None:
    """A RESTORE by time names no version: what it brought back may be another writer's,
    so the sync commits nothing over it and says how to undo it."""
    # On a folder: S3's modification times (what delta-rs travels by time with) are in
    # whole seconds, so the three commits of a fast test share one.
    store_ref = StoreRef.of((tmp_path / "store").as_uri())
    _three_epochs(store_ref, "append")
    table = sink_table(store_ref, PIPELINE, SINK, TableBinding("pay.balances", format="delta"))
    assert isinstance(table, DeltaSinkTable)
    _sync(table)
    ms = table.history()[0].committed_at_ms  # checkpoint 1's commit, to the millisecond
    # (a float of seconds can land a microsecond before it: the empty version 0)
    when = datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=ms % 1000 * 1000)
    table.require().restore(when)
    with pytest.raises(TableError, match=r"commits not made by batchpoint .*RESTORE"):
        _sync(table)
    table.require().restore(table.snapshot_of(3))  # the undo the refusal names
    assert _sync(table) == []  # at checkpoint 3 again, with its content
    assert _balances(table) == [1, 2, 5, 7]
