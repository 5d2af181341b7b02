"""`batchpoint quarantine list|release`: what the gate refused, and letting it back in."""

from __future__ import annotations

import json
import os
import time

import pytest

from batchpoint.cli.json_body import labelled
from batchpoint.cli.main import main
from batchpoint.protocol import records
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.quality.findings import Finding
from batchpoint.quality.quarantine import QuarantineStore
from batchpoint.quality.report import CandidateReport, GateMode
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from support import fake_epochs
from support.cli import fresh_root, payments_driver, said_error


@pytest.fixture
def quarantine(tmp_path, monkeypatch) -> QuarantineStore:
    uri = (tmp_path / "store").as_uri()
    monkeypatch.setenv("BATCHPOINT_ROOT", uri)
    driver = PipelineDriver(build_pipeline(), StoreRef.of(uri))
    driver.coordinator.register(driver.pipeline.spec())
    return QuarantineStore(driver.coordinator.store, PipelineLayout("payments"))


def _report(cid: int, problem: str) -> CandidateReport:
    finding = Finding(f"pipelines/payments/chk-{cid}", "sample:balance-recompute", problem)
    return CandidateReport(
        "payments", cid, "checkpoint", GateMode.RESTORE, time.time(), findings=[finding]
    )


def test_list_shows_each_quarantined_checkpoint_and_its_first_finding(quarantine, capsys):
    assert main(["quarantine", "list"]) == 0
    assert "no checkpoint is quarantined" in capsys.readouterr().out

    quarantine.add(_report(4, "balance 328788 (expected 164394)"), time.time())
    quarantine.add(_report(5, "balance 780426 (expected 225819)"), time.time())
    assert main(["quarantine", "list"]) == 0
    out = capsys.readouterr().out
    assert "expected 164394" in out and "expected 225819" in out

    assert main(["--json", "quarantine", "list"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert [q["checkpoint_id"] for q in body["quarantined"]] == [4, 5]
    assert body["quarantined"][0]["report"]["passed"] is False


def test_release_lets_a_checkpoint_back_and_refuses_an_unknown_one(quarantine, capsys):
    quarantine.add(_report(4, "bad"), time.time())
    assert main(["quarantine", "release", "4"]) == 0
    assert "released" in capsys.readouterr().out
    assert not quarantine.is_quarantined(4)

    quarantine.add(_report(5, "bad"), time.time())
    assert main(["quarantine", "release", "4"]) == 2  # no such checkpoint: not "not held"
    assert "pipeline payments has no checkpoint 4 (quarantined: 5)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["quarantine", "release", "0"], "checkpoint ids start at 1"),
        (["quarantine", "release", "x"], "expected an integer"),
        (["--pipeline", "nope", "quarantine", "list"], "no pipeline 'nope'"),
        (["quarantine", "list", "--json", "--pipeline", "nope"], "no pipeline 'nope'"),
    ],
)
def test_mistakes_exit_2_and_write_nothing(quarantine, capsys, argv, message):
    quarantine.add(_report(4, "bad"), time.time())
    store = StoreRef.of(os.environ["BATCHPOINT_ROOT"]).open()
    before = fake_epochs.listing(store)
    assert main(argv) == 2
    said = capsys.readouterr()
    assert message in said_error(argv, said.out, said.err)
    assert fake_epochs.listing(store) == before


def test_a_record_the_previous_release_wrote_still_lists_and_releases(quarantine, capsys):
    # version 1, exactly as the quality gate wrote it before restores quarantined too
    report = _report(4, "balance 328788 (expected 164394)")
    report.quarantined = True
    v1 = records.encode(
        "quarantine",
        1,
        {
            "checkpoint_id": 4,
            "quarantined_at": "2026-11-20T08:00:00.000Z",
            "report": report.to_body(),
        },
    )
    store = StoreRef.of(os.environ["BATCHPOINT_ROOT"]).open()
    store.put(PipelineLayout("payments").quarantine(4), v1)

    assert main(["quarantine", "list"]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    assert row.split()[0] == "4" and "2026-11-20 08:00:00" in row and "quality gate" in row
    assert "[sample:balance-recompute] pipelines/payments/chk-4: balance 328788" in row
    assert main(["--json", "quarantine", "list"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)["quarantined"]
    # the report as every --json prints a record: its times ISO 8601 with an offset
    assert listed["found_by"] == "quality-gate" and listed["report"] == labelled(report.to_body())

    assert main(["quarantine", "release", "4"]) == 0
    out = capsys.readouterr().out
    assert (
        "checkpoint 4 released (it was quarantined since 2026-11-20T08:00:00.000Z by the "
        "quality gate: [sample:balance-recompute] pipelines/payments/chk-4: balance 328788"
    ) in out
    assert not quarantine.is_quarantined(4)


def test_releasing_a_checkpoint_gc_took_does_not_say_a_restore_may_offer_it(
    tmp_path, monkeypatch, capsys
):
    """It said "restores may offer it again" of a checkpoint no longer retained (found
    by a reviewer)."""
    root = fresh_root(tmp_path, monkeypatch)
    driver = payments_driver(root, epochs=1)
    QuarantineStore(driver.coordinator.store, PipelineLayout("payments")).add(
        _report(1, "bad"), time.time()
    )
    for _ in range(driver.coordinator.config.num_retained + 1):
        fake_epochs.epoch(driver)
    assert main(["quarantine", "release", "1"]) == 0
    out = capsys.readouterr().out
    assert "was discarded" in out and "no restore can offer it" in out
    assert "may offer it again" not in out
    assert main(["--json", "quarantine", "release", "1"]) == 2  # released already


def test_pruning_a_checkpoint_takes_its_quarantine_mark(quarantine, tmp_path):
    """Marks of checkpoints GC pruned piled up under quarantine/ for good."""
    driver = PipelineDriver(build_pipeline(), StoreRef.of((tmp_path / "store").as_uri()))
    first = fake_epochs.epoch(driver)
    quarantine.add(_report(first, "bad"), time.time())
    driver.coordinator.files.prune(first, [])
    assert not quarantine.is_quarantined(first)
