"""`batchpoint verify` on real payments state: the gate's full report, every expectation
and check with what it observed, as a table or as JSON with the GX results; read-only;
suites skipped on request. (tests/cli/test_verify.py covers the rest without Spark.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from batchpoint.cli.main import main
from support.bad_deploys import buggy_balances, deploy, negative_counts
from support.fake_epochs import listing
from support.payments import GOOD_EPOCHS

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REF = "demo.payments:pipeline"
HEAD = GOOD_EPOCHS


def test_verify_reports_every_expectation_and_what_it_observed(
    good_run: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BATCHPOINT_QUALITY_GATE", raising=False)
    cli = ["--root", good_run.store_ref.uri, "--pipeline-ref", REF]
    before = listing(good_run.store)

    assert main([*cli, "verify"]) == 0  # the head
    out = capsys.readouterr().out
    assert f"checkpoint {HEAD} of pipeline 'payments': passed (0 finding(s)" in out
    lines = out.splitlines()
    between = next(line for line in lines if "expect_column_values_to_be_between" in line)
    assert "suite payments_balances" in between and "on column 'event_count'" in between
    assert "passed" in between and "0 of " in between and "values unexpected" in between
    sample = next(line for line in lines if "check balance-recompute" in line)
    assert "passed" in sample and "keys compared, 0 differ" in sample
    assert any("check row-count" in line and "recorded" in line for line in lines)
    assert listing(good_run.store) == before  # verify writes nothing

    deploy(good_run.runner.pipeline, buggy_balances(negative_counts))
    bad = good_run.epoch(GOOD_EPOCHS)
    assert bad.outcome is not None and bad.outcome.completed is not None  # audit off
    cid = bad.checkpoint_id
    before = listing(good_run.store)

    assert main(["--json", *cli, "verify", str(cid)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["target"] == f"checkpoint {cid} of pipeline 'payments'"
    assert not report["passed"] and report["suites_run"] and not report["quarantined"]
    suite = report["gx_results"]["balances/balances"]["payments_balances"]
    failed = [r for r in suite["results"] if not r["success"]]
    (negative,) = [
        r for r in failed if r["expectation_config"]["kwargs"]["column"] == "event_count"
    ]
    assert negative["result"]["unexpected_count"] > 0
    passing = [r for r in suite["results"] if r["success"]]
    assert passing and all("unexpected_count" in r["result"] for r in passing)  # full detail
    checks = {f["check"] for f in report["findings"]}
    assert checks == {"suite:payments_balances", "sample:balance-recompute"}
    assert listing(good_run.store) == before

    skip = ["--skip-suite", "payments_balances", "--skip-suite", "balance-recompute"]
    assert main([*cli, "verify", str(cid), *skip]) == 0
    out = capsys.readouterr().out
    assert f"checkpoint {cid} of pipeline 'payments': passed" in out
    assert "suite payments_seen" in out and "suite payments_balances" not in out
    assert "skipped: balance-recompute, payments_balances" in out
