"""The quality gate: the bad-deploy rollback, quarantine, release and dry runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from batchpoint.errors import ConfigError, RestoreRefused
from batchpoint.quality.findings import Check
from batchpoint.quality.gate import QualityGateRefused
from batchpoint.quality.gated_restore import gated_restore
from batchpoint.quality.quarantine import QuarantineCause, release
from batchpoint.quality.report import CandidateReport
from batchpoint.quality.suites import PipelineQuality, StateQuality
from support.bad_deploys import buggy_balances, deploy, deploy_fixed, doubled_amounts
from support.fake_epochs import listing
from support.payments import GOOD_EPOCHS, INTEGRITY_ONLY, LAYOUT
from support.restoring import gate_reports
from support.tampering import rewrite_outcome, state_handles

pytestmark = pytest.mark.spark

HEAD = GOOD_EPOCHS


def _flip_a_byte_of_head(store: Any) -> None:
    path = state_handles(store, HEAD, "balances", "balances")[0]["path"]
    data = bytearray(store.get(path).data)
    data[-20] ^= 0xFF
    store.put(path, bytes(data))


@pytest.mark.slow
def test_bad_deploy_is_rolled_back_to_the_last_good_checkpoint(
    good_run: Any, make_gate: Callable[..., Any]
) -> None:
    pipeline = good_run.runner.pipeline
    deploy(pipeline, buggy_balances(doubled_amounts))
    bad = [good_run.epoch(e).outcome for e in (GOOD_EPOCHS, GOOD_EPOCHS + 1)]
    assert all(o is not None and o.completed is not None for o in bad)  # audit off: they complete
    bad_ids = [o.checkpoint_id for o in bad]

    log: list[str] = []
    gate = make_gate(good_run, log=log.append)
    restored = gated_restore(good_run.runner.driver, gate)

    candidates = gate_reports(restored)
    assert restored.plan.chosen_id == HEAD and restored.head is not None
    assert restored.head.checkpoint_id == HEAD
    assert [c.checkpoint_id for c in candidates] == [*reversed(bad_ids), HEAD]
    for candidate in candidates[:2]:
        assert not candidate.passed and candidate.quarantined and candidate.suites_run
        assert {f.check for f in candidate.findings} == {f"{Check.SAMPLE}:balance-recompute"}
        assert {f.object for f in candidate.findings} == {"balances/balances"}
        # integrity held and the suites ran: their results are in the report
        assert set(candidate.gx_results) == {"balances/balances", "dedup/seen"}
    good = candidates[2]
    assert good.passed and not good.quarantined
    assert good.checks["balances/balances"]["balance-recompute"]["keys_compared"] > 0
    assert gate.quarantine.ids() == sorted(bad_ids)

    # the reports are stored beside each checkpoint, the quarantine records hold them too
    for candidate in candidates:
        stored = gate.stored_report(candidate.checkpoint_id)
        assert stored is not None and stored.to_body() == candidate.to_body()
    held = gate.quarantine.get(bad_ids[0])
    assert held is not None and held.found_by is QuarantineCause.QUALITY_GATE
    held_report = gate.quarantine.report(held)
    assert held_report is not None and held_report.findings == candidates[1].findings
    text = "\n".join(log)  # the gate logs its report
    assert f"restore checkpoint {HEAD}" in text and "FAILED, quarantined" in text
    assert log[-1].startswith("restored pipeline 'payments'")

    # the fixed operator reprocesses the bad epochs' input from the restored checkpoint
    deploy_fixed(pipeline)
    fixed = good_run.epoch(GOOD_EPOCHS + 2)
    assert fixed.outcome is not None and fixed.outcome.completed is not None
    assert fixed.pending.base_checkpoint_id == HEAD
    good_run.assert_matches_reference()


def test_dry_run_writes_nothing_and_quarantine_holds_until_released(
    good_run: Any, make_gate: Callable[..., Any]
) -> None:
    store = good_run.store
    _flip_a_byte_of_head(store)
    gate = make_gate(good_run, quality=INTEGRITY_ONLY)
    before = listing(store)

    dry = gate.run(dry_run=True)
    assert dry.dry_run and dry.chosen == HEAD - 1
    assert listing(store) == before  # no report, no quarantine, nothing moved
    assert "dry run" in dry.render()

    first = gate.run()
    assert first.chosen == HEAD - 1 and gate.quarantine.ids() == [HEAD]
    assert store.exists(LAYOUT.quality_report(HEAD))

    second = gate.run()  # the quarantined head is never offered again
    assert second.quarantined_skipped == [HEAD]
    assert [c.checkpoint_id for c in second.candidates] == [HEAD - 1]
    with pytest.raises(QualityGateRefused, match="quarantined earlier"):
        gate.run(HEAD)  # not even when named
    with pytest.raises(RestoreRefused, match="is not retained"):
        gate.run(HEAD + 7)

    assert release(store, "payments", HEAD)
    assert not release(store, "payments", HEAD)  # released already
    again = make_gate(good_run, quality=INTEGRITY_ONLY, max_candidates=1)
    with pytest.raises(QualityGateRefused) as refused:
        again.run()  # eligible again, examined again, failing again
    message = str(refused.value)
    assert f"checkpoint {HEAD}: [file]" in message
    assert f"not examined (beyond max candidates): {HEAD - 1}" in message
    assert gate.quarantine.ids() == [HEAD]


def test_row_counts_must_match_the_metadata(good_run: Any, make_gate: Callable[..., Any]) -> None:
    def add_a_row(document: dict) -> None:
        # What the metadata records a state's rows to be: a full file's rows, and a
        # changelog's net rows (its rows count updates and deletions too).
        ack = next(a for a in document["acks"] if a["task"] == "dedup#0")
        handle = next(h for h in ack["handles"] if h["name"] == "state-seen")
        handle["net_rows" if handle.get("layer") else "rows"] += 1

    rewrite_outcome(good_run.store, HEAD, add_a_row)
    skip = ["payments_balances", "payments_seen", "balance-recompute", "seen-recompute"]
    report = make_gate(good_run, skip_suites=skip).run()
    assert report.chosen == HEAD - 1
    (finding,) = report.candidates[0].findings
    assert (finding.object, finding.check) == ("dedup/seen", Check.ROW_COUNT)
    assert "but the checkpoint's metadata records" in finding.problem
    assert report.candidates[1].gx_results == {}  # every suite was skipped
    assert set(report.candidates[1].skipped) == set(skip)


def test_a_bad_suite_is_a_config_error_not_a_verdict(
    good_run: Any, make_gate: Callable[..., Any], tmp_path: Any
) -> None:
    (tmp_path / "broken.json").write_text(
        json.dumps({"name": "broken", "expectations": [{"type": "expect_nonsense", "kwargs": {}}]})
    )
    quality = PipelineQuality(
        states=(StateQuality("balances", "balances", suite="broken"),), suites_dir=tmp_path
    )
    gate = make_gate(good_run, quality=quality)
    with pytest.raises(ConfigError, match="expect_nonsense"):
        gate.run()
    misspelt = {"type": "expect_column_values_to_be_unique", "kwargs": {"column": "acount_id"}}
    (tmp_path / "broken.json").write_text(json.dumps({"name": "b", "expectations": [misspelt]}))
    with pytest.raises(ConfigError, match=r"names column\(s\) \['acount_id'\]"):
        make_gate(good_run, quality=quality).run()
    assert gate.quarantine.ids() == []
    assert not good_run.store.exists(LAYOUT.quality_report(HEAD))
    with pytest.raises(ConfigError, match="has no state 'nope'"):
        make_gate(good_run, quality=PipelineQuality(states=(StateQuality("balances", "nope"),)))


def test_report_round_trips(good_run: Any, make_gate: Callable[..., Any]) -> None:
    _flip_a_byte_of_head(good_run.store)
    report = make_gate(good_run, quality=INTEGRITY_ONLY).run()
    stored = good_run.store.get(LAYOUT.quality_report(HEAD))
    decoded = CandidateReport.decode(LAYOUT.quality_report(HEAD), stored.data)
    assert decoded.to_body() == report.candidates[0].to_body()
    assert json.loads(stored.data)["kind"] == "quality-report"


def test_the_gate_is_the_restore_planners_hook(
    good_run: Any, make_gate: Callable[..., Any]
) -> None:
    from batchpoint.quality.hook import QualityRestoreGate
    from batchpoint.runtime.restore import RestorePlanner

    _flip_a_byte_of_head(good_run.store)  # same size: the planner's own check passes it
    hook = QualityRestoreGate(lambda: make_gate(good_run, quality=INTEGRITY_ONLY))
    planner = RestorePlanner(good_run.runner.driver, gate=hook)

    plan = planner.plan("latest")
    assert plan.chosen is not None and plan.chosen.checkpoint_id == HEAD - 1
    refused = plan.checks[0].gate
    assert refused is not None and not refused.passed
    assert refused.report["findings"][0]["check"] == Check.FILE
    assert hook.gate.quarantine.ids() == [HEAD]

    again = planner.plan("latest")  # a quarantined checkpoint is refused without a look
    assert again.checks[0].gate is None and again.checks[0].quarantine is not None
    assert again.checks[0].quarantine.startswith("quarantined since")
    result = planner.apply(again)
    assert result.checkpoint_id == HEAD - 1

    dry = QualityRestoreGate(lambda: make_gate(good_run, quality=INTEGRITY_ONLY), record=False)
    before = listing(good_run.store)
    assert RestorePlanner(good_run.runner.driver, gate=dry).plan(HEAD - 1).chosen is not None
    assert listing(good_run.store) == before
