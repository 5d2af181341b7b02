"""A savepoint's `_metadata` holds one ack per task its checkpoint expects. One that
does not (an ack missing, a task acked twice, an ack of a task it does not expect) is
damaged: the check that the import and the restore planner run before writing anything
says so, and neither admits an id, writes a pending record or copies a file (a
reviewer's: the import used to copy everything and only its finalize refused a missing
ack, while a second ack of a task was imported, one of the two dropped unseen)."""

from __future__ import annotations

import json
import re

import pytest

from batchpoint.errors import RestoreRefused
from batchpoint.ops.savepoints import export
from batchpoint.protocol.checkpoint import CheckpointType
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.savepoints import METADATA, SavepointLocation, check_savepoint
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import RestorePlanner
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from support import fake_epochs
from support.fake_epochs import listing

FOLDER = "savepoints/sp"


@pytest.fixture
def driver(tmp_path) -> PipelineDriver:
    """payments with a savepoint exported to FOLDER and a checkpoint after it."""
    root = StoreRef.of((tmp_path / "store").as_uri())
    driver = PipelineDriver(build_pipeline(), root, CheckpointConfig(num_retained=4))
    savepoint = fake_epochs.epoch(driver, CheckpointType.SAVEPOINT)
    fake_epochs.epoch(driver)
    export(driver.coordinator, savepoint, FOLDER)
    assert check_savepoint(SavepointLocation(driver.store, FOLDER), checksums=True) == []
    return driver


def damage(driver: PipelineDriver, variant: str) -> str:
    """Rewrite the folder's `_metadata` with its acks off in one way (the copied files
    as they are); the problem the check should report."""
    key = f"{FOLDER}/{METADATA}"
    body = json.loads(driver.store.get(key).data)
    last = body["acks"][-1]
    if variant == "missing":
        body["acks"] = body["acks"][:-1]
        problem = f"has no ack for task {last['task']}"
    elif variant == "duplicate":
        body["acks"].append(last)
        problem = f"has 2 acks for task {last['task']}"
    else:  # an operator's subtask the savepoint's checkpoint never had
        ghost = last["task"].rpartition("#")[0] + "#9"
        body["acks"].append({**last, "task": ghost})
        problem = f"has an ack for task {ghost} it does not expect"
    driver.store.put(key, json.dumps(body).encode())
    return problem


def state(driver: PipelineDriver) -> dict[str, object]:
    """What an import or a restore would change: ids, pending, retained, the counter,
    the head, and every object of the store (with its etag)."""
    c = driver.coordinator
    control = c.control.load()
    return {
        "ids": c.checkpoint_ids(),
        "pending": [p.checkpoint_id for p in control.pending],
        "retained": control.retained_ids(),
        "counter": c.ids.peek(),
        "head": c.head.get().checkpoint_id,
        "objects": listing(driver.store),
    }


VARIANTS = ["missing", "duplicate", "unknown"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_check_reports_acks_that_are_not_one_per_expected_task(driver, variant):
    problem = damage(driver, variant)
    problems = check_savepoint(SavepointLocation(driver.store, FOLDER))
    assert [(p.path, p.problem) for p in problems] == [(METADATA, problem)]


@pytest.mark.parametrize("variant", VARIANTS)
def test_importing_such_a_folder_is_refused_and_changes_nothing(driver, variant):
    problem = damage(driver, variant)
    before = state(driver)
    location = SavepointLocation(driver.store, FOLDER)
    with pytest.raises(RestoreRefused) as refused:
        driver.coordinator.savepoints.import_folder(location, checksums=True)
    message = f"savepoint {location.uri} is damaged: {METADATA}: {problem}"
    assert str(refused.value) == message
    assert state(driver) == before


@pytest.mark.parametrize("variant", VARIANTS)
def test_restoring_such_a_folder_is_refused_and_changes_nothing(driver, variant):
    problem = damage(driver, variant)
    before = state(driver)
    planner = RestorePlanner(driver)
    plan = planner.plan(FOLDER)
    assert plan.chosen is None
    with pytest.raises(RestoreRefused, match=re.escape(f"{METADATA}: {problem}")):
        planner.apply(plan)
    assert state(driver) == before
