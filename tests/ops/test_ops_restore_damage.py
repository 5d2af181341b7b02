"""Issue 24, reproductions 5 and 9 through the use-case layer the restore DAG runs: its
check task (`restore(..., check_only=True)`) falls back over a garbled head record and
quarantines it, a dry run writes nothing, and its restore task (`apply_restore`) refuses
and quarantines a choice that was damaged after the check. Stand-in state files, no
Spark; a folder and SeaweedFS in turn. The checkpoint's page in the UI says why it is
held."""

from __future__ import annotations

import pytest

from batchpoint.airflow.dag_names import dag_ids
from batchpoint.airflow.ui_pages import render_checkpoint
from batchpoint.errors import RestoreRefused
from batchpoint.ops.gates import GateChoice
from batchpoint.ops.overview import checkpoint_page
from batchpoint.ops.restore import apply_restore, restore
from batchpoint.ops.restore_history import recent_restores
from batchpoint.protocol.quarantine import QuarantineCause, QuarantineStore
from batchpoint.quality.findings import Finding
from batchpoint.quality.quarantine import QuarantineStore as GateQuarantine
from batchpoint.quality.report import CandidateReport, GateMode
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import GateOptions, RestorePlan
from batchpoint.runtime.restore_gate import GateResult, RestoreCandidate
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from support import fake_epochs
from support.payments import LAYOUT

NO_GATE = GateChoice(None, "no quality gate: only the candidates' records and files")


@pytest.fixture
def driver(table_store: StoreRef) -> PipelineDriver:
    driver = PipelineDriver(build_pipeline(), table_store)
    for _ in range(3):
        fake_epochs.epoch(driver)
    return driver


def truncate_outcome(driver: PipelineDriver, cid: int) -> None:
    key = LAYOUT.outcome(cid)
    data = driver.store.get(key).data
    driver.store.put(key, data[: len(data) // 2])


def quarantine(driver: PipelineDriver) -> QuarantineStore:
    return QuarantineStore(driver.store, LAYOUT)


def head(driver: PipelineDriver) -> int | None:
    return driver.coordinator.head.get().checkpoint_id


def test_the_check_task_falls_back_and_quarantines_the_garbled_head(driver):
    truncate_outcome(driver, 3)
    before = fake_epochs.listing(driver.store)
    dry = restore(driver, "latest", NO_GATE, GateOptions(), dry_run=True)
    assert dry.plan.chosen is not None and dry.plan.chosen.checkpoint_id == 2
    assert not dry.restored and not dry.plan.checks[0].quarantined
    assert fake_epochs.listing(driver.store) == before  # a dry run writes nothing

    checked = restore(driver, "latest", NO_GATE, GateOptions(), check_only=True)
    report = checked.to_json()
    assert report["checkpoint_id"] == 2 and report["chosen"] == "checkpoint 2"
    damaged = report["checks"][0]
    assert damaged["checkpoint_id"] == 3 and damaged["quarantined"] is True
    assert damaged["files"] is None and LAYOUT.outcome(3) in damaged["problems"][0]
    held = quarantine(driver).get(3)
    assert held is not None and held.found_by is QuarantineCause.RESTORE
    assert held.reason == damaged["problems"][0]
    assert head(driver) == 3  # the check task moves nothing

    result = apply_restore(driver, RestorePlan.from_json(report))
    assert result.checkpoint_id == 2 and head(driver) == 2

    # the next restore's check refuses 3 without reading it
    again = restore(driver, "3", NO_GATE, GateOptions(), check_only=True)
    assert again.refused and again.plan.checks[0].quarantine is not None
    assert again.plan.checks[0].quarantine.startswith("quarantined since ")


def test_the_restore_task_refuses_and_quarantines_a_choice_damaged_since_the_check(driver):
    checked = restore(driver, "latest", NO_GATE, GateOptions(), check_only=True)
    assert checked.to_json()["checkpoint_id"] == 3
    truncate_outcome(driver, 3)
    with pytest.raises(RestoreRefused, match="no candidate for a restore"):
        apply_restore(driver, RestorePlan.from_json(checked.to_json()))
    assert quarantine(driver).ids() == [3] and head(driver) == 3


def test_the_checkpoint_page_shows_what_a_restore_found(driver):
    lost = driver.coordinator.completed.get(3).handles[0].path
    driver.store.delete(lost)
    run = restore(driver, "latest", NO_GATE, GateOptions())
    assert run.restored and run.checkpoint_id == 2

    page = checkpoint_page(driver.coordinator, 3).to_json()
    assert page["quarantine"].startswith("quarantined since ")
    assert f"by a restore: 1 file(s) not intact: {lost}: missing" in page["quarantine"]
    html = render_checkpoint("payments", page, dag_ids("payments"))
    assert f"<dt>quarantined</dt><dd>{page['quarantine']}</dd>" in html


def test_latest_falls_back_over_a_quarantined_checkpoint_with_the_gate_off(driver):
    finding = Finding("pipelines/payments/chk-3", "suite:payments_balances", "negative balance")
    report = CandidateReport("payments", 3, "checkpoint", GateMode.RESTORE, 1.0, findings=[finding])
    assert GateQuarantine(driver.store, LAYOUT).add(report, 1.0)  # its files are intact

    run = restore(driver, "latest", NO_GATE, GateOptions())
    assert run.restored and run.checkpoint_id == 2 and head(driver) == 2
    held = run.plan.checks[0].quarantine
    assert held is not None and f"by the quality gate: {finding}" in held


def test_the_restore_task_records_the_gate_that_passed_the_check(driver):
    """The restore DAG's two tasks: the check runs the gate, the restore task applies its
    choice without running it again; the restore is recorded as passed by that gate, not
    as ungated."""
    judged = []

    def row_counts(candidate: RestoreCandidate) -> GateResult:
        judged.append(candidate.checkpoint_id)
        return GateResult(candidate.checkpoint_id == 2, name="row counts")

    gate = GateChoice(row_counts, "row counts of every state", name="row_counts")
    checked = restore(driver, "latest", gate, GateOptions(), check_only=True)
    report = checked.to_json()
    assert judged == [3, 2] and report["checks"][-1]["gate"]["name"] == "row counts"

    apply_restore(driver, RestorePlan.from_json(report))

    assert judged == [3, 2] and head(driver) == 2  # not judged again
    event = recent_restores(driver.coordinator, driver.coordinator.control.load())[0]
    assert event.gated and event.gate == "row counts"
    assert "passed by the row counts" in event.describe()

    # An ungated check (its gate off) is recorded as ungated.
    ungated = restore(driver, "3", NO_GATE, GateOptions(), check_only=True).to_json()
    assert ungated["checks"][-1]["gate"] is None
    apply_restore(driver, RestorePlan.from_json(ungated))
    latest = recent_restores(driver.coordinator, driver.coordinator.control.load())[0]
    assert head(driver) == 3 and not latest.gated and "ungated" in latest.describe()
