"""`batchpoint restore` with the quality gate, as the restore DAG runs it: the gate on when
one is configured, `--no-gate` only with the typed confirmation, `--max-candidates`,
`--skip-suite`, a dry run that writes nothing, and exit code 2 for every mistake.

Most checkpoints ack stand-in files laid out so integrity holds (tests/support/
fake_epochs.py) and skip every suite and check by state (EVERY_STATE), so the real gate
runs its integrity checks without Spark. One slow test has the suites on real state."""

from __future__ import annotations

import json

import pytest

from batchpoint.cli.main import main
from batchpoint.protocol.checkpoint import CheckpointType
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from support import fake_epochs
from support.bad_deploys import buggy_balances, deploy, negative_counts

REF = "demo.payments:pipeline"
GATE = "demo.payments_quality:restore_gate"
EVERY_STATE = ["--skip-suite", "balances/balances", "--skip-suite", "dedup/seen"]
LAYOUT = PipelineLayout("payments")
PHRASE = "restore payments without the gate"


@pytest.fixture
def root(tmp_path, monkeypatch) -> str:
    uri = (tmp_path / "store").as_uri()
    monkeypatch.delenv("BATCHPOINT_PIPELINE_REF", raising=False)
    monkeypatch.setenv("BATCHPOINT_QUALITY_GATE", GATE)
    monkeypatch.setenv("BATCHPOINT_ROOT", uri)
    return uri


@pytest.fixture
def driver(root) -> PipelineDriver:
    driver = PipelineDriver(build_pipeline(), StoreRef.of(root))
    for _ in range(3):
        fake_epochs.epoch(driver)
    return driver


def restore(*args: str) -> int:
    return main(["--pipeline-ref", REF, "restore", *args])


def head(driver: PipelineDriver) -> int | None:
    return driver.coordinator.head.get().checkpoint_id


def test_the_gate_off_needs_the_typed_confirmation(driver, capsys):
    fake_epochs.break_a_file(driver, 3)  # same size: only the gate's checksums see it
    before = fake_epochs.listing(driver.store)
    assert restore("--no-gate") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --no-gate restores pipeline 'payments' without the quality gate")
    assert f'add exactly --confirm "{PHRASE}" (no --confirm was given)' in err
    assert restore("--no-gate", "--confirm", "restore payments without gate") == 2
    assert "(got --confirm 'restore payments without gate')" in capsys.readouterr().err
    assert fake_epochs.listing(driver.store) == before  # refused before anything was read

    assert restore("--no-gate", "--confirm", PHRASE, *EVERY_STATE, "--gate", "gates:strict") == 0
    captured = capsys.readouterr()
    assert "quality gate OFF (confirmed)" in captured.out
    # Ungated, the files are still checked with their sha256 (the default at restore):
    # the broken head is skipped as a finding and the one before it restored.
    assert "checkpoint 3: FAILED" in captured.out and "sha256" in captured.out
    assert "checkpoint 2: ok (6 file(s)" in captured.out
    assert "restored pipeline payments to checkpoint 2" in captured.out
    assert "suites to skip ignored: no suite runs with the gate off" in captured.err
    assert "--gate gates:strict ignored: the quality gate is off (--no-gate)" in captured.err
    # The damage the restore found is proven by the file: quarantined, with that reason.
    assert "checkpoint 3: FAILED, quarantined" in captured.out
    held = json.loads(driver.store.get(LAYOUT.quarantine(3)).data)
    assert held["found_by"] == "restore" and "sha256" in held["reason"]


def test_max_candidates_refuses_saying_how_far_it_looked(driver, capsys):
    for cid in (3, 2):
        fake_epochs.break_a_file(driver, cid)
    assert restore("--max-candidates", "2", *EVERY_STATE) == 1
    captured = capsys.readouterr()
    out = captured.out
    assert f"quality gate {GATE}, skipping balances/balances, dedup/seen" in out
    assert "checkpoint 3: FAILED, quarantined" in out and "checkpoint 2: FAILED, quarantined" in out
    assert "[file]" in out and "sha256" in out  # the findings, from the report's render()
    assert (
        "refused: no candidate for a restore of pipeline 'payments' from the latest retained "
        "checkpoint: looked at the 2 newest; none passed (max_candidates is 2; older, not "
        "examined: 1)"
    ) in out
    assert "to look further back: --max-candidates 3" in out
    assert "running the quality gate on checkpoint 3" in captured.err  # progress
    assert head(driver) == 3
    assert driver.store.exists(LAYOUT.quarantine(3)) and driver.store.exists(LAYOUT.quarantine(2))
    assert driver.store.exists(LAYOUT.quality_report(3))

    # Further back, the quarantined ones are refused without a look, 1 is restored.
    assert restore(*EVERY_STATE) == 0
    out = capsys.readouterr().out
    assert "checkpoint 3: quarantined since" in out and "by the quality gate: [file]" in out
    assert "checkpoint 1: passed" in out and "integrity ok; every suite skipped" in out
    assert "restored pipeline payments to checkpoint 1" in out
    assert head(driver) == 1


def test_a_dry_run_writes_nothing(driver, capsys):
    fake_epochs.break_a_file(driver, 3)
    before = fake_epochs.listing(driver.store)
    assert restore("--dry-run", *EVERY_STATE) == 0
    out = capsys.readouterr().out
    assert "dry run: nothing is quarantined or stored" in out
    assert "checkpoint 3: FAILED (" in out and "checkpoint 2: passed" in out
    assert "dry run: would restore checkpoint 2; nothing changed" in out

    assert main(["--json", "--pipeline-ref", REF, "restore", "--dry-run", *EVERY_STATE]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["chosen"] == "checkpoint 2" and report["result"] is None
    assert report["refused"] is None and report["dry_run"] is True
    assert report["quality_gate"] == {
        "enabled": True,
        "gate": GATE,
        "skip_suites": ["balances/balances", "dedup/seen"],
        "dry_run": True,
    }
    failed = report["checks"][0]["gate"]["report"]
    assert failed["passed"] is False and failed["quarantined"] is False
    assert failed["findings"][0]["check"] == "file"
    assert "running the quality gate on checkpoint 3" in captured.err
    assert fake_epochs.listing(driver.store) == before  # no quarantine, no report, head not moved


def test_a_refusal_in_json_exits_1(driver, capsys):
    fake_epochs.break_a_file(driver, 3)
    assert main(["--json", "--pipeline-ref", REF, "restore", "3", *EVERY_STATE]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["chosen"] is None and report["result"] is None
    assert report["refused"] == (
        "no candidate for a restore of pipeline 'payments' from checkpoint 3"
    )
    assert report["checks"][0]["gate"]["report"]["quarantined"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--no-gate"], f'add exactly --confirm "{PHRASE}"'),
        (["--max-candidates", "0"], "--max-candidates: max_candidates must be an integer >= 1"),
        (["--max-candidates", "two"], "got 'two'"),
        (
            ["--skip-suite", "payments_balance"],
            "declares no suite, check or state named 'payments_balance'; valid names: ",
        ),
        (["--gate", "demo.payments:pipeline"], "is a Pipeline, not a QualityRestore"),
        (["--gate", "nocolon"], "expected 'package.module:attribute'"),
        # EVERY_STATE: no suite to build, so Great Expectations (seconds) is not imported.
        (["9", *EVERY_STATE], "checkpoint 9 of pipeline 'payments' is not retained"),
    ],
)
def test_mistakes_are_explained_with_exit_code_2(driver, capsys, args, message):
    before = fake_epochs.listing(driver.store)
    assert restore(*args) == 2
    err = capsys.readouterr().err
    # Progress lines may come first (the gate is set up before the candidates are read).
    last = err.splitlines()[-1]
    assert last.startswith("error: ") and message in last and "Traceback" not in err
    assert fake_epochs.listing(driver.store) == before


def test_skipped_names_are_checked_without_a_gate_too(driver, capsys, monkeypatch):
    monkeypatch.delenv("BATCHPOINT_QUALITY_GATE")
    assert restore("--skip-suite", "payments_balance") == 2
    assert "declares no suite, check or state named 'payments_balance'" in (capsys.readouterr().err)
    assert restore("--dry-run", "--skip-suite", "payments_balances") == 0
    out = capsys.readouterr().out
    assert "no quality gate configured (BATCHPOINT_QUALITY_GATE)" in out
    assert "checkpoint 3: ok (6 file(s)" in out


@pytest.mark.spark
@pytest.mark.slow
def test_the_gate_quarantines_a_bad_deploy_and_restores_the_good_checkpoint(
    root, spark, capsys
) -> None:
    from batchpoint.ops.local_epoch import LocalEpochRunner
    from demo.payments import SOURCE_ROOT
    from demo.payments_data import write_epoch_files

    ref = StoreRef.of(root)
    runner = LocalEpochRunner(build_pipeline(), ref, spark)
    for epoch in (0, 1):  # checkpoint 1 good; checkpoint 2 written by the buggy deploy
        if epoch == 1:
            deploy(runner.pipeline, buggy_balances(negative_counts))
        write_epoch_files(ref.open(), SOURCE_ROOT, epoch, accounts=40, events_per_epoch=300)
        outcome = runner.run_epoch().outcome
        assert outcome is not None and outcome.completed is not None  # audit off: completes
    store = ref.open()

    # The suites alone catch negative counts: the samples (which read the source) are
    # skipped, through the real gate's skip list.
    skip = ["--skip-suite", "balance-recompute", "--skip-suite", "seen-recompute"]
    assert restore(*skip) == 0
    out = capsys.readouterr().out
    assert "checkpoint 2: FAILED, quarantined" in out
    assert "balances/balances" in out and "event_count" in out
    assert "checkpoint 1: passed" in out
    assert "restored pipeline payments to checkpoint 1" in out
    assert runner.driver.coordinator.head.get().checkpoint_id == 1
    assert store.exists(LAYOUT.quarantine(2))
    assert store.exists(LAYOUT.quality_report(2)) and store.exists(LAYOUT.quality_report(1))


def test_a_savepoint_restored_from_its_folder_in_this_storage_passes_the_gate(driver, capsys):
    """The restore publishes the savepoint's own sink files again (an alias epoch of the
    import): the gate's sink check took them for files the import never staged, and
    quarantined the restored checkpoint at every gated restore, even after a release."""
    coordinator = driver.coordinator
    savepoint = fake_epochs.epoch(driver, CheckpointType.SAVEPOINT)
    folder = coordinator.savepoints.default_location(savepoint)
    coordinator.savepoints.export(savepoint, folder)
    fake_epochs.epoch(driver)
    assert restore("--no-gate", "--confirm", PHRASE, folder.uri) == 0
    imported = head(driver)
    assert imported is not None and imported > savepoint
    aliases = [
        manifest.epochs[imported].alias_of
        for _, manifest in coordinator.sinks.stored()
        if imported in manifest.epochs
    ]
    assert aliases and set(aliases) == {savepoint}  # the case: an alias epoch
    fake_epochs.epoch(driver)  # the head moves on; a gated restore goes back to it
    capsys.readouterr()
    assert restore(*EVERY_STATE, "--json", str(imported)) == 0, capsys.readouterr()
    capsys.readouterr()
    assert head(driver) == imported
    assert main(["--pipeline-ref", REF, "--json", "quarantine", "list"]) == 0
    assert json.loads(capsys.readouterr().out)["quarantined"] == []
