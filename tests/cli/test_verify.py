"""`batchpoint verify`: the quality gate's report on one checkpoint or savepoint folder,
as a table or JSON, read-only unless --quarantine; the fast file check with
--integrity-only; and a clear message with exit code 2 for every mistake in the command.

The checkpoints ack stand-in files laid out so integrity holds (tests/support/
fake_epochs.py); every suite and check is skipped by state (EVERY_STATE), so no Spark
runs: tests/cli/test_verify_state.py has the suites on real state."""

from __future__ import annotations

import json

import pytest

from batchpoint.cli.main import main
from batchpoint.protocol.checkpoint import CheckpointType
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.savepoints import SavepointLocation
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from support import fake_epochs

REF = "demo.payments:pipeline"
EVERY_STATE = ["--skip-suite", "balances/balances", "--skip-suite", "dedup/seen"]
LAYOUT = PipelineLayout("payments")


@pytest.fixture
def root(tmp_path, monkeypatch) -> str:
    uri = (tmp_path / "store").as_uri()
    for name in ("BATCHPOINT_PIPELINE_REF", "BATCHPOINT_QUALITY_GATE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BATCHPOINT_ROOT", uri)
    return uri


@pytest.fixture
def driver(root) -> PipelineDriver:
    driver = PipelineDriver(build_pipeline(), StoreRef.of(root))
    for _ in range(3):
        fake_epochs.epoch(driver)
    return driver


def verify(*args: str) -> int:
    return main(["--pipeline-ref", REF, "verify", *args])


def test_verify_reports_on_the_head_and_fails_a_broken_checkpoint(driver, capsys):
    assert verify(*EVERY_STATE) == 0
    out = capsys.readouterr().out
    assert "checkpoint 3 of pipeline 'payments': passed (0 finding(s)" in out
    assert "integrity ok; every suite skipped" in out
    assert "skipped: balances/balances, dedup/seen" in out

    broken = fake_epochs.break_a_file(driver, 2)
    before = fake_epochs.listing(driver.store)
    assert verify("2", *EVERY_STATE) == 1
    out = capsys.readouterr().out
    assert "checkpoint 2 of pipeline 'payments': FAILED (1 finding(s)" in out
    assert "integrity findings:" in out and "object" in out and "problem" in out
    row = next(line for line in out.splitlines() if line.startswith(broken))
    assert "file" in row and "sha256" in row
    assert (
        fake_epochs.listing(driver.store) == before
    )  # read-only: no report stored, nothing quarantined

    assert main(["--json", "--pipeline-ref", REF, "verify", "2", *EVERY_STATE]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["target"] == "checkpoint 2 of pipeline 'payments'"
    assert report["passed"] is False and report["quarantined"] is False
    assert report["findings"] == [
        {"object": broken, "check": "file", "problem": report["findings"][0]["problem"]}
    ]
    assert report["gx_results"] == {} and report["skipped"] == ["balances/balances", "dedup/seen"]
    assert fake_epochs.listing(driver.store) == before

    assert verify("2", "--quick", *EVERY_STATE) == 0  # sizes only: a flipped byte passes

    assert verify("2", "--quarantine", *EVERY_STATE) == 1
    assert "quarantined: no restore will offer it" in capsys.readouterr().out
    assert driver.store.exists(LAYOUT.quarantine(2))
    assert driver.store.exists(LAYOUT.quality_report(2))


def test_verify_a_savepoint_folder(driver, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHPOINT_SAVEPOINT_ROOTS", tmp_path.as_uri())
    sp = fake_epochs.epoch(driver, CheckpointType.SAVEPOINT)
    folder = (tmp_path / "sp").as_uri()
    target = SavepointLocation(StoreRef.of(folder).open())
    driver.coordinator.savepoints.export(sp, target, roots=[tmp_path.as_uri()])
    assert verify(folder) == 0
    out = capsys.readouterr().out
    assert f"savepoint {folder} (checkpoint {sp}): passed" in out
    assert "a savepoint folder is validated once imported" in out

    assert main(["verify", "--integrity-only", folder]) == 0
    assert f"savepoint {folder}: 6 file(s), 0 problem(s)" in capsys.readouterr().out


def test_integrity_only_needs_no_pipeline_code(driver, capsys):
    assert main(["verify", "--integrity-only"]) == 0
    assert "checkpoint 3: 6 file(s), 0 problem(s)" in capsys.readouterr().out
    fake_epochs.break_a_file(driver, 3)
    assert main(["--json", "verify", "--integrity-only", "3"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["checkpoint_id"] == 3 and len(out["problems"]) == 1


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda data: data[:40], "is corrupt"),
        # a newer release's record (a reviewer found it a mistake in the command, exit 2)
        (lambda data: json.dumps({**json.loads(data), "version": 99}).encode(), "version 99"),
    ],
)
def test_a_checkpoint_whose_record_is_corrupt_fails_the_check(driver, capsys, damage, said):
    """Its outcome record truncated, or of a version this release cannot read: a problem
    of the checkpoint (exit 1, JSON says so), where it was reported as a mistake in the
    command (exit 2)."""
    key = LAYOUT.outcome(2)
    driver.store.put(key, damage(driver.store.get(key).data))
    assert main(["--json", "verify", "--integrity-only", "2"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["checkpoint_id"] == 2 and out["files"] == 0
    assert [key in p and said in p for p in out["problems"]] == [True]


def test_the_configured_gate_is_used_without_the_pipeline_code(driver, capsys, monkeypatch):
    monkeypatch.setenv("BATCHPOINT_QUALITY_GATE", "demo.payments_quality:restore_gate")
    assert main(["verify", *EVERY_STATE]) == 0
    assert "checkpoint 3 of pipeline 'payments': passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["9"], "pipeline 'payments' has no checkpoint 9 (checkpoints: 1, 2, 3)"),
        (["savepoints/no/such/folder"], "is not a savepoint: it has no _metadata"),
        (["--skip-suite", "payments_balance"], "declares no suite, check or state named"),
        (["--gate", "demo.payments:pipeline"], "is a Pipeline, not a QualityGate"),
        (["--gate", "no.such.module:gate"], "No module named 'no'"),
        (["--gate", "nocolon"], "expected 'package.module:attribute'"),
        (["-1"], "checkpoint -1: checkpoint ids start at 1"),
        (["0"], "checkpoint 0: checkpoint ids start at 1"),
        (["abc"], "'abc' is not a checkpoint (an id, head or latest), and as a savepoint"),
    ],
)
def test_mistakes_are_explained_with_exit_code_2(driver, capsys, args, message):
    assert verify(*args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_a_pending_checkpoint_or_no_pipeline_code_is_explained(driver, capsys):
    pending = driver.trigger()
    assert verify(str(pending.checkpoint_id)) == 2
    assert f"checkpoint {pending.checkpoint_id} of pipeline 'payments' is still pending" in (
        capsys.readouterr().err
    )
    assert main(["verify"]) == 2
    err = capsys.readouterr().err
    assert "--pipeline-ref" in err and "--integrity-only" in err


def test_verify_reads_savepoint_folders_only_under_the_roots(driver, capsys, tmp_path):
    sp = fake_epochs.epoch(driver, CheckpointType.SAVEPOINT)
    folder = (tmp_path / "sp").as_uri()
    driver.coordinator.savepoints.export(
        sp,
        SavepointLocation(StoreRef.of(folder).open()),
        roots=[tmp_path.as_uri()],
    )
    assert main(["verify", "--integrity-only", folder]) == 2
    assert "outside the savepoint roots" in capsys.readouterr().err


@pytest.mark.parametrize("collected", [False, True], ids=["queued", "collected"])
def test_a_discarded_checkpoint_is_said_to_be_discarded_not_damaged(driver, capsys, collected):
    """A reviewer's finding: `verify 1` after 1 was subsumed (and GC ran) reported every
    file missing (exit 1, as damage), and `savepoint --checkpoint-id 1` refused with the
    missing files. Both now say the checkpoint was discarded: a mistake in the command."""
    fake_epochs.epoch(driver)  # 1 is subsumed: three are retained
    if collected:
        assert main(["gc"]) == 0
    capsys.readouterr()
    for argv in (["verify", "1", "--integrity-only"], ["savepoint", "--checkpoint-id", "1"]):
        assert main(["--pipeline-ref", REF, *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: checkpoint 1 of pipeline 'payments' was discarded"), err
        assert "retained: 2, 3, 4" in err and "missing" not in err, err
    assert verify("2", "--integrity-only") == 0  # a retained one is checked as before
