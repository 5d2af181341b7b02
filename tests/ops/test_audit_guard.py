"""An audited checkpoint is completed by its audit and nothing else: when the audit dies
after every ack is in, `settle` (at the next trigger), `try_finalize` and the driver's
`finalize` leave it pending, and it expires at its deadline. No Spark: integrity is the
whole gate here, on stand-in state files."""

from __future__ import annotations

import json

import pytest

from batchpoint.errors import TriggerRefused
from batchpoint.ops.audit import audit_then_finalize, trigger_audited
from batchpoint.ops.epoch import finalize
from batchpoint.protocol.checkpoint import (
    AUDIT_PROPERTY,
    CHANGELOG_CHAIN_PROPERTY,
    CheckpointFailureReason,
    CheckpointStatus,
    PendingCheckpoint,
)
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.protocol.savepoints import SavepointLocation
from batchpoint.quality.gate import QualityGate
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import RestorePlanner
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from support import fake_epochs
from support.clock import FakeClock
from support.payments import INTEGRITY_ONLY, LAYOUT

TIMEOUT = 60.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def driver(tmp_path, clock) -> PipelineDriver:
    driver = PipelineDriver(
        build_pipeline(), StoreRef.of((tmp_path / "store").as_uri()), clock=clock
    )
    fake_epochs.epoch(driver)  # checkpoint 1, unaudited: the head the audits build on
    return driver


@pytest.fixture
def gate(driver, clock) -> QualityGate:
    return QualityGate(driver.pipeline, driver.store_ref, quality=INTEGRITY_ONLY, clock=clock)


def _manifests(driver: PipelineDriver) -> dict:
    return {s: driver.sinks.manifest(s) for s in driver.pipeline.sinks}


def test_settle_does_not_complete_an_audited_checkpoint_whose_audit_never_ran(driver, clock):
    c = driver.coordinator
    published = _manifests(driver)
    pending = trigger_audited(driver, timeout=TIMEOUT)
    fake_epochs.ack_all(driver, pending)  # every ack is in; then the audit task dies
    cid = pending.checkpoint_id
    assert c.progress(cid).all_acknowledged

    assert c.settle() == []
    assert c.try_finalize(cid) is None
    assert finalize(driver, cid).outcome is None
    # the next trigger settles first, and finds it still pending (max_concurrent is 1)
    clock.advance(1)
    with pytest.raises(TriggerRefused) as refused:
        driver.trigger()
    assert refused.value.reason is CheckpointFailureReason.TOO_MANY_CONCURRENT
    assert c.status(cid) is CheckpointStatus.PENDING
    assert c.head.get().checkpoint_id == 1 and _manifests(driver) == published

    # past its deadline it expires (a failure), and is never completed
    clock.advance(TIMEOUT)
    (expired,) = c.settle()
    assert expired.checkpoint_id == cid and expired.status is CheckpointStatus.ABORTED
    assert expired.reason is CheckpointFailureReason.EXPIRED
    assert "its audit gave no verdict within 60s" in expired.message
    assert c.head.get().checkpoint_id == 1 and _manifests(driver) == published
    assert c.failures.state().consecutive_failures == 1


def test_the_audit_completes_a_passing_checkpoint_and_aborts_a_failing_one(driver, gate):
    c = driver.coordinator
    pending = trigger_audited(driver)
    fake_epochs.ack_all(driver, pending)
    c.settle()  # a concurrent settle in between changes nothing
    passed = audit_then_finalize(driver, pending.checkpoint_id, gate)
    assert passed.report is not None and passed.report.passed
    assert passed.outcome is not None and passed.outcome.status is CheckpointStatus.COMPLETED
    assert passed.published == [f"{s}@{pending.checkpoint_id}" for s in driver.pipeline.sinks]
    assert c.head.get().checkpoint_id == pending.checkpoint_id
    published = _manifests(driver)

    bad = trigger_audited(driver)
    fake_epochs.ack_all(driver, bad)
    path = c.acks(bad.checkpoint_id)[TaskId("balances", 0)].handles[0].path
    driver.store.put(path, b"X" + driver.store.get(path).data[1:])  # same size, other bytes
    failed = audit_then_finalize(driver, bad.checkpoint_id, gate)
    assert failed.rejected and failed.outcome is not None
    assert failed.outcome.reason is CheckpointFailureReason.QUALITY_GATE
    assert failed.outcome.reason.code == "quality gate"
    assert path in failed.outcome.message
    assert c.head.get().checkpoint_id == pending.checkpoint_id
    assert _manifests(driver) == published and failed.published == []
    assert driver.store.exists(LAYOUT.quality_report(bad.checkpoint_id))


def test_the_audit_mark_keeps_the_record_format(driver, gate, tmp_path):
    pending = trigger_audited(driver, properties=CheckpointProperties.of({"why": "nightly"}))
    stored = json.loads(driver.store.get(LAYOUT.active(pending.checkpoint_id)).data)
    assert stored["version"] == 2  # version 2 (issue 26: the topology), the mark unchanged
    assert stored["properties"] == {
        "why": "nightly",
        AUDIT_PROPERTY: True,
        CHANGELOG_CHAIN_PROPERTY: driver.coordinator.config.changelog_chain,
    }
    assert pending.requires_audit
    # records written before the mark existed, or without it, need no audit
    del stored["properties"]
    old = PendingCheckpoint.decode("old", json.dumps(stored).encode())
    assert not old.requires_audit

    # a savepoint of an audited checkpoint is imported without a new audit
    fake_epochs.ack_all(driver, pending)
    assert audit_then_finalize(driver, pending.checkpoint_id, gate).report.passed
    folder = SavepointLocation(driver.store, "savepoints/audited")
    driver.coordinator.savepoints.export(pending.checkpoint_id, folder)
    planner = RestorePlanner(driver)
    result = planner.apply(planner.plan("savepoints/audited"))
    imported = driver.coordinator.get_outcome(result.checkpoint_id)
    assert imported is not None and imported.status is CheckpointStatus.COMPLETED
    assert imported.pending.properties[AUDIT_PROPERTY] is True
