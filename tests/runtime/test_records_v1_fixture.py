"""Checkpoints written with version-1 records (the release before version-2 checkpoint
and ack records) still restore and continue exactly once: invariant 16, readers accept
every record version an earlier release wrote.

The fixture is a real store written by batchpoint 2d0c60a (tests/data/
make_records_v1_fixture.py): checkpoints 1-3 over input epochs 0-2 (an incremental
chain: 2 and 3 share their bases' files), savepoint 4 over epoch 3 exported to
savepoints/payments/sp-4, and the source files of epochs 0-3."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from batchpoint.runtime.restore import RestorePlanner, restore_checkpoint
from support.payments import PaymentsRun

pytestmark = [pytest.mark.spark, pytest.mark.slow]

FIXTURE = Path(__file__).parent.parent / "data" / "payments-records-v1.tar.gz"


@pytest.fixture
def v1_store(tmp_path: Path) -> Path:
    root = tmp_path / "records-v1"
    with tarfile.open(FIXTURE) as archive:
        archive.extractall(root, filter="data")
    outcome = root / "pipelines/payments/checkpoints/chk-0000000003/outcome.json"
    assert json.loads(outcome.read_text())["version"] == 1  # what the fixture is for
    return root


def test_epochs_continue_from_version_1_checkpoints(
    make_run: Callable[..., PaymentsRun], v1_store: Path
) -> None:
    run = make_run(copy_from=v1_store)
    assert run.runner.driver.coordinator.head.get().checkpoint_id == 4
    run.assert_matches_reference()  # the savepoint, read as the head
    for epoch in (4, 5):
        result = run.epoch(epoch)
        assert result.outcome is not None and result.outcome.completed is not None
        run.assert_matches_reference()


def test_a_version_1_chain_and_its_exported_savepoint_restore(
    make_run: Callable[..., PaymentsRun], v1_store: Path
) -> None:
    run = make_run(copy_from=v1_store)
    driver = run.runner.driver
    restore_checkpoint(driver, 3)  # through the chain of shared files of 2 and 1
    run.assert_matches_reference()
    run.epoch(4)
    run.assert_matches_reference()

    planner = RestorePlanner(driver)
    plan = planner.plan("savepoints/payments/sp-4")  # imported under a new id
    assert plan.chosen is not None and plan.chosen.kind == "savepoint"
    result = planner.apply(plan)
    assert result.checkpoint_id is not None and result.checkpoint_id > 5
    run.assert_matches_reference()
    run.epoch(5)
    run.assert_matches_reference()
