"""A restore syncs each table sink once: whichever front end restores (the plain restore,
`batchpoint restore`'s and the restore DAG's check-and-restore through ops.restore, the
DAG's restore task alone), the RestorePlan moves the head and rewinds the manifests, then
publishes and brings the table to its manifest in one sync: one rewind commit, the
table equal to the restored checkpoint. Counted by a wrapper around the real TableSync;
real pyiceberg on a SQLite catalog, a folder and SeaweedFS in turn, no Spark."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from batchpoint.ops.gates import GateChoice
from batchpoint.ops.restore import apply_restore, restore
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import AppliedRestore, GateOptions, restore_checkpoint
from batchpoint.storage import StoreRef
from batchpoint.tables.iceberg import SyncReport, TableSync
from tables.table_epochs import TABLE, TableEpochs

NO_GATE = GateChoice(None, "no quality gate: only the candidates' records and files")

FRONTS: dict[str, Callable[[PipelineDriver], AppliedRestore | None]] = {
    "restore_checkpoint": lambda driver: restore_checkpoint(driver, 2),
    "ops.restore (the CLI)": lambda driver: restore(driver, "2", NO_GATE, GateOptions()).result,
    "apply_restore (the DAG's restore task)": lambda driver: apply_restore(
        driver, {"kind": "checkpoint", "checkpoint_id": 2, "location": None}
    ),
}


@pytest.fixture
def epochs(table_store: StoreRef, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TableEpochs:
    epochs = TableEpochs(table_store, tmp_path, monkeypatch, CheckpointConfig(num_retained=3))
    for rows in ({"a": 1}, {"a": 2, "b": 1}, {"a": 3, "b": 2, "c": 1}):
        epochs.epoch(rows)
    return epochs


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[SyncReport]:
    """Every table sync from now on, as the real one reported it."""
    reports: list[SyncReport] = []
    real = TableSync.run

    def counted(self: TableSync) -> SyncReport:
        reports.append(real(self))
        return reports[-1]

    monkeypatch.setattr(TableSync, "run", counted)
    return reports


@pytest.mark.parametrize("front", sorted(FRONTS))
def test_a_restore_syncs_each_table_sink_once(
    epochs: TableEpochs, syncs: list[SyncReport], front: str
) -> None:
    driver = PipelineDriver(epochs.pipeline, epochs.store_ref, epochs.config)
    applied: Any = FRONTS[front](driver)
    assert applied is not None and applied.checkpoint_id == 2
    assert driver.coordinator.head.get().checkpoint_id == 2

    assert [s.table for s in syncs] == [TABLE]  # one sync, of the one table sink
    assert syncs[0].committed == [2]  # and it did the rewind
    history = [(c.checkpoint_id, c.operation) for c in epochs.table().history()]
    assert history == [(1, "publish"), (2, "publish"), (3, "publish"), (2, "rewind")]
    assert epochs.read() == epochs.rows[2]
