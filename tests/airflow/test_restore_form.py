"""The restore DAG's quality-gate form fields under dag.test(), against SeaweedFS: the
gate off (only with the typed phrase), how far back `latest` looks, suites to skip, and
a dry run that quarantines nothing. conf is what the UI's trigger form sends.

The checkpoints ack stand-in files laid out so that integrity holds (tests/support/
fake_epochs.py), written straight through the driver: no checkpoint DAG
run is needed. The gate is the real QualityRestoreGate, integrity only (or with every
suite skipped), so no Spark runs; a file with a flipped byte is what it must catch (the
planner's own check compares sizes only)."""

from __future__ import annotations

from typing import Any

import pytest

from batchpoint.protocol.layout import PipelineLayout
from batchpoint.quality.gate import QualityGate
from batchpoint.quality.hook import QualityRestoreGate
from batchpoint.quality.suites import PipelineQuality, quality_of
from demo.payments import pipeline
from support import fake_epochs

pytestmark = [pytest.mark.airflow, pytest.mark.s3]

REF = "demo.payments:pipeline"
LAYOUT = PipelineLayout("payments")
INTEGRITY_ONLY = PipelineQuality(count_rows=False)
PHRASE = "restore payments without the gate"


class Restores:
    """The restore DAG of one test's deployment, with a quality gate on its store."""

    def __init__(self, bp: Any, quality: PipelineQuality | None) -> None:
        self.bp = bp
        self.driver = bp.driver()
        store_ref = bp.settings.store_ref
        # One hook for every run, as a deployment has: each run must get its own copy.
        self.gate = (
            None
            if quality is None
            else QualityRestoreGate(lambda: QualityGate(pipeline, store_ref, quality=quality))
        )

    def epochs(self, count: int) -> None:
        for _ in range(count):
            fake_epochs.epoch(self.driver)

    def run(self, **conf: Any) -> tuple[str, dict[str, str], dict[str, Any] | None]:
        from batchpoint.airflow.dag_factory import build_restore_dag

        # A DAG per run: dag.test() keeps a run's conf in the DAG's params.
        dag = build_restore_dag(pipeline, REF, self.bp.deployment(), gate=self.gate)
        run = dag.test(run_conf=conf)
        tis = {ti.task_id: ti for ti in run.get_task_instances()}
        check = tis["check"].xcom_pull(task_ids="check") if "check" in tis else None
        return run.state, {k: str(ti.state) for k, ti in tis.items()}, check

    @property
    def head(self) -> int | None:
        return self.driver.coordinator.head.get().checkpoint_id

    def quarantined(self) -> list[int]:
        return QualityGate(pipeline, self.bp.settings.store_ref).quarantine.ids()

    def listing(self) -> dict[str, str]:
        return fake_epochs.listing(self.driver.store, "pipelines/")


def test_the_gate_is_turned_off_only_with_the_typed_phrase(bp):
    restores = Restores(bp, INTEGRITY_ONLY)
    restores.epochs(2)
    fake_epochs.break_a_file(restores.driver, 1)
    before = restores.listing()

    for typed in ("", "restore payments", PHRASE.upper()):
        state, states, _ = restores.run(source="1", quality_gate=False, confirm_ungated=typed)
        assert state == "failed" and states == {"check": "failed", "restore": "upstream_failed"}
    assert restores.listing() == before  # refused before anything was read or written

    # gated, the broken checkpoint 1 is refused (and quarantined)...
    state, states, _ = restores.run(source="1")
    assert state == "failed" and states["check"] == "failed"
    assert restores.quarantined() == [1] and restores.head == 2

    # ...and ungated, with the phrase, still refused: quarantine holds on every restore
    # path, and the files' sha256 are checked at restore anyway
    state, states, _ = restores.run(
        source="1", dry_run=False, quality_gate=False, confirm_ungated=PHRASE
    )
    assert state == "failed" and states["check"] == "failed"
    assert restores.head == 2

    # ungated with the phrase, a sound checkpoint is restored without the suites
    state, states, check = restores.run(
        source="2", dry_run=False, quality_gate=False, confirm_ungated=PHRASE
    )
    assert state == "success", states
    assert check["quality_gate"]["enabled"] is False and check["checks"][0]["gate"] is None
    assert restores.head == 2


def test_a_dry_run_quarantines_nothing_and_how_far_back_is_enforced(bp):
    restores = Restores(bp, INTEGRITY_ONLY)
    restores.epochs(3)
    for cid in (3, 2):
        fake_epochs.break_a_file(restores.driver, cid)
    before = restores.listing()

    state, states, check = restores.run(dry_run=True)
    assert state == "success" and states == {"check": "success", "restore": "skipped"}
    assert check["checkpoint_id"] == 1 and check["quality_gate"]["dry_run"] is True
    assert [c["checkpoint_id"] for c in check["checks"]] == [3, 2, 1]
    assert [c["gate"]["report"]["quarantined"] for c in check["checks"][:2]] == [False, False]
    assert restores.listing() == before  # no quarantine record, no stored report

    state, states, _ = restores.run(max_candidates=1)
    assert state == "failed" and states["check"] == "failed"
    assert restores.quarantined() == [3]  # 2 was not examined
    assert not restores.driver.store.exists(LAYOUT.quality_report(2))

    state, states, check = restores.run(max_candidates=3, dry_run=False)
    assert state == "success", states
    assert [c["checkpoint_id"] for c in check["checks"]] == [3, 2, 1]
    assert check["max_candidates"] == 3 and restores.quarantined() == [2, 3]
    assert restores.head == 1


def test_suites_to_skip_are_checked_and_reach_the_gate(bp):
    restores = Restores(bp, quality_of(pipeline))
    restores.epochs(2)
    before = restores.listing()

    state, states, _ = restores.run(skip_suites=["payments_balance"])
    assert state == "failed" and states["check"] == "failed"
    assert restores.listing() == before

    # every suite and check skipped by state: integrity alone, no Spark
    state, states, check = restores.run(skip_suites=["balances/balances", "dedup/seen"])
    assert state == "success", states
    assert check["quality_gate"]["skip_suites"] == ["balances/balances", "dedup/seen"]
    report = check["checks"][0]["gate"]["report"]
    assert report["passed"] and report["suites_run"] is False
    assert report["skipped"] == ["balances/balances", "dedup/seen"]
    assert restores.head == 2


def test_without_a_configured_gate_skip_names_are_still_checked(bp):
    restores = Restores(bp, None)  # no BATCHPOINT_QUALITY_GATE: files only
    restores.epochs(1)
    state, states, _ = restores.run(skip_suites=["payments_balance"])
    assert state == "failed" and states["check"] == "failed"
    state, states, check = restores.run(skip_suites=["payments_balances"], dry_run=True)
    assert state == "success", states
    assert check["quality_gate"] == {
        "enabled": True,
        "gate": None,
        "skip_suites": ["payments_balances"],
        "dry_run": True,
    }
    assert check["checks"][0]["gate"] is None


def test_the_claim_field_reaches_the_restore(bp):
    restores = Restores(bp, INTEGRITY_ONLY)
    restores.epochs(2)
    state, states, _ = restores.run(source="1", dry_run=False, claim_mode="claim")
    assert state == "success", states
    entry = restores.driver.coordinator.control.load().retained_entry(1)
    assert restores.head == 1 and entry is not None and entry.claimed
    # left out, the restore does not claim
    state, states, _ = restores.run(source="2", dry_run=False)
    assert state == "success", states
    assert not restores.driver.coordinator.control.load().retained_entry(2).claimed
    # a run triggered with the older boolean key still claims
    state, states, _ = restores.run(source="2", dry_run=False, claim=True)
    assert state == "success", states
    assert restores.driver.coordinator.control.load().retained_entry(2).claimed


def test_a_garbled_head_is_quarantined_and_the_form_offers_it_no_more(bp):
    from batchpoint.quality.quarantine import release

    restores = Restores(bp, INTEGRITY_ONLY)
    restores.epochs(3)
    store, key = restores.driver.store, LAYOUT.outcome(3)
    original = store.get(key).data
    store.put(key, original[: len(original) // 2])  # issue 24, reproduction 5

    state, states, check = restores.run(dry_run=False)
    assert state == "success", states
    assert check["checkpoint_id"] == 2 and restores.head == 2
    assert check["checks"][0]["quarantined"] is True and key in check["checks"][0]["problems"][0]
    assert restores.quarantined() == [3]

    # reproduction 9: latest never examines it again, and by name it is refused
    state, states, check = restores.run(dry_run=True)
    assert check["checks"][0]["quarantine"].startswith("quarantined since ")
    assert check["checks"][0]["gate"] is None and check["checkpoint_id"] == 2
    state, states, _ = restores.run(source="3", dry_run=False)
    assert state == "failed" and states["check"] == "failed" and restores.head == 2

    # mended and released, the form may restore it again
    store.put(key, original)
    assert release(store, "payments", 3)
    state, states, _ = restores.run(source="3", dry_run=False)
    assert state == "success", states
    assert restores.head == 3


def test_the_restore_operator_still_takes_the_older_claim_argument():
    from batchpoint.airflow.operators import RestoreOperator
    from batchpoint.protocol.claim_mode import ClaimMode

    with pytest.warns(DeprecationWarning, match="claim_mode=ClaimMode.CLAIM"):
        legacy = RestoreOperator(task_id="restore", pipeline_ref=REF, claim=True)
    assert legacy.claim_mode is ClaimMode.CLAIM
    templated = RestoreOperator(task_id="restore", pipeline_ref=REF)
    assert templated.claim_mode == "{{ params.claim_mode }}"
