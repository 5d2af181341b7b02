"""RestorePlanner: sources, integrity checks, the quality-gate hook with fallback for
`latest`, rescaling, and savepoint import, on payments checkpoints whose tasks ack a small
file each (no Spark: what is restored is the protocol's view, not the state's content)."""

from __future__ import annotations

import hashlib
import json

import pytest

from batchpoint.errors import ConfigError, RestoreRefused
from batchpoint.ops.epoch import finalize
from batchpoint.ops.restore_history import latest_restore
from batchpoint.protocol.checkpoint import CheckpointType, FileHandle
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.restore_candidates import RestoreCandidates
from batchpoint.protocol.restores import RestoreRecord
from batchpoint.protocol.savepoints import SavepointLocation
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import (
    GateResult,
    RestorePlan,
    RestorePlanner,
    RestoreSource,
    SourceKind,
    parse_parallelism,
    restore_checkpoint,
)
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline


@pytest.fixture
def driver(tmp_path) -> PipelineDriver:
    return PipelineDriver(build_pipeline(), StoreRef.of((tmp_path / "store").as_uri()))


def epoch(driver: PipelineDriver, kind=CheckpointType.CHECKPOINT) -> int:
    pending = driver.trigger(kind)
    c = driver.coordinator
    for task in pending.expected_tasks:
        key = c.layout.task_data_prefix(pending.checkpoint_id, task, "a") + "f.parquet"
        data = str(task).encode()
        c.store.put(key, data)
        c.acknowledge(
            pending.checkpoint_id,
            task,
            "a",
            [FileHandle(key, len(data), hashlib.sha256(data).hexdigest())],
        )
    assert finalize(driver, pending.checkpoint_id).completed
    return pending.checkpoint_id


def test_sources_parse():
    assert RestoreSource.parse(None).kind == "latest"
    assert RestoreSource.parse(" Latest ").kind == "latest"
    assert RestoreSource.parse("12") == RestoreSource(SourceKind.CHECKPOINT, 12)
    assert RestoreSource.parse(3) == RestoreSource(SourceKind.CHECKPOINT, 3)
    assert RestoreSource.parse("s3://b/sp/x") == RestoreSource(
        SourceKind.SAVEPOINT, location="s3://b/sp/x"
    )
    for bad in ("0", "-1", " -12 "):  # a negative id was taken for a savepoint folder
        with pytest.raises(ConfigError, match="checkpoint ids start at 1"):
            RestoreSource.parse(bad)


def test_parallelism_forms():
    ops = ["dedup", "balances", "alerts"]
    assert parse_parallelism(None, ops) == {}
    assert parse_parallelism(3, ops) == {"dedup": 3, "balances": 3, "alerts": 3}
    assert parse_parallelism('{"balances": 4}', ops) == {"balances": 4}
    assert parse_parallelism("2", ops) == {"dedup": 2, "balances": 2, "alerts": 2}
    for bad, message in [
        ({"nope": 1}, "unknown operator"),
        ({"dedup": 0}, "positive"),
        ("x", "JSON"),
        (True, "integer"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_parallelism(bad, ops)


def test_latest_restores_the_newest_and_rescales(driver):
    epoch(driver)
    epoch(driver)
    planner = RestorePlanner(driver)
    plan = planner.plan("latest", {"balances": 3})
    assert plan.chosen.checkpoint_id == 2 and len(plan.checks) == 1
    result = planner.apply(plan)
    assert (result.checkpoint_id, result.restore_generation) == (2, 1)
    assert driver.current_spec().operator("balances").parallelism == 3
    assert driver.coordinator.head.get().checkpoint_id == 2


def test_parallelism_beyond_max_parallelism_is_refused_at_planning(driver):
    epoch(driver)
    with pytest.raises(ConfigError, match="max"):
        RestorePlanner(driver).plan("latest", {"balances": 1000})


def test_the_gate_falls_back_to_older_checkpoints_for_latest(driver):
    for _ in range(3):
        epoch(driver)
    seen = []

    def gate(candidate):
        seen.append(candidate.checkpoint_id)
        ok = candidate.checkpoint_id == 1
        return GateResult(ok, {"rows_ok": ok}, name="row counts")

    plan = RestorePlanner(driver, gate=gate).plan("latest")
    assert seen == [3, 2, 1]
    assert plan.chosen.checkpoint_id == 1
    assert [c.passed for c in plan.checks] == [False, False, True]
    assert plan.to_json()["checks"][0]["gate"] == {
        "name": "row counts",
        "passed": False,
        "report": {"rows_ok": False},
    }


def test_a_plan_read_back_from_json_is_applied_and_recorded_as_the_gate_chose(driver):
    """The restore DAG's two tasks: a planner with the gate (the check task) plans, the
    plan crosses as JSON, a planner without one (the restore task) applies it. The
    restore is recorded gated, with what the gate passed over and quarantined."""
    for _ in range(3):
        epoch(driver)

    def gate(candidate):
        # fails 3, fails and quarantines 2 (as batchpoint's gate does when recording)
        ok = candidate.checkpoint_id == 1
        return GateResult(ok, {"ok": ok}, "row counts", candidate.checkpoint_id == 2)

    plan = RestorePlanner(driver, gate=gate).plan("latest")
    crossed = RestorePlan.from_json(json.loads(json.dumps(plan.to_json())))
    assert crossed == plan
    run = RestorePlanner(driver).apply(crossed)  # no gate here: it is not asked again
    assert run.checkpoint_id == 1
    c = driver.coordinator
    restore = c.control.load().restore
    assert (restore.gate, restore.passed_over, restore.quarantined) == ("row counts", (3, 2), (2,))
    stored = c.reports.restore_record(1)
    record = RestoreRecord.decode(stored.key, stored.data)
    assert (record.gate, record.passed_over, record.quarantined) == ("row counts", (3, 2), (2,))
    assert latest_restore(c.control.load()).describe() == (
        "restore generation 1, to checkpoint 1 (head was 3), passed by the row counts; "
        "passed over checkpoints 3, 2 (quarantined 2)"
    )

    # A plan in an older XCom, whose verdicts say nothing of quarantine: as before, gated.
    older = plan.to_json()
    for check in older["checks"]:
        check["gate"].pop("quarantined", None)
    RestorePlanner(driver).apply(RestorePlan.from_json(older))
    restore = c.control.load().restore
    assert (restore.gate, restore.passed_over, restore.quarantined) == ("row counts", (3, 2), ())

    # Ungated (no gate judged the target): recorded as ungated.
    restore_checkpoint(driver, 2)
    restore = c.control.load().restore
    assert (restore.generation, restore.gate, restore.passed_over) == (3, None, ())
    assert latest_restore(c.control.load()).describe().endswith("(head was 1), ungated")


def test_an_explicit_checkpoint_that_fails_is_not_replaced_by_another(driver):
    epoch(driver)
    epoch(driver)
    completed = driver.coordinator.completed.get(1)
    driver.store.delete(completed.handles[0].path)
    plan = RestorePlanner(driver).plan("1")
    assert plan.chosen is None and "missing" in plan.checks[0].problems[0]
    with pytest.raises(RestoreRefused, match="no candidate"):
        RestorePlanner(driver).apply(plan)
    with pytest.raises(RestoreRefused, match="not retained"):
        RestorePlanner(driver).plan("9")


def test_a_savepoint_path_is_imported_then_restored(driver):
    epoch(driver)
    sp = epoch(driver, CheckpointType.SAVEPOINT)
    driver.coordinator.savepoints.export(sp, SavepointLocation(driver.store, "savepoints/x"))
    epoch(driver)
    planner = RestorePlanner(driver)
    plan = planner.plan("savepoints/x")  # a path under the root
    assert plan.chosen.kind == "savepoint" and plan.chosen.checkpoint_id == sp
    result = planner.apply(plan)
    assert result.checkpoint_id == 4 and result.imported_from.endswith("savepoints/x")
    assert driver.sinks.manifest("balances_table").current == 4  # published at once
    uri = driver.store.child("savepoints/x")
    assert RestorePlanner(driver).plan(uri).chosen.kind == "savepoint"  # or a URI


def test_a_restore_examines_its_target_once(driver, monkeypatch):
    epoch(driver)
    epoch(driver)
    looked = []
    real = RestoreCandidates.check_files

    def counted(self, examined, checksums, progress=None):
        looked.append((examined.checkpoint_id, checksums))
        return real(self, examined, checksums, progress)

    monkeypatch.setattr(RestoreCandidates, "check_files", counted)
    applied = restore_checkpoint(driver)
    assert (applied.checkpoint_id, applied.restore_generation) == (2, 1)
    assert looked == [(2, True)]  # the plan's look, sha256 included; the restore moves on it


def test_a_target_that_leaves_the_retained_set_after_its_plan_changes_nothing(tmp_path):
    config = CheckpointConfig(num_retained=1)
    driver = PipelineDriver(build_pipeline(), StoreRef.of((tmp_path / "s").as_uri()), config)
    epoch(driver)
    planner = RestorePlanner(driver)
    plan = planner.plan("1")
    assert plan.chosen.checkpoint_id == 1
    epoch(driver)  # one checkpoint retained: 1 is subsumed
    assert driver.coordinator.completed.retained_ids() == [2]
    with pytest.raises(RestoreRefused, match="left the retained set while restoring"):
        planner.apply(plan)
    head = driver.coordinator.head.get()
    assert (head.checkpoint_id, head.restore_generation) == (2, 0)
