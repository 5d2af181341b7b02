"""Audited checkpoints: a corrupting epoch is aborted by the quality gate, publishes
nothing, counts as a failure, and the previous checkpoint stays the head."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from batchpoint.ops.audit import audit_then_finalize
from batchpoint.ops.local_epoch import run_audited_epoch
from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointStatus
from batchpoint.quality.findings import Check
from support.bad_deploys import buggy_balances, deploy, deploy_fixed, negative_counts
from support.payments import GOOD_EPOCHS, LAYOUT

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HEAD = GOOD_EPOCHS


def test_a_corrupting_epoch_is_aborted_and_nothing_is_published(
    good_run: Any, make_gate: Callable[..., Any]
) -> None:
    driver = good_run.runner.driver
    coordinator = driver.coordinator
    pipeline = good_run.runner.pipeline
    manifests_before = {s: driver.sinks.manifest(s) for s in pipeline.sinks}
    gate = make_gate(good_run)

    deploy(pipeline, buggy_balances(negative_counts))
    good_run.add_input(GOOD_EPOCHS)
    good_run.clock.advance(1)
    epoch, audit = run_audited_epoch(good_run.runner, gate)

    cid = epoch.checkpoint_id
    assert audit.rejected and audit.report is not None and not audit.report.passed
    outcome = coordinator.get_outcome(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is CheckpointFailureReason.QUALITY_GATE
    assert outcome.reason.code == "quality gate"
    assert LAYOUT.quality_report(cid) in outcome.message  # points at the stored report
    failing = [f for f in audit.report.findings if f.check == f"{Check.SUITE}:payments_balances"]
    assert failing and "event_count" in failing[0].problem
    assert gate.stored_report(cid) is not None

    assert coordinator.head.get().checkpoint_id == HEAD
    assert epoch.published == []
    assert {s: driver.sinks.manifest(s) for s in pipeline.sinks} == manifests_before
    failures = coordinator.failures.state()
    assert failures.consecutive_failures == 1
    assert not coordinator.completed.is_retained(cid)
    # idempotent: a retried audit task finds the outcome and changes nothing
    again = audit_then_finalize(driver, cid, gate)
    assert again.report is None and again.outcome == outcome
    assert gate.quarantine.ids() == []  # an aborted checkpoint is never a candidate anyway

    deploy_fixed(pipeline)
    good_run.add_input(GOOD_EPOCHS + 1)
    good_run.clock.advance(1)
    fixed, passed = run_audited_epoch(good_run.runner, gate)
    assert passed.report is not None and passed.report.passed, passed.render()
    assert fixed.outcome is not None and fixed.outcome.completed is not None
    assert fixed.pending.base_checkpoint_id == HEAD
    assert set(fixed.published) == {
        f"balances_table@{fixed.checkpoint_id}",
        f"alerts@{fixed.checkpoint_id}",
    }
    assert coordinator.failures.state().consecutive_failures == 0
    good_run.assert_matches_reference()
