"""A savepoint's target is checked before its epoch runs (`check_target`, by `batchpoint
savepoint` and the savepoint DAG's trigger): a folder that already holds a savepoint is
refused there, with the export's own message, so `savepoint --stop --target X` neither
takes a savepoint nor stops the pipeline for nothing (a reviewer's). The export still
checks (another export may write the folder meanwhile); when it then fails, the error
names the completed savepoint, says the pipeline is stopped, and how to export it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from batchpoint.errors import BatchpointError, CheckpointError
from batchpoint.ops.local_epoch import LocalEpochRunner, take_savepoint
from batchpoint.ops.savepoints import check_target, export
from batchpoint.protocol.checkpoint import CheckpointType
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.savepoints import METADATA, SavepointLocation
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.settings import Settings
from batchpoint.storage import StoreRef
from demo.payments import SOURCE_ROOT, build_pipeline
from demo.payments_data import write_epoch_files
from support import fake_epochs

TAKEN = "savepoints/before-upgrade"


def occupied(driver: PipelineDriver) -> str:
    """TAKEN holding a savepoint; the message the export refuses it with."""
    export(driver.coordinator, fake_epochs.epoch(driver, CheckpointType.SAVEPOINT), TAKEN)
    with pytest.raises(CheckpointError) as refused:
        export(driver.coordinator, driver.coordinator.checkpoint_ids()[-1], TAKEN)
    return str(refused.value)


def test_check_target_refuses_a_folder_holding_a_savepoint_as_the_export_does(tmp_path):
    driver = PipelineDriver(build_pipeline(), StoreRef.of((tmp_path / "store").as_uri()))
    message = occupied(driver)
    uri = SavepointLocation(driver.store, TAKEN).uri
    assert message == f"{uri} already holds a savepoint ({METADATA} exists)"
    with pytest.raises(CheckpointError) as refused:
        check_target(driver.coordinator, TAKEN)
    assert str(refused.value) == message
    # a free folder, and one an unfinished export left files in (the export finishes it)
    check_target(driver.coordinator, "savepoints/fresh")
    driver.store.put("savepoints/unfinished/data/part-0", b"half")
    check_target(driver.coordinator, "savepoints/unfinished")


# -- `batchpoint savepoint` on local Spark -------------------------------------------------


def settings_of(ref: StoreRef) -> Settings:
    # the master of the tests' Spark session: take_savepoint joins it
    return Settings(root=ref.uri, store_options=dict(ref.options), spark_master="local[2,2]")


def with_input(tmp_path: Path, spark: Any) -> tuple[StoreRef, LocalEpochRunner]:
    """payments with one completed epoch, and input for the next."""
    ref = StoreRef.of((tmp_path / "store").as_uri())
    runner = LocalEpochRunner(build_pipeline(), ref, spark, CheckpointConfig())
    for number in (0, 1):
        write_epoch_files(ref.open(), SOURCE_ROOT, number, accounts=10, events_per_epoch=20)
        if number == 0:
            runner.run_epoch()
    return ref, runner


@pytest.mark.spark
def test_savepoint_stop_to_an_occupied_target_takes_nothing_and_stops_nothing(spark, tmp_path):
    ref, runner = with_input(tmp_path, spark)
    coordinator = runner.driver.coordinator
    export(coordinator, 1, TAKEN)
    ids = coordinator.checkpoint_ids()
    with pytest.raises(CheckpointError, match=re.escape("already holds a savepoint")):
        take_savepoint(runner.pipeline, settings_of(ref), target=TAKEN, stop=True)
    assert coordinator.checkpoint_ids() == ids
    assert coordinator.control.load().stopped is None


@pytest.mark.spark
def test_an_export_that_fails_after_the_savepoint_says_what_completed_and_how_to_export(
    spark, tmp_path
):
    ref, runner = with_input(tmp_path, spark)
    coordinator = runner.driver.coordinator
    folder = "savepoints/raced"

    def another_export_meanwhile(line: str) -> None:  # after check_target, before the export
        if re.search(r"savepoint \d+ triggered", line):
            export(coordinator, 1, folder)

    with pytest.raises(BatchpointError) as failed:
        take_savepoint(
            runner.pipeline,
            settings_of(ref),
            target=folder,
            stop=True,
            progress=another_export_meanwhile,
        )
    savepoint = coordinator.checkpoint_ids()[-1]
    uri = SavepointLocation(coordinator.store, folder).uri
    assert str(failed.value) == (
        f"savepoint {savepoint} completed but its export failed: {uri} already holds a "
        f"savepoint ({METADATA} exists); the pipeline is stopped (`batchpoint resume` "
        f"starts it); `batchpoint savepoint --checkpoint-id {savepoint} --target <folder>` "
        "exports it"
    )
    assert coordinator.control.load().stopped.savepoint == savepoint
    # the way out it names
    settings = settings_of(ref)
    done = take_savepoint(runner.pipeline, settings, checkpoint_id=savepoint, target="savepoints/x")
    assert (done.checkpoint_id, done.savepoint) == (savepoint, True)
