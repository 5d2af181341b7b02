"""A table sink's table synced with its manifest, in each format (Iceberg on a real
SQLite catalog, Delta through delta-rs) on real storage (a folder, SeaweedFS): one
commit per checkpoint, idempotent repeats, rewinds after restores, time travel by
checkpoint id, and syncs racing each other."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from batchpoint.errors import CheckpointError
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sinks import SinkManifest, SinkPublisher
from batchpoint.storage import StoreRef
from batchpoint.tables.sync import SinkTableAdapter, TableError, TableSync
from tables.sinkfiles import PIPELINE, SINK, manifest, save, staged_file

pytestmark = pytest.mark.parametrize("table_format", ["iceberg", "delta"])


def _rows(table: SinkTableAdapter, checkpoint_id: int | None = None) -> dict[str, int]:
    data = table.read(checkpoint_id).to_pydict()
    return dict(zip(data["account_id"], data["balance"], strict=True))


def _sync(table: SinkTableAdapter) -> TableSync:
    publisher = SinkPublisher(table.store, PipelineLayout(PIPELINE))
    return TableSync(table, lambda: publisher.manifest(SINK))


def _three_epochs(store_ref: StoreRef, mode: str = "snapshot") -> SinkManifest:
    store = store_ref.open()
    one = staged_file(store, 1, {"a": 1, "b": 2})
    two = staged_file(store, 2, {"a": 5})
    three = staged_file(store, 3, {"c": 7})
    empty = staged_file(store, 3, {}, part=1)
    m = manifest([(1, None, [one]), (2, 1, [two]), (3, 2, [three, empty])], 3, mode=mode)
    save(store, m)
    return m


def test_one_commit_per_checkpoint_and_a_repeat_is_a_no_op(
    table_store: StoreRef, open_table: Callable[..., SinkTableAdapter]
) -> None:
    _three_epochs(table_store)
    table = open_table()
    report = _sync(table).run()
    assert report.committed == [1, 2, 3]
    again = _sync(table).run()  # a repeated notify, a retried finalize
    assert again.committed == []
    history = table.history()
    assert [(c.checkpoint_id, c.operation) for c in history] == [
        (1, "publish"),
        (2, "publish"),
        (3, "publish"),
    ]
    assert _rows(table) == {"c": 7}  # snapshot mode: the newest epoch only
    assert _rows(table, 1) == {"a": 1, "b": 2}
    assert _rows(table, 2) == {"a": 5}


def test_append_mode_accumulates_the_chain(
    table_store: StoreRef, open_table: Callable[..., SinkTableAdapter]
) -> None:
    _three_epochs(table_store, mode="append")
    table = open_table()
    _sync(table).run()
    assert sorted(table.read().to_pydict()["balance"]) == [1, 2, 5, 7]
    assert sorted(table.read(2).to_pydict()["balance"]) == [1, 2, 5]


def test_a_restore_rewinds_the_table_and_new_epochs_continue_from_there(
    table_store: StoreRef, open_table: Callable[..., SinkTableAdapter]
) -> None:
    _three_epochs(table_store, mode="append")
    table = open_table()
    _sync(table).run()
    store = table_store.open()
    publisher = SinkPublisher(store, PipelineLayout(PIPELINE))
    publisher.rewind(SINK, 1, generation=1)  # what a restore to checkpoint 1 does
    assert _sync(table).run().committed == [1]
    assert sorted(table.read().to_pydict()["balance"]) == [1, 2]
    m = publisher.manifest(SINK)
    assert m is not None
    four = staged_file(store, 4, {"d": 9})
    from dataclasses import replace

    from batchpoint.protocol.sinks import PublishedEpoch

    save(store, replace(m, current=4, epochs={**m.epochs, 4: PublishedEpoch(4, 1, (four,))}))
    assert _sync(table).run().committed == [4]
    assert sorted(table.read().to_pydict()["balance"]) == [1, 2, 9]
    assert sorted(table.read(3).to_pydict()["balance"]) == [1, 2, 5, 7]  # the old timeline
    ops = [(c.checkpoint_id, c.generation, c.operation) for c in table.history()]
    assert ops[-2:] == [(1, 1, "rewind"), (4, 1, "publish")]


def test_a_restore_to_the_checkpoint_the_table_is_at_keeps_its_files(
    table_store: StoreRef, open_table: Callable[..., SinkTableAdapter], table_format: str
) -> None:
    """A restore of the checkpoint the table is at (a new generation, the same content)
    stamps the table with one rewind commit of the files it holds. On Delta that commit
    adds none of them again and removes none: a version that adds and removes one path
    is not valid Delta (the protocol leaves a commit's actions unordered; Spark's and
    Delta Kernel's replays drop the file, delta-rs keeps it). Found by the concurrency
    model's Delta schedules (seed 13: a restore from latest)."""
    _three_epochs(table_store)
    table = open_table()
    _sync(table).run()
    store = table_store.open()
    SinkPublisher(store, PipelineLayout(PIPELINE)).rewind(SINK, 3, generation=1)
    assert _sync(table).run().committed == [3]
    assert _rows(table) == {"c": 7}
    ops = [(c.checkpoint_id, c.generation, c.operation) for c in table.history()]
    assert ops[-1] == (3, 1, "rewind")
    if table_format == "delta":
        from batchpoint.tables.delta_location import table_key

        log = table_key(table.binding) + "_delta_log/"
        last = max(i.key for i in store.list(log) if i.key.endswith(".json"))
        actions = [json.loads(line) for line in store.get(last).data.decode().splitlines()]
        added = {a["add"]["path"] for a in actions if "add" in a}
        removed = {a["remove"]["path"] for a in actions if "remove" in a}
        assert not added and not removed  # the files stay: only the transaction moves


def test_a_sync_that_read_the_manifest_before_a_restore_commits_nothing(
    table_store: StoreRef, open_table: Callable[..., SinkTableAdapter]
) -> None:
    """Interleaving: A reads the manifest (generation 0, at 3); a restore rewinds it to 1
    and its own sync rewinds the table; then A plans and commits."""
    store = table_store.open()
    m = _three_epochs(table_store)
    table = open_table()
    save(store, manifest([(1, None, m.epochs[1].files)], 1))  # only 1 published so far
    _sync(table).run()
    stale = _three_epochs(table_store)  # what A read: 3 published, generation 0
    publisher = SinkPublisher(store, PipelineLayout(PIPELINE))
    publisher.rewind(SINK, 1, generation=1)
    assert _sync(table).run().committed == [1]  # the restore's sync
    late = TableSync(open_table(), lambda: stale).run()
    assert late.committed == [] and "stale" in late.why
    assert _rows(table) == {"a": 1, "b": 2}


def test_a_commit_that_loses_the_race_plans_again(
    table_store: StoreRef, open_table: Callable[..., SinkTableAdapter]
) -> None:
    """Interleaving: A plans on the table at 1; B commits 2 and 3 before A's commit; A's
    commit fails its compare-and-set (no rebased retry) and A's next round finds the
    table done."""
    store = table_store.open()
    m = _three_epochs(table_store)
    save(store, manifest([(1, None, m.epochs[1].files)], 1))
    _sync(open_table()).run()
    save(store, m)
    racer = open_table()
    real_commit = racer.commit
    raced: list[int] = []

    def commit_after_b(table, step, generation) -> None:  # type: ignore[no-untyped-def]
        if not raced:
            raced.append(1)
            assert _sync(open_table()).run().committed == [2, 3]  # B, in between
        real_commit(table, step, generation)

    racer.commit = commit_after_b  # type: ignore[method-assign]
    report = TableSync(
        racer, lambda: SinkPublisher(store, PipelineLayout(PIPELINE)).manifest(SINK)
    ).run()
    assert report.rounds == 2 and report.committed == []
    assert [c.checkpoint_id for c in open_table().history()] == [1, 2, 3]


def test_a_commit_that_landed_before_a_crash_is_recognised(
    table_store: StoreRef, open_table: Callable[..., SinkTableAdapter]
) -> None:
    _three_epochs(table_store)
    table = open_table()
    real_commit = table.commit

    def crash_after_two(t, step, generation) -> None:  # type: ignore[no-untyped-def]
        real_commit(t, step, generation)
        if step.checkpoint_id == 2:
            raise KeyboardInterrupt("killed after the table commit of checkpoint 2")

    table.commit = crash_after_two  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        _sync(table).run()
    assert _sync(open_table()).run().committed == [3]
    assert [c.checkpoint_id for c in open_table().history()] == [1, 2, 3]


def test_snapshots_of_checkpoints_gc_dropped_are_expired(
    table_store: StoreRef, open_table: Callable[..., SinkTableAdapter]
) -> None:
    m = _three_epochs(table_store)
    table = open_table()
    _sync(table).run()
    from dataclasses import replace

    save(table_store.open(), replace(m, epochs={3: m.epochs[3], 2: m.epochs[2]}))
    report = _sync(table).run()
    assert report.expired == [1]
    # Iceberg expires checkpoint 1's snapshot; Delta keeps the log entry, its copies go
    with pytest.raises(CheckpointError, match=r"no commit of checkpoint 1|files that are gone"):
        table.read(1)
    assert _rows(table, 2) == {"a": 5}


def test_someone_elses_table_is_refused(
    table_store: StoreRef, open_table: Callable[..., SinkTableAdapter]
) -> None:
    _three_epochs(table_store)
    _sync(open_table()).run()
    other = open_table(sink="alerts")
    with pytest.raises(TableError, match=r"belongs to sink pay\.balances_table"):
        other.load()


def test_output_that_does_not_fit_the_schema_is_a_clear_error(
    table_store: StoreRef, open_table: Callable[..., SinkTableAdapter]
) -> None:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    m = _three_epochs(table_store)
    table = open_table()
    _sync(table).run()
    store = table_store.open()
    buffer = io.BytesIO()
    pq.write_table(pa.table({"account_id": ["x"], "limit": [3]}), buffer)
    key = PipelineLayout(PIPELINE).data_prefix(4) + "sink/x.parquet"
    store.put(key, buffer.getvalue())
    from dataclasses import replace

    from batchpoint.protocol.checkpoint import FileHandle
    from batchpoint.protocol.sinks import PublishedEpoch

    bad = PublishedEpoch(4, 3, (FileHandle(key, len(buffer.getvalue()), "0" * 64, 1),))
    save(store, replace(m, current=4, epochs={**m.epochs, 4: bad}))
    with pytest.raises(TableError, match="does not fit"):
        _sync(table).run()
    assert [c.checkpoint_id for c in table.history()] == [1, 2, 3]  # nothing half-done
