"""An Iceberg table's position is a snapshot in its history, so expiring history must
never hide where the table stands: batchpoint's expiry judges by the manifest as of
after the table read (not as its caller read it) and keeps batchpoint's newest commit
below the head; and where another engine expired that commit, the sync commits the
whole content once rather than append the chain over the rows the table holds. Found by
review and reproduced first (a real SQLite catalog, a folder and SeaweedFS)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sinks import SinkPublisher
from batchpoint.storage import StoreRef
from batchpoint.tables.plan import UNKNOWN_POSITION
from batchpoint.tables.sync import SinkTableAdapter, TableSync
from tables.sinkfiles import PIPELINE, SCHEMA, SINK, manifest, save, staged_file

Opener = Callable[..., SinkTableAdapter]
ACCOUNTS = {1: "a", 2: "b", 3: "c", 4: "d"}


def _sync(table: SinkTableAdapter) -> TableSync:
    publisher = SinkPublisher(table.store, PipelineLayout(PIPELINE))
    return TableSync(table, lambda: publisher.manifest(SINK))


def _accounts(table: SinkTableAdapter, checkpoint_id: int | None = None) -> Counter:
    return Counter(table.read(checkpoint_id).column("account_id").to_pylist())


def _append_chain(store_ref: StoreRef, upto: int) -> None:
    """Append-mode checkpoints 1..upto, each adding its one account."""
    store = store_ref.open()
    files = {i: staged_file(store, i, {ACCOUNTS[i]: i}) for i in range(1, upto + 1)}
    save(store, manifest([(i, i - 1 or None, [files[i]]) for i in files], upto, mode="append"))


def _foreign_commit(table: SinkTableAdapter) -> None:
    """Another engine's commit on top that keeps the content (an empty append)."""
    empty = pa.table({"account_id": pa.array([], pa.string()), "balance": pa.array([], pa.int64())})
    table.load().append(empty.cast(SCHEMA))  # type: ignore[attr-defined]


@pytest.mark.parametrize("foreign", [False, True])
def test_an_expiry_by_a_stale_manifest_keeps_what_was_published_since(
    table_store: StoreRef, open_table: Opener, foreign: bool
) -> None:
    """Sync A read the manifest at 2 and commits 2; before its expiry, 3 and 4 are
    published and sync B commits both (and, with `foreign`, another engine commits on
    top). A expired 3 (and 4) by its old manifest: time travel to 3 failed, and with
    the commit on top the position's snapshot went, so the next sync appended the
    whole chain again (every row twice)."""
    _append_chain(table_store, 1)
    _sync(open_table()).run()
    _append_chain(table_store, 2)
    a = open_table()
    refresh = a.refresh
    others: list[list[Any]] = []

    def others_first(table: Any) -> Any:
        if not others:
            _append_chain(table_store, 4)
            others.append(_sync(open_table()).run().committed)
            if foreign:
                _foreign_commit(open_table())
        return refresh(table)

    a.refresh = others_first  # type: ignore[method-assign]
    report = _sync(a).run()
    assert others == [[3, 4]] and report.committed == [2] and report.expired == []
    table = open_table()
    assert _accounts(table, 3) == Counter("abc")
    assert _sync(table).run().committed == []
    assert _accounts(open_table()) == Counter("abcd")


def test_gc_expiry_after_a_restore_keeps_the_position_below_a_foreign_commit(
    table_store: StoreRef, open_table: Opener, tmp_path: Any
) -> None:
    """The table at 2 with another engine's commit on top; a restore to 1 whose sync
    failed leaves it lagging; 3 is published on 1 and GC prunes 2's epoch. GC's expiry
    removed 2's snapshot (not the head), the position read as a new table, and the next
    sync appended 1 and 3 over rows that held 1 already."""
    from batchpoint.tables.binding import TableBinding
    from batchpoint.tables.references import PipelineTables

    store = table_store.open()
    _append_chain(table_store, 2)
    _sync(open_table()).run()
    _foreign_commit(open_table())
    publisher = SinkPublisher(store, PipelineLayout(PIPELINE))
    publisher.rewind(SINK, 1, generation=1)
    now = publisher.manifest(SINK)
    assert now is not None
    three = staged_file(store, 3, {"c": 3})
    epochs = [(1, None, now.epochs[1].files), (3, 1, (three,))]
    save(store, manifest(epochs, 3, mode="append", generation=1))
    binding = TableBinding("pay.balances", format="iceberg")
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    PipelineTables(store, PIPELINE, {SINK: binding}, catalog).expire()
    table = open_table()
    position = table.position(table.load())  # type: ignore[attr-defined]
    assert position is not None and (position.checkpoint_id, position.generation) == (2, 0)
    _sync(table).run()
    assert _accounts(open_table()) == Counter("ac")


def test_a_table_whose_batchpoint_history_another_engine_expired_is_rewritten_once(
    table_store: StoreRef, open_table: Opener
) -> None:
    """Another engine commits on top and expires every snapshot below its own (pyiceberg
    then drops the head's parent too): nothing says any more from which checkpoint the
    table's rows come. The sync commits the
    manifest's content once (appending the chain from its start doubled every row)."""
    _append_chain(table_store, 2)
    _sync(open_table()).run()
    _foreign_commit(open_table())
    iceberg = open_table().load()  # type: ignore[attr-defined]
    expire = iceberg.maintenance.expire_snapshots()
    head = iceberg.current_snapshot().snapshot_id
    for entry in iceberg.metadata.snapshot_log:
        if entry.snapshot_id != head:
            expire = expire.by_id(entry.snapshot_id)
    expire.commit()
    table = open_table()
    assert table.position(table.load()) == UNKNOWN_POSITION  # type: ignore[attr-defined]
    _append_chain(table_store, 3)
    report = _sync(table).run()
    assert report.committed == [3]
    assert _accounts(open_table()) == Counter("abc")
    assert _sync(open_table()).run().committed == []
