"""`batchpoint savepoint` and `batchpoint restore`, with progress lines, tables and JSON.
The checkpoints are made by tasks that ack a small file each, except in the one slow
test that runs a real savepoint epoch on local Spark."""

from __future__ import annotations

import hashlib
import json

import pytest

from batchpoint.cli.main import main
from batchpoint.ops.epoch import finalize
from batchpoint.protocol.checkpoint import CheckpointType, FileHandle
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from support import fake_epochs

REF = "demo.payments:pipeline"


@pytest.fixture
def root(tmp_path, monkeypatch) -> str:
    uri = (tmp_path / "store").as_uri()
    for name in ("BATCHPOINT_ROOT", "BATCHPOINT_PIPELINE_REF", "BATCHPOINT_QUALITY_GATE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BATCHPOINT_ROOT", uri)
    return uri


@pytest.fixture
def driver(root) -> PipelineDriver:
    return PipelineDriver(build_pipeline(), StoreRef.of(root))


def epoch(driver: PipelineDriver, kind=CheckpointType.CHECKPOINT) -> int:
    pending = driver.trigger(kind)
    c = driver.coordinator
    for task in pending.expected_tasks:
        key = c.layout.task_data_prefix(pending.checkpoint_id, task, "a") + "f"
        data = str(task).encode()
        c.store.put(key, data)
        digest = hashlib.sha256(data).hexdigest()
        c.acknowledge(pending.checkpoint_id, task, "a", [FileHandle(key, len(data), digest)])
    finalize(driver, pending.checkpoint_id)
    return pending.checkpoint_id


def test_savepoint_exports_a_completed_checkpoint_with_progress(
    driver, capsys, tmp_path, monkeypatch
):
    monkeypatch.setenv("BATCHPOINT_SAVEPOINT_ROOTS", tmp_path.as_uri())
    cid = epoch(driver, CheckpointType.SAVEPOINT)
    target = (tmp_path / "exported").as_uri()
    code = main(
        [
            "--pipeline-ref",
            REF,
            "savepoint",
            "--checkpoint-id",
            str(cid),
            "--target",
            target,
            "--description",
            "before the deploy",
        ]
    )
    printed = capsys.readouterr()
    assert code == 0
    # the progress on stderr, the result alone on stdout
    assert f"exporting checkpoint {cid}: 6 file(s) to {target}" in printed.err
    assert "copied 6/6 file(s)" in printed.err
    assert printed.out.startswith(f"savepoint of checkpoint {cid}: {target} (6 file(s)")
    assert (tmp_path / "exported" / "_metadata").is_file()


def test_savepoint_json_keeps_stdout_parseable(driver, capsys, monkeypatch):
    cid = epoch(driver)
    monkeypatch.setenv("BATCHPOINT_PIPELINE_REF", REF)
    assert main(["--json", "savepoint", "--checkpoint-id", str(cid)]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["checkpoint_id"] == cid and summary["files"] == 6
    assert "/savepoints/payments/savepoint-0000000001-" in summary["location"]
    assert "exporting checkpoint" in captured.err  # progress went to stderr


def test_restore_dry_run_changes_nothing(driver, capsys):
    epoch(driver)
    epoch(driver)
    code = main(["--pipeline-ref", REF, "restore", "1", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert "checkpoint 1" in out and "ok" in out
    assert "dry run: would restore checkpoint 1; nothing changed" in out
    assert driver.coordinator.head.get().checkpoint_id == 2


@pytest.mark.parametrize(
    "flags",
    [[], ["--claim-mode", "no_claim"], ["--claim"], ["--claim-mode", "claim"]],
    ids=["default", "no-claim", "claim", "claim-mode"],
)
def test_restore_claims_a_savepoint_only_when_asked(driver, capsys, flags):
    claim = "claim" in flags or "--claim" in flags
    savepoint = epoch(driver, CheckpointType.SAVEPOINT)
    epoch(driver)
    code = main(["--pipeline-ref", REF, "restore", str(savepoint), *flags])
    out = capsys.readouterr().out
    assert code == 0, out
    said = "claimed: retention may now drop it" if claim else "not claimed: it stays retained"
    assert said in out
    entry = driver.coordinator.control.load().retained_entry(savepoint)
    assert entry is not None and entry.claimed is claim and entry.subsumable is claim


def test_restore_from_a_savepoint_with_a_new_parallelism(driver, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHPOINT_SAVEPOINT_ROOTS", tmp_path.as_uri())
    sp = epoch(driver, CheckpointType.SAVEPOINT)
    target = (tmp_path / "sp").as_uri()
    main(["--pipeline-ref", REF, "savepoint", "--checkpoint-id", str(sp), "--target", target])
    epoch(driver)
    capsys.readouterr()
    code = main(
        ["--pipeline-ref", REF, "--json", "restore", target, "--parallelism", '{"balances": 3}']
    )
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert code == 0
    assert report["result"]["checkpoint_id"] == 3 and report["result"]["imported_from"] == target
    assert report["parallelism"] == {"balances": 3}
    assert "importing savepoint" in captured.err
    assert driver.current_spec().operator("balances").parallelism == 3


def test_restore_explains_a_refusal(driver, capsys):
    epoch(driver)
    assert main(["--pipeline-ref", REF, "restore", "5"]) == 2
    assert "checkpoint 5 of pipeline 'payments' is not retained" in capsys.readouterr().err


def test_savepoint_and_restore_need_the_pipeline_code(driver, capsys):
    assert main(["restore"]) == 2
    assert "--pipeline-ref" in capsys.readouterr().err


@pytest.mark.spark
@pytest.mark.slow
def test_savepoint_runs_an_epoch_on_local_spark(driver, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHPOINT_SAVEPOINT_ROOTS", tmp_path.as_uri())
    from demo.payments import SOURCE_ROOT
    from demo.payments_data import write_epoch_files

    write_epoch_files(driver.store, SOURCE_ROOT, 0, accounts=40, events_per_epoch=300)
    code = main(["--pipeline-ref", REF, "savepoint", "--target", (tmp_path / "sp").as_uri()])
    printed = capsys.readouterr()
    assert code == 0, printed
    assert "[1/4] dedup ..." in printed.err and "[4/4]" in printed.err
    assert "savepoint 1 completed" in printed.err
    outcome = driver.coordinator.get_outcome(1)
    assert outcome.pending.type is CheckpointType.SAVEPOINT
    assert (tmp_path / "sp" / "_metadata").is_file()


NO_SUCH_PIPELINE = "no referenced pipeline is named 'nope' (they are: payments)"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["savepoint", "--checkpoint-id", "0"], "checkpoint ids start at 1"),
        (["savepoint", "--checkpoint-id", "9"], "checkpoint 9 did not complete"),
        (["--pipeline", "nope", "savepoint", "--checkpoint-id", "1"], NO_SUCH_PIPELINE),
        (["restore", "--pipeline", "nope"], NO_SUCH_PIPELINE),
        (["restore", "1", "--max-candidates", "0"], "--max-candidates: max_candidates must be"),
        (["restore", "1", "--parallelism", "-2"], "must be a positive integer"),
    ],
)
def test_savepoint_and_restore_mistakes_exit_2_and_write_nothing(driver, capsys, argv, message):
    epoch(driver)
    before = fake_epochs.listing(driver.store)
    assert main(["--pipeline-ref", REF, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err
    assert fake_epochs.listing(driver.store) == before


def test_restore_of_a_pipeline_the_storage_lacks_is_a_mistake(root, capsys):
    assert main(["--pipeline-ref", REF, "restore", "latest"]) == 2
    assert "no pipeline 'payments'" in capsys.readouterr().err


def test_savepoint_targets_and_restore_sources_outside_the_roots_are_refused(
    driver, capsys, tmp_path
):
    # Default root: <storage root>/savepoints/. Anything else is refused before a byte moves.
    sp = epoch(driver, CheckpointType.SAVEPOINT)
    outside = (tmp_path / "elsewhere").as_uri()
    code = main(
        ["--pipeline-ref", REF, "savepoint", "--checkpoint-id", str(sp), "--target", outside]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: savepoint path ") and "outside the savepoint roots" in err
    assert not (tmp_path / "elsewhere").exists()

    head = driver.coordinator.head.get().checkpoint_id
    assert main(["--pipeline-ref", REF, "restore", outside]) == 2
    assert "outside the savepoint roots" in capsys.readouterr().err
    assert driver.coordinator.head.get().checkpoint_id == head


@pytest.mark.parametrize("keys", ["AKIAEXAMPLE:wJalr/K7MDENG/bPxRfiCYzKEY", "t0kenvalue"])
@pytest.mark.parametrize(
    "command",
    [("savepoint", "--checkpoint-id", "1", "--target"), ("restore",), ("verify",)],
    ids=["savepoint", "restore", "verify"],
)
@pytest.mark.parametrize("scheme", ["s3", "s3a"])  # s3a: a Spark user's slip
def test_a_savepoint_path_with_keys_in_it_is_refused_showing_none(
    driver, capsys, monkeypatch, keys, command, scheme
):
    """A reviewer's finding (invariant 13): the refusals of a savepoint path outside the
    roots echoed it whole, keys and all (and a DAG run's config puts it in task logs)."""
    monkeypatch.setenv("BATCHPOINT_PIPELINE_REF", REF)
    monkeypatch.setenv("BATCHPOINT_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    epoch(driver)
    code = main([*command, f"{scheme}://{keys}@bucket/savepoints/x"])
    printed = capsys.readouterr()
    assert code == 2
    assert "refused, not shown" in printed.err
    for part in keys.split(":"):
        assert part.split("/")[0] not in printed.out + printed.err


def test_a_savepoint_path_starting_with_a_slash_is_refused_with_the_uri_to_give(
    driver, capsys, monkeypatch, tmp_path
):
    """A reviewer's finding: `--target /tmp/x` was read as the key tmp/x under the
    storage root, and refused as outside the savepoint roots, naming a folder the user
    never typed."""
    monkeypatch.setenv("BATCHPOINT_PIPELINE_REF", REF)
    cid = epoch(driver)
    folder = tmp_path / "elsewhere"
    for argv in (["savepoint", "--checkpoint-id", str(cid), "--target", str(folder)],
                 ["restore", str(folder), "--dry-run"], ["verify", str(folder)]):  # fmt: skip
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"savepoint path '{folder}' starts with '/'" in err, err
        assert f"(file://{folder})" in err, err
    assert not folder.exists()


def test_a_mistyped_restore_source_is_said_to_be_no_checkpoint(driver, capsys, monkeypatch):
    """A reviewer's finding: `restore lastest` was refused as a savepoint path outside
    the roots, only; `verify` already said what a word that is no id may have meant."""
    monkeypatch.setenv("BATCHPOINT_PIPELINE_REF", REF)
    epoch(driver)
    for word in ("lastest", "7x"):
        assert main(["restore", word, "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert f"error: '{word}' is not a checkpoint (latest or an id)" in err, err
