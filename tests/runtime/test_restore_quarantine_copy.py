"""A restore never takes a quarantined checkpoint, whatever door it comes through
(invariant 11): not by its id, not by the folder a savepoint of it was exported to, not
by an import of that folder; and a quality gate that does not read the sha256s itself
leaves them to the restore, which falls back past a flipped byte. On a local store with
the demo's pipeline and fake epochs (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchpoint.errors import RestoreRefused
from batchpoint.ops.gates import GateChoice
from batchpoint.ops.restore import restore
from batchpoint.ops.savepoints import export
from batchpoint.protocol.checkpoint import CheckpointType
from batchpoint.protocol.quarantine import QuarantineStore
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import GateOptions, GateResult, RestorePlanner
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from support import fake_epochs
from support.payments import LAYOUT

NO_GATE = GateChoice(None, "no quality gate")


def driver_after(tmp_path: Path, epochs: int) -> PipelineDriver:
    driver = PipelineDriver(build_pipeline(), StoreRef.of((tmp_path / "store").as_uri()))
    for _ in range(epochs):
        fake_epochs.epoch(driver)
    return driver


def quarantined_savepoint(tmp_path: Path) -> tuple[PipelineDriver, int, str]:
    """A savepoint exported to its folder, then quarantined, then a checkpoint after it."""
    driver = driver_after(tmp_path, 2)
    savepoint = fake_epochs.epoch(driver, CheckpointType.SAVEPOINT)
    folder = export(driver.coordinator, savepoint).location
    fake_epochs.epoch(driver)
    QuarantineStore(driver.store, LAYOUT).mark_damaged(savepoint, "balances negative", 0.0)
    return driver, savepoint, folder


def test_the_folder_of_a_quarantined_savepoint_is_not_restored(tmp_path: Path) -> None:
    driver, savepoint, folder = quarantined_savepoint(tmp_path)
    head = driver.coordinator.head.get().checkpoint_id

    run = restore(driver, folder, NO_GATE, GateOptions())

    assert run.refused
    (check,) = run.plan.checks
    assert f"its checkpoint {savepoint}" in check.description
    assert check.quarantine is not None and "balances negative" in check.quarantine
    assert driver.coordinator.head.get().checkpoint_id == head


def test_importing_the_folder_of_a_quarantined_savepoint_is_refused(tmp_path: Path) -> None:
    driver, savepoint, folder = quarantined_savepoint(tmp_path)
    retained = driver.coordinator.completed.retained_ids()
    savepoints = driver.coordinator.savepoints

    with pytest.raises(RestoreRefused, match=rf"copy of checkpoint {savepoint}, quarantined"):
        savepoints.import_folder(savepoints.locate(folder))
    assert driver.coordinator.completed.retained_ids() == retained

    QuarantineStore(driver.store, LAYOUT).release(savepoint)
    imported = savepoints.import_folder(savepoints.locate(folder))
    assert imported.checkpoint_id > max(retained)


def test_a_gate_that_reads_no_sha256_leaves_the_checksums_to_the_restore(
    tmp_path: Path,
) -> None:
    driver = driver_after(tmp_path, 3)
    fake_epochs.break_a_file(driver, 3)
    asked: list[int] = []

    def row_counts(candidate) -> GateResult:  # a user's gate: any callable
        asked.append(candidate.checkpoint_id)
        return GateResult(True, "row counts ok", name="row counts")

    run = restore(driver, "latest", GateChoice(row_counts, "row counts", "rc"), GateOptions())

    assert not run.refused
    assert driver.coordinator.head.get().checkpoint_id == 2
    assert asked == [2]  # the damaged one was skipped before the gate was asked
    assert any("sha256" in p for p in run.plan.checks[0].problems)


def test_only_a_gate_that_says_it_reads_the_sha256s_turns_the_planners_off(
    tmp_path: Path,
) -> None:
    driver = driver_after(tmp_path, 1)

    class ReadsEveryFile:
        verifies_checksums = True

        def __call__(self, candidate) -> GateResult:
            return GateResult(True, "ok")

    assert RestorePlanner(driver).checksums
    assert RestorePlanner(driver, gate=lambda c: GateResult(True, "ok")).checksums
    assert not RestorePlanner(driver, gate=ReadsEveryFile()).checksums
