"""A user's mistake is one line and exit 2, said before any Spark starts (a reviewer's
six findings): pipeline code that imports a missing module, a checkpoint with nothing to
read or verify (pending, aborted, discarded), an empty PIPELINE operand, a savepoint
path whose name needs percent-encoding, and a savepoint target outside the roots.

A real local root with the payments pipeline's every_status history
(support/status_history.py); Spark's session factories are tripwires, so that a command
that would start a session fails the test instead."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from batchpoint.runtime.driver import PipelineDriver
from support.cli import EVERY_STATE, REF, Cli, listing, payments_driver
from support.status_history import every_status

PENDING, ABORTED, DISCARDED = "8", "7", "2"
STATE = ("payments", "balances/balances")


@pytest.fixture
def history(root: str, monkeypatch: pytest.MonkeyPatch) -> PipelineDriver:
    """The payments pipeline's every_status history at the CLI's root, its code named."""
    monkeypatch.setenv("BATCHPOINT_PIPELINE_REF", REF)
    driver = payments_driver(root)
    every_status(driver)
    return driver


@pytest.fixture(autouse=True)
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way the CLI starts a Spark session raises (an AssertionError: main lets it
    through, so the test fails on it)."""
    from batchpoint.spark import session

    def tripwire(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a Spark session was started")

    monkeypatch.setattr(session, "spark_session", tripwire)
    monkeypatch.setattr(session, "session_here", tripwire)


@pytest.fixture
def user_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path for the user's pipeline modules, unimported afterwards."""
    folder = tmp_path / "user_code"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    for path in folder.glob("*.py"):
        sys.modules.pop(path.stem, None)


def refused(cli: Cli, *argv: str) -> str:
    """The one line a refused command said (exit 2)."""
    run = cli(*argv)
    assert run.code == 2, (run.code, run.out, run.err)
    return run.refusal(argv).removeprefix("error: ").strip()


# -- 1: pipeline code that imports a missing module -------------------------------------


@pytest.mark.parametrize("json", [False, True])
def test_a_pipeline_function_importing_a_missing_module_is_one_line(
    history, user_modules, cli, json
) -> None:
    (user_modules / "mistakes_pipeline.py").write_text(
        "def pipeline():\n    import my_company_helpers\n"
    )
    argv = ["--pipeline-ref", "mistakes_pipeline:pipeline", "plan"]
    said = refused(cli, *(["--json"] if json else []), *argv)
    assert said.startswith(
        "pipeline reference 'mistakes_pipeline:pipeline': calling it failed: "
        "ModuleNotFoundError: No module named 'my_company_helpers' (at "
    ), said
    assert said.endswith("mistakes_pipeline.py:2)"), said


def test_a_missing_optional_package_still_names_the_extra(
    history, user_modules, cli, monkeypatch
) -> None:
    (user_modules / "gx_pipeline.py").write_text("def pipeline():\n    import great_expectations\n")
    monkeypatch.setitem(sys.modules, "great_expectations", None)  # not installed here
    said = refused(cli, "--pipeline-ref", "gx_pipeline:pipeline", "plan")
    assert said == (
        "this command needs great_expectations, which is not installed here: install "
        "batchpoint[quality] (pip install 'batchpoint[quality]')"
    )


# -- 2 and 6: a checkpoint with nothing to read or verify -------------------------------


@pytest.mark.parametrize(
    ("checkpoint", "why"),
    [
        (PENDING, "is still pending: read it once it has completed"),
        (ABORTED, "was aborted (incompatible-deploy: operator 'dedup' changed its key)"),
        (DISCARDED, "was discarded (no longer retained: its files are collected"),
    ],
)
def test_state_show_refuses_as_verify_does_before_spark(history, cli, checkpoint, why) -> None:
    shown = refused(cli, "state", "show", *STATE, "--checkpoint", checkpoint)
    assert shown.startswith(f"checkpoint {checkpoint} of pipeline 'payments' {why}"), shown
    verified = refused(cli, "verify", "--integrity-only", checkpoint)
    assert shown == verified.replace("verify", "read")


def test_an_aborted_checkpoint_is_a_mistake_with_or_without_the_gate(history, cli) -> None:
    files_only = refused(cli, "verify", "--integrity-only", ABORTED)
    gated = refused(cli, "verify", ABORTED, *EVERY_STATE)
    assert files_only == gated
    assert gated == (
        "checkpoint 7 of pipeline 'payments' was aborted (incompatible-deploy: operator "
        "'dedup' changed its key): it never completed, so it has no files or state to "
        "verify; name a completed checkpoint (batchpoint checkpoints list)"
    )


# -- 3: an empty PIPELINE operand -------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ("lineage", ""),
        ("--json", "lineage", " "),
        ("state", "show", "", "balances/balances"),
        ("sink", "history", "", "alerts"),
    ],
)
def test_an_empty_pipeline_operand_is_refused_naming_the_pipelines(history, cli, argv) -> None:
    assert refused(cli, *argv) == "PIPELINE is empty: name the pipeline (pipelines: payments)"


def test_an_empty_pipeline_operand_is_refused_among_several_pipelines(history, cli) -> None:
    store = history.store
    for info in list(store.list("pipelines/payments/")):
        copy = info.key.replace("pipelines/payments/", "pipelines/ledger/", 1)
        store.put(copy, store.get(info.key).data)
    said = refused(cli, "lineage", "", "--pipeline", "payments")
    assert said == "PIPELINE is empty: name the pipeline (pipelines: ledger, payments)"


# -- 4: a savepoint path whose name is percent-encoded in a URI -------------------------


def outside_roots(root: str, folder: str) -> str:
    return (
        f"savepoint path {root}/{folder} is outside the savepoint roots ({root}/savepoints/); "
        "use a folder under one of them or add a root (BATCHPOINT_SAVEPOINT_ROOTS)"
    )


@pytest.mark.parametrize("folder", ["backups/q1 2026", "backups/ünï", "backups/plain"])
def test_a_savepoint_path_with_a_space_or_accent_is_no_link(history, root, cli, folder) -> None:
    assert refused(cli, "verify", "--integrity-only", folder) == outside_roots(root, folder)


def test_a_link_out_of_the_root_is_still_named(history, root, cli, tmp_path) -> None:
    outside = tmp_path / "elsewhere dir"
    outside.mkdir()
    under = Path(root.removeprefix("file://")) / "savepoints" / "q1 link"
    under.parent.mkdir(parents=True, exist_ok=True)
    under.symlink_to(outside, target_is_directory=True)
    said = refused(cli, "verify", "--integrity-only", "savepoints/q1 link")
    assert f"(a link: its real path is {outside.as_uri()})" in said
    assert "is outside the savepoint roots" in said


# -- 5: a savepoint target outside the roots --------------------------------------------


@pytest.mark.parametrize("target", ["file:///etc/sp", "backups/sp"])
def test_a_savepoint_target_outside_the_roots_is_refused_before_spark(
    history, root, cli, target
) -> None:
    before = listing(history)
    said = refused(cli, "savepoint", "--target", target)
    assert said.startswith(f"savepoint path {root if '://' not in target else 'file://'}")
    assert "is outside the savepoint roots" in said
    assert listing(history) == before  # no savepoint was triggered
