"""`batchpoint sink show` and `sink history`: a table sink read as of a checkpoint through
its Iceberg or Delta table, a plain sink through its manifest, and clear errors (no
Spark)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.runtime.api import Pipeline
from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.delta_location import table_key
from batchpoint.tables.service import sync_tables
from support.cli import Cli, fresh_root
from tables.sinkfiles import PIPELINE, SINK, manifest, save, staged_file


@pytest.fixture(params=["iceberg", "delta"])
def table_format(request: pytest.FixtureRequest) -> str:
    return request.param


#: What the table's format calls a commit (`sink history`'s first column)
NOUNS = {"iceberg": "snapshot", "delta": "version"}


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table_format: str) -> str:
    """Pipeline `pay` with the table sink `balances_table` (3 checkpoints published and
    synced; an Iceberg table's catalog the file root's default) and the plain sink
    `plain` (2)."""
    uri = fresh_root(tmp_path, monkeypatch)
    monkeypatch.delenv("BATCHPOINT_TABLE_CATALOG", raising=False)
    pipeline = Pipeline(PIPELINE)
    pipeline.source("events", root="src", schema=pa.schema([("account_id", pa.string())]))
    pipeline.sink(
        SINK, inputs=["events"], key=["account_id"], table="pay.balances", table_format=table_format
    )
    pipeline.sink("plain", inputs=["events"], key=["account_id"], mode="snapshot")
    ref = StoreRef.of(uri)
    store = ref.open()
    CheckpointCoordinator(store, PIPELINE).register(pipeline.spec())
    files = [
        staged_file(store, c, rows) for c, rows in ((1, {"a": 1}), (2, {"b": 2}), (3, {"c": 3}))
    ]
    save(
        store,
        manifest([(1, None, [files[0]]), (2, 1, [files[1]]), (3, 2, [files[2]])], 3, mode="append"),
    )
    save(store, replace(manifest([(1, None, [files[0]]), (2, 1, [files[1]])], 2), sink="plain"))
    sync_tables(ref, PIPELINE, {SINK: TableBinding("pay.balances", format=table_format)})
    return uri


def test_show_reads_the_table_as_of_a_checkpoint(cli: Cli, root: str, table_format: str) -> None:
    run = cli("sink", "show", PIPELINE, SINK, "--checkpoint", "2", "--json")
    assert run.code == 0, run.err
    assert run.json["rows"] == [
        {"account_id": "a", "balance": 1},
        {"account_id": "b", "balance": 2},
    ]
    history = cli("sink", "history", PIPELINE, SINK, "--json").json["commits"]
    (commit,) = [c["snapshot_id"] for c in history if c["checkpoint_id"] == 2]
    noun = NOUNS[table_format]
    assert run.json["source"].startswith(f"{table_format} table pay.balances")
    assert run.json["source"].endswith(f", {noun} {commit}")
    if table_format == "delta":
        assert commit == 2  # the log's version 0 created the table
    text = cli("sink", "show", PIPELINE, SINK, "--checkpoint", "2")
    assert text.out.splitlines()[0].startswith(
        f"{PIPELINE}.{SINK} as of checkpoint 2 ({run.json['source']}): 2 row(s)"
    )
    now = cli("sink", "show", PIPELINE, SINK)
    assert now.code == 0 and "3 row(s)" in now.out and "c" in now.out


def test_history_lists_one_commit_per_checkpoint(cli: Cli, root: str, table_format: str) -> None:
    run = cli("sink", "history", PIPELINE, SINK, "--json")
    assert run.code == 0, run.err
    assert [(c["checkpoint_id"], c["operation"], c["records"]) for c in run.json["commits"]] == [
        (1, "publish", 1),
        (2, "publish", 2),
        (3, "publish", 3),
    ]
    text = cli("sink", "history", PIPELINE, SINK)
    assert text.code == 0, text.err
    header, *rows = [line.split() for line in text.out.splitlines() if line.strip()]
    assert header[:2] == [NOUNS[table_format], "checkpoint"]
    ids = [str(c["snapshot_id"]) for c in run.json["commits"]]
    assert [row[0] for row in rows if row[0] in ids] == ids


def test_a_plain_sink_is_read_through_its_manifest(cli: Cli, root: str) -> None:
    run = cli("sink", "show", PIPELINE, "plain", "--checkpoint", "1", "--json")
    assert run.code == 0, run.err
    assert run.json["source"] == "sink manifest" and run.json["total_rows"] == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("sink", "show", PIPELINE, "nope"), "has no sink 'nope' (sinks: balances_table, plain)"),
        (("sink", "show", PIPELINE, SINK, "--checkpoint", "9"), "no commit of checkpoint 9"),
        (("sink", "history", PIPELINE, "plain"), "is not a table sink"),
        (("sink", "show", "other", SINK), "other"),
    ],
)
def test_mistakes_are_one_clear_line(
    cli: Cli, root: str, argv: tuple[str, ...], message: str
) -> None:
    run = cli(*argv)
    assert run.code == 2
    assert message in run.err and "Traceback" not in run.err


def test_a_damaged_published_file_is_one_clear_line(cli: Cli, root: str) -> None:
    """Damage is a finding, not a traceback (invariant 11; a reviewer's finding): the
    plain sink's published file overwritten with bytes that are not Parquet."""
    store = StoreRef.of(root).open()
    found = CheckpointCoordinator(store, PIPELINE).sinks.manifest("plain")
    assert found is not None and found.current is not None
    (damaged, *_) = found.epochs[found.current].files
    store.put(damaged.path, b"not parquet")
    run = cli("sink", "show", PIPELINE, "plain")
    assert run.code == 2 and "Traceback" not in run.err
    assert "sink 'plain' of 'pay': a published file cannot be read" in run.err, run.err
    assert "batchpoint verify" in run.err


@pytest.mark.parametrize("damage", ["garbage", "gone"])
def test_a_damaged_table_file_is_one_clear_line(
    cli: Cli, root: str, table_format: str, damage: str
) -> None:
    """The table's own reader (pyiceberg, delta-rs) over a data file that is not Parquet
    or is gone: one line naming the sink, never a traceback (invariant 11)."""
    store = StoreRef.of(root).open()
    if table_format == "iceberg":  # its data files are the published ones
        found = CheckpointCoordinator(store, PIPELINE).sinks.manifest(SINK)
        assert found is not None and found.current is not None
        damaged = found.epochs[found.current].files[0].path
    else:  # delta's are copies of its own, beside its log
        listed = store.list(table_key(TableBinding("pay.balances", format="delta")))
        damaged = next(o.key for o in listed if o.key.endswith(".parquet"))
    if damage == "garbage":
        store.put(damaged, b"not parquet")
    else:
        store.delete(damaged)
    run = cli("sink", "show", PIPELINE, SINK)
    assert run.code != 0 and "Traceback" not in run.err, run.err
    assert f"sink '{SINK}'" in run.err, run.err
    assert ("gone" if damage == "gone" else "cannot be read") in run.err, run.err
