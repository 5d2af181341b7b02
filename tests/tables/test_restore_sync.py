"""One restore path: whichever front end restores (the plain restore, `batchpoint
restore`'s and the restore DAG's check-and-restore through ops.restore, the DAG's
restore task alone), the RestorePlan examines each candidate once and moves the head on
that verdict, rewinds the manifests, then publishes and brings the table to its manifest
in one sync: one rewind commit, the table equal to the restored checkpoint. Counted by
wrappers around the real TableSync and the real store; real pyiceberg on a SQLite
catalog and real delta-rs, on a folder and SeaweedFS in turn, no Spark."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from batchpoint.ops.gates import GateChoice
from batchpoint.ops.restore import apply_restore, restore
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.quarantine import QuarantineStore
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import (
    CandidateCheck,
    GateOptions,
    RestorePlan,
    RestoreRun,
    RestoreSource,
    SourceKind,
    restore_checkpoint,
)
from batchpoint.storage import StoreRef
from batchpoint.tables.iceberg import SyncReport, TableSync
from support.counting_store import CountingStore
from tables.table_epochs import PIPELINE, TABLE, TableEpochs

NO_GATE = GateChoice(None, "no quality gate: only the candidates' records and files")

#: What the restore DAG's check task hands its restore task: checkpoint 2, chosen.
CHECKED = RestorePlan(
    PIPELINE,
    RestoreSource.parse(2),
    checks=(CandidateCheck("checkpoint 2", 2, SourceKind.CHECKPOINT, files=1),),
)

FRONTS: dict[str, Callable[[PipelineDriver], RestoreRun]] = {
    "restore_checkpoint": lambda driver: restore_checkpoint(driver, 2),
    "ops.restore (the CLI)": lambda driver: restore(driver, "2", NO_GATE, GateOptions()),
    "apply_restore (the DAG's restore task)": lambda driver: apply_restore(driver, CHECKED),
}


pytestmark = pytest.mark.parametrize("table_format", ["iceberg", "delta"])


@pytest.fixture
def epochs(
    table_store: StoreRef, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table_format: str
) -> TableEpochs:
    config = CheckpointConfig(num_retained=3)
    epochs = TableEpochs(table_store, tmp_path, monkeypatch, config, table_format)
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
    assert applied.restored and applied.checkpoint_id == 2
    assert driver.coordinator.head.get().checkpoint_id == 2

    assert [s.table for s in syncs] == [TABLE]  # one sync, of the one table sink
    assert syncs[0].committed == [2]  # and it did the rewind
    history = [(c.checkpoint_id, c.operation) for c in epochs.table().history()]
    assert history == [(1, "publish"), (2, "publish"), (3, "publish"), (2, "rewind")]
    assert epochs.read() == epochs.rows[2]


#: Front ends whose restore walks candidates, and the ones each examines: `latest` from
#: the newest; the DAG's restore task only what its check task chose.
WALKS: dict[str, tuple[Callable[[PipelineDriver], RestoreRun], list[int]]] = {
    "restore_checkpoint (latest)": (lambda driver: restore_checkpoint(driver), [3, 2]),
    "ops.restore (the CLI, latest)": (
        lambda driver: restore(driver, "latest", NO_GATE, GateOptions()),
        [3, 2],
    ),
    "apply_restore (the DAG's restore task)": (
        FRONTS["apply_restore (the DAG's restore task)"],
        [2],
    ),
}


@pytest.fixture
def counting(epochs: TableEpochs, monkeypatch: pytest.MonkeyPatch) -> CountingStore:
    """The real store under every StoreRef opened from now on, counting each call."""
    counting = CountingStore(epochs.store)
    monkeypatch.setattr(StoreRef, "open", lambda _ref: counting)
    return counting


@pytest.mark.parametrize("front", sorted(WALKS))
def test_a_restore_examines_each_candidate_once(
    epochs: TableEpochs, counting: CountingStore, syncs: list[SyncReport], front: str
) -> None:
    files = {
        cid: [h.path for h in epochs.coordinator.completed.get(cid).durable_handles]
        for cid in (1, 2, 3)
    }
    assert all(len(keys) == 1 for keys in files.values())  # the sink's one staged file
    newest = files[3][0]
    epochs.store.put(newest, b"not the parquet file it recorded")  # proven damage
    counting.by_key.clear()

    walk, examined = WALKS[front]
    driver = PipelineDriver(epochs.pipeline, epochs.store_ref, epochs.config)
    applied: Any = walk(driver)
    assert applied.restored and applied.checkpoint_id == 2

    # each candidate's file looked at once (its size; then its sha256 unless the size
    # already failed), the older one not at all: the head moved on the plan's verdict
    looks = {cid: [counting.by_key["head", key] for key in keys] for cid, keys in files.items()}
    assert looks == {cid: [1 if cid in examined else 0] for cid in files}
    # Delta's rewind copies the restored checkpoint's file into the table: one more read
    assert counting.by_key["download_file", files[2][0]] == (2 if epochs.delta else 1)
    assert counting.by_key["download_file", newest] == 0
    # what the look at the newest proved is its finding, once
    held = QuarantineStore(epochs.store, PipelineLayout(PIPELINE)).held(3)
    assert (held is not None) is (3 in examined)
    assert [s.table for s in syncs] == [TABLE]
