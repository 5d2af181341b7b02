"""A table belongs to its sink by uid (issue 36, invariant 17), on a real Iceberg catalog
and both stores: a table a release before issue 36 made names the sink by its name; the
sink (declared with another uid, or renamed since) still owns it, its next sync writes
the uid there, and from then on the table is refused to any other sink, whatever it is
called."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sinks import SinkPins, SinkPublisher, SinkRef
from batchpoint.storage import StoreRef
from batchpoint.tables.iceberg import SINK, IcebergSinkTable, TableError, TableSync
from tables.sinkfiles import PIPELINE, manifest, save, staged_file

NAME = "balances_table"  # what the older release called the sink, and keyed it by
UID = "balances"


def _sync(table: IcebergSinkTable, ref: SinkRef) -> list[int | None]:
    publisher = SinkPublisher(table.store, PipelineLayout(PIPELINE))
    read = lambda: publisher.manifest(ref)  # noqa: E731
    return TableSync(table, read, SinkPins(publisher, ref)).run().committed


def test_a_table_an_older_release_named_by_the_sink_stays_the_sinks(
    table_store: StoreRef, open_table: Callable[..., IcebergSinkTable]
) -> None:
    store = table_store.open()
    one, two = staged_file(store, 1, {"a": 1}), staged_file(store, 2, {"b": 2})
    save(store, manifest([(1, None, [one])], 1, mode="append"))  # at the name's key
    # the older release: the sink known by its name, the table made under it
    assert _sync(open_table(sink=NAME), SinkRef(NAME)) == [1]
    assert open_table(sink=NAME).require().properties[SINK] == NAME

    renamed = SinkRef(UID, "balances_v2", (NAME,))  # its uid declared, renamed too
    save(store, manifest([(1, None, [one]), (2, 1, [two])], 2, mode="append"))
    table = open_table(sink=renamed)
    assert table.read().num_rows == 1  # a reader: its own, nothing written
    assert table.require().properties[SINK] == NAME
    assert _sync(table, renamed) == [2]  # the manifest adopted at the uid, the table kept
    assert table.require().properties[SINK] == UID
    assert sorted(table.read().column("account_id").to_pylist()) == ["a", "b"]
    assert [c.checkpoint_id for c in table.history()] == [1, 2]

    # now the table is the uid's: a sink under the old name, with another uid, is refused
    with pytest.raises(TableError, match=rf"belongs to sink {PIPELINE}\.{UID} on"):
        open_table(sink=SinkRef("other", NAME, (NAME,))).require()
