"""The copies a Delta table sink makes of the staged files (docs/design/tables.md, "The
copy into the table folder" and "Crash points"), on real storage (a folder, SeaweedFS):
why they exist (delta-rs reads every `add` path under the table's root), a sync killed
after its copies and before its commit (the next sync commits them without copying
again), and copies that no version reads once the plan changed (expire deletes them,
a rewind reuses the copies it needs)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sinks import SinkPublisher
from batchpoint.storage import ObjectStore, StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.delta import DeltaSinkTable, copy_key
from batchpoint.tables.delta_location import table_key
from batchpoint.tables.service import sink_table
from batchpoint.tables.sync import TableSync
from tables.sinkfiles import PIPELINE, SINK, manifest, save, staged_file

BINDING = TableBinding("pay.balances", format="delta")


class CountingStore:
    """The store, counting uploads (a copy the sync makes)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.uploaded: list[str] = []

    def upload_file(self, key: str, path: Path) -> Any:
        self.uploaded.append(key)
        return self.store.upload_file(key, path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def _table(table_store: StoreRef) -> tuple[DeltaSinkTable, CountingStore]:
    table = sink_table(table_store, PIPELINE, SINK, BINDING)
    assert isinstance(table, DeltaSinkTable)
    counting = CountingStore(table.store)
    table.store = counting  # type: ignore[assignment]
    return table, counting


def _sync(table: DeltaSinkTable, store: ObjectStore) -> Any:
    publisher = SinkPublisher(store, PipelineLayout(PIPELINE))
    return TableSync(table, lambda: publisher.manifest(SINK)).run()


def _copy(key: str) -> str:
    return table_key(BINDING) + copy_key(key)


def test_delta_rs_reads_every_add_path_under_the_table_root(tmp_path: Path) -> None:
    """Why the copies: an absolute or a ../ path commits, then no read finds the file.
    Should a delta-rs release read them where they are, the copy could go."""
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    schema = pa.schema([pa.field("a", pa.int64())])
    outside = tmp_path / "outside.parquet"
    pq.write_table(pa.table({"a": [1]}, schema=schema), outside)
    stats = json.dumps({"numRecords": 1})
    for n, path in enumerate([str(outside), outside.as_uri(), "../outside.parquet"]):
        uri = str(tmp_path / f"t{n}")
        DeltaTable.create(uri, schema=schema)
        table = DeltaTable(uri)
        now = int(time.time() * 1000)
        add = AddAction(path, outside.stat().st_size, {}, now, True, stats)
        table.create_write_transaction([add], mode="append", schema=table.schema())
        with pytest.raises(FileNotFoundError, match=f"{tmp_path.name}/t{n}/"):
            DeltaTable(uri).to_pyarrow_table()


def test_a_sync_killed_after_its_copies_commits_them_next_time_without_copying(
    table_store: StoreRef,
) -> None:
    store = table_store.open()
    one, two = staged_file(store, 1, {"a": 1}), staged_file(store, 2, {"a": 5})
    save(store, manifest([(1, None, [one]), (2, 1, [two])], 2))
    table, _ = _table(table_store)
    real_commit = table.commit

    def copy_then_die(delta: Any, step: Any, generation: int) -> None:
        if step.checkpoint_id == 1:
            return real_commit(delta, step, generation)
        wanted = pa.schema(delta.schema())
        for staged in step.files:
            table._add(staged, wanted, step)
        raise KeyboardInterrupt("killed after the copies of checkpoint 2, before its commit")

    table.commit = copy_then_die  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        _sync(table, store)
    assert store.head(_copy(two.path)) is not None  # the copy, read by no version
    assert [c.checkpoint_id for c in table.history()] == [1]

    again, counting = _table(table_store)
    assert _sync(again, store).committed == [2]
    assert counting.uploaded == []  # the copy was there, with the staged file's size
    assert again.read(2).to_pydict() == {"account_id": ["a"], "balance": [5]}


def test_copies_no_version_reads_go_and_a_rewind_reuses_its_copies(
    table_store: StoreRef,
) -> None:
    """A sync killed after copying checkpoint 3; then a restore to 2 (generation 1), GC
    having dropped 3. The rewind commits 2's copies again without copying, and expire
    deletes 3's copy, which no version reads."""
    store = table_store.open()
    files = {cid: staged_file(store, cid, {"a": cid}) for cid in (1, 2, 3)}
    save(store, manifest([(1, None, [files[1]]), (2, 1, [files[2]])], 2))
    table, _ = _table(table_store)
    assert _sync(table, store).committed == [1, 2]
    save(store, manifest([(c, c - 1 or None, [files[c]]) for c in (1, 2, 3)], 3))
    wanted = pa.schema(table.require().schema())
    step = type("Step", (), {"checkpoint_id": 3})()
    table._add(files[3], wanted, step)  # the killed sync's copy, never committed
    assert store.head(_copy(files[3].path)) is not None

    save(store, manifest([(1, None, [files[1]]), (2, 1, [files[2]])], 2, generation=1))
    rewinder, counting = _table(table_store)
    report = _sync(rewinder, store)
    assert report.committed == [2] and counting.uploaded == []
    assert [(c.checkpoint_id, c.operation, c.generation) for c in rewinder.history()][-1] == (
        2,
        "rewind",
        1,
    )
    assert store.head(_copy(files[3].path)) is None  # expired: no version read it
    assert store.head(_copy(files[1].path)) is not None  # checkpoint 1 is still kept
    assert rewinder.read().to_pydict() == {"account_id": ["a"], "balance": [2]}
