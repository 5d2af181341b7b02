"""A table sink whose table lags its manifest (the catalog was down while checkpoints
published; a Delta table's log commits failed after their copies) is a finding of
`batchpoint gc` and of `batchpoint verify`, as text and JSON, naming the table (a Delta
table by its path); once the table catches up, it is not. Real pyiceberg on a SQLite
catalog and real delta-rs, no Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchpoint.storage import StoreRef
from support.cli import Cli, fresh_root
from tables.table_epochs import PIPELINE, SINK, TableEpochs

LAGS = (
    "lags its manifest: the table is at checkpoint 1 (generation 0), the manifest at "
    "checkpoint 3 (generation 0)"
)

pytestmark = pytest.mark.parametrize("table_format", ["iceberg", "delta"])


@pytest.fixture
def epochs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table_format: str) -> TableEpochs:
    """Checkpoint 1 synced, 2 and 3 published while the table was down."""
    root = StoreRef.of(fresh_root(tmp_path, monkeypatch))
    epochs = TableEpochs(root, tmp_path, monkeypatch, table_format=table_format)
    epochs.epoch({"a": 1})
    with epochs.outage():
        epochs.epoch({"a": 2})
        epochs.epoch({"a": 3})
    return epochs


def _lag(epochs: TableEpochs) -> str:
    if epochs.delta:  # no catalog to find it by: its path
        where = f"delta table pay.balances at {epochs.table().uri}"  # type: ignore[attr-defined]
        assert where.endswith("/delta/pay/balances")
    else:
        where = "iceberg table pay.balances (catalog batchpoint)"
    return f"sink {SINK}: {where} {LAGS}"


def test_gc_says_which_table_lags(cli: Cli, epochs: TableEpochs) -> None:
    lag = _lag(epochs)
    run = cli("--pipeline", PIPELINE, "gc", "--dry-run")
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[0].startswith("would delete")
    assert [line for line in lines[1:] if line.startswith(f"  finding: {lag}")], lines
    body = cli("--pipeline", PIPELINE, "--json", "gc").json
    assert [f for f in body["findings"] if f.startswith(lag)], body

    epochs.epoch({"a": 4})  # the catalog is back: this publish syncs the table
    run = cli("--pipeline", PIPELINE, "gc")
    assert run.code == 0 and "finding" not in run.out, run.out


def test_verify_reports_the_lagging_table_beside_its_verdict(cli: Cli, epochs: TableEpochs) -> None:
    lag = _lag(epochs)
    run = cli("--pipeline", PIPELINE, "verify", "--integrity-only")
    assert run.code == 0, run.err  # the checkpoint's files are intact: it passes
    assert "checkpoint 3: 1 file(s), 0 problem(s)" in run.out
    assert "sink tables (the pipeline's, not this checkpoint's):" in run.out
    assert f"  {lag}" in run.out
    body = cli("--pipeline", PIPELINE, "--json", "verify", "--integrity-only").json
    assert body["problems"] == [] and [t for t in body["tables"] if t.startswith(lag)]

    epochs.epoch({"a": 4})
    body = cli("--pipeline", PIPELINE, "--json", "verify", "--integrity-only").json
    assert body["tables"] == []
