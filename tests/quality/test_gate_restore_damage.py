"""Issue 24, reproduction 5 on the quality gate's own restore (`gated_restore`): a
garbled outcome record of the head is a metadata finding, the gate quarantines it with
its report and restores the previous good checkpoint, and the restore is recorded gated.
Integrity only: no Spark."""

from __future__ import annotations

from batchpoint.ops.maintenance import quarantine_reason
from batchpoint.quality.gate import QualityGate
from batchpoint.quality.gated_restore import gated_restore
from batchpoint.quality.quarantine import QuarantineCause
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from support import fake_epochs
from support.payments import INTEGRITY_ONLY, LAYOUT
from support.tampering import rewrite_outcome


def test_the_gate_falls_back_over_a_garbled_head_and_quarantines_it(table_store: StoreRef):
    driver = PipelineDriver(build_pipeline(), table_store)
    for _ in range(3):
        fake_epochs.epoch(driver)
    key = LAYOUT.outcome(3)
    rewrite_outcome(driver.store, 3, lambda record: record.update(version=4))

    gate = QualityGate(driver.pipeline, table_store, quality=INTEGRITY_ONLY)
    restored = gated_restore(driver, gate)
    assert restored.plan.chosen_id == 2 and driver.coordinator.head.get().checkpoint_id == 2
    # recorded as what ran: gated, 3 passed over and quarantined by the gate
    restore = driver.coordinator.control.load().restore
    assert (restore.gate, restore.passed_over, restore.quarantined) == ("quality gate", (3,), (3,))

    held = gate.quarantine.get(3)
    assert held is not None and held.found_by is QuarantineCause.QUALITY_GATE
    report = gate.quarantine.report(held)
    assert report is not None and report.quarantined and not report.passed
    why = quarantine_reason(driver.coordinator, held)
    assert why.startswith(f"[metadata] {key}: unknown record version 4"), why
    assert held.reason == why  # the first finding is also the record's own reason
