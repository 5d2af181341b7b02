"""What one restore asks of the quality gate: how far back `latest` looks, suites to skip,
a dry run that records nothing, and the typed confirmation that turns the gate off. The
gate here is the real QualityRestoreGate over stand-in state files, integrity only (no
Spark); tests/quality/test_gate.py has the suites on real state."""

from __future__ import annotations

import pytest

from batchpoint.errors import ConfigError, RestoreRefused
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.quality.gate import QualityGate
from batchpoint.quality.hook import QualityRestoreGate
from batchpoint.quality.suites import PipelineQuality, quality_of, skippable_names
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import (
    GateOptions,
    GateResult,
    RestorePlanner,
    configure_gate,
    parse_max_candidates,
    parse_skip_suites,
    ungated_phrase,
)
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from support import fake_epochs
from support.fake_epochs import listing
from support.payments import INTEGRITY_ONLY, LAYOUT

#: Every declared suite and check skipped by state: integrity is all that runs.
EVERY_STATE = ["balances/balances", "dedup/seen"]


@pytest.fixture
def driver(tmp_path) -> PipelineDriver:
    root = StoreRef.of((tmp_path / "store").as_uri())
    driver = PipelineDriver(build_pipeline(), root, CheckpointConfig(num_retained=4))
    for _ in range(4):
        fake_epochs.epoch(driver)
    return driver


def hook(driver: PipelineDriver, quality: PipelineQuality | None = None) -> QualityRestoreGate:
    return QualityRestoreGate(
        lambda: QualityGate(driver.pipeline, driver.store_ref, quality=quality or INTEGRITY_ONLY)
    )


def quarantined(driver: PipelineDriver) -> list[int]:
    return QualityGate(driver.pipeline, driver.store_ref).quarantine.ids()


def test_latest_looks_only_as_far_back_as_asked(driver):
    for cid in (4, 3):
        fake_epochs.break_a_file(driver, cid)  # same sizes: only the gate sees it
    plan = RestorePlanner(driver, gate=hook(driver), max_candidates=2).plan("latest")
    assert plan.chosen is None
    assert [c.checkpoint_id for c in plan.checks] == [4, 3]
    assert plan.to_json()["not_examined"] == [2, 1]
    refusal = plan.refusal()
    assert "looked at the 2 newest; none passed" in refusal
    assert "max_candidates is 2; older, not examined: 2, 1" in refusal
    with pytest.raises(RestoreRefused, match="looked at the 2 newest; none passed"):
        RestorePlanner(driver).apply(plan)

    further = RestorePlanner(driver, gate=hook(driver), max_candidates=3).plan("latest")
    assert further.chosen is not None and further.chosen.checkpoint_id == 2
    assert further.not_examined == (1,)
    assert RestorePlanner(driver, gate=hook(driver)).plan("latest").chosen.checkpoint_id == 2
    # a named checkpoint is the only candidate, however far back it is
    assert RestorePlanner(driver, max_candidates=1).plan("1").chosen.checkpoint_id == 1
    for bad in (0, -1, True, "x", 1.5):
        with pytest.raises(ConfigError, match="max_candidates must be an integer >= 1"):
            parse_max_candidates(bad)
    assert parse_max_candidates("") is None and parse_max_candidates(None) is None


def test_a_dry_run_of_the_gate_quarantines_nothing_and_stores_no_report(driver):
    fake_epochs.break_a_file(driver, 4)
    shared = hook(driver)
    before = listing(driver.store)

    dry = configure_gate(shared, record=False)
    plan = RestorePlanner(driver, gate=dry).plan("latest")
    assert plan.chosen is not None and plan.chosen.checkpoint_id == 3
    failed = plan.checks[0].gate
    assert failed is not None and not failed.passed
    assert failed.report["quarantined"] is False and failed.report["findings"]
    assert listing(driver.store) == before  # no quarantine record, no quality.json

    real = RestorePlanner(driver, gate=configure_gate(shared, record=True)).plan("latest")
    assert real.chosen is not None and real.chosen.checkpoint_id == 3
    assert quarantined(driver) == [4]
    assert driver.store.exists(LAYOUT.quality_report(4))
    assert shared.record and shared._gate is None  # each run got its own copy


def test_skipped_suites_are_checked_against_the_declaration_and_reported(driver):
    pipeline = driver.pipeline
    names = skippable_names(pipeline, quality_of(pipeline))
    assert {"payments_balances", "payments_seen", "balance-recompute"} <= set(names)
    assert set(EVERY_STATE) <= set(names)
    declared = hook(driver, quality_of(pipeline))
    before = listing(driver.store)

    typo = configure_gate(declared, record=True, skip_suites=["payments_balance"])
    with pytest.raises(ConfigError) as error:
        RestorePlanner(driver, gate=typo).plan("latest")
    message = str(error.value)
    assert "'payments_balance'" in message and "valid names: " in message
    assert "payments_balances" in message.split("valid names: ")[1]
    assert listing(driver.store) == before  # refused before any candidate was judged

    skipping = configure_gate(declared, record=False, skip_suites=EVERY_STATE)
    plan = RestorePlanner(driver, gate=skipping).plan("latest")
    assert plan.chosen is not None and plan.chosen.checkpoint_id == 4
    report = plan.checks[0].gate.report
    assert report["skipped"] == EVERY_STATE and report["suites_run"] is False
    assert report["gx_results"] == {} and report["passed"]

    def plain(candidate):
        return GateResult(True)

    assert configure_gate(plain, record=False) is plain  # called as it is
    with pytest.raises(ConfigError, match="cannot skip suites"):
        configure_gate(plain, record=True, skip_suites=["payments_seen"])
    assert parse_skip_suites("payments_seen, balances/balances\npayments_seen") == (
        "payments_seen",
        "balances/balances",
    )
    with pytest.raises(ConfigError, match="list of suite names"):
        parse_skip_suites([1])


def test_turning_the_gate_off_needs_the_exact_phrase():
    phrase = ungated_phrase("payments")
    assert phrase == "restore payments without the gate"
    on = GateOptions.from_form("payments", max_candidates=2, skip_suites=["payments_seen"])
    assert on == GateOptions(True, 2, ("payments_seen",))
    for typed in ("", "yes", "restore payments without gate", phrase.upper()):
        with pytest.raises(RestoreRefused) as refused:
            GateOptions.from_form("payments", quality_gate=False, confirm_ungated=typed)
        assert f'set confirm_ungated to exactly "{phrase}"' in str(refused.value)
    off = GateOptions.from_form("payments", quality_gate="false", confirm_ungated=f" {phrase} ")
    assert not off.enabled
    with pytest.raises(ConfigError, match="quality_gate must be true or false"):
        GateOptions.from_form("payments", quality_gate="off")
