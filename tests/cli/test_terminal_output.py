"""On a terminal the CLI draws: tables with box characters, and a progress bar for each
counted step (the folders GC examines, the files an export copies or a restore checks,
the states a bootstrap writes) that reaches its total. Anywhere else (a pipe, a file,
NO_COLOR, TERM=dumb, --json) it prints the plain text scripts read: no escape code, no
box character, the progress as lines.

In-process runs stand a terminal in with rich's TTY_COMPATIBLE=1 (the CLI honours it);
one test runs the installed command on a real pseudo-terminal. The root is a folder and a
prefix on SeaweedFS in turn (the `table_store` fixture); the checkpoints ack stand-in
files (support/fake_epochs.py), so no Spark runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from batchpoint.runtime.driver import PipelineDriver
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from support.cli import REF, Cli, payments_driver, payments_on_store, run_on

#: rich's box characters (the rule under a drawn table's headers, a bar's line)
BOX = re.compile("[┏┃┡│└━─]")
GREEN = "\x1b[32m"
ESCAPE = "\x1b"
#: a bar's last frame: its step, the bar, then done/total
BAR = r"{step} \S*━+\S* \S*(\d+)/(\d+)"


def drawn_bar(out: str, step: str) -> tuple[int, int]:
    """The (done, total) of the step's last drawn frame."""
    frames = re.findall(BAR.format(step=re.escape(step)), out)
    assert frames, f"no bar for {step!r} in {out!r}"
    done, total = frames[-1]
    return int(done), int(total)


@pytest.fixture
def payments(
    table_store: StoreRef, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> PipelineDriver:
    """Three completed checkpoints of payments, the CLI's environment pointing at them."""
    return payments_on_store(table_store, request, monkeypatch)


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "160")


def gc_folders(driver: PipelineDriver) -> int:
    """The folders a GC pass examines: the retained checkpoints (nothing is queued or
    collected yet on a fresh pipeline)."""
    control = driver.coordinator.control_record()
    assert control is not None
    assert not control.discarded and not control.collected
    return len(control.retained_ids())


def test_on_a_terminal_the_history_is_a_drawn_table(payments, cli: Cli, terminal) -> None:
    run = cli("checkpoints", "list")
    assert run.code == 0, run.err
    assert BOX.search(run.out), run.out
    rows = [line for line in run.out.splitlines() if re.search(r"^\s*\d+\s+checkpoint\s", line)]
    # a completed checkpoint's status in green, its id right-aligned under its header
    assert len(rows) == 3, run.out
    assert all(re.search(f"{re.escape(GREEN)}(head|retained)", line) for line in rows), run.out
    assert "--  ----" not in run.out  # not the plain table's rule


def test_on_a_terminal_gc_draws_a_bar_that_reaches_its_total(payments, cli: Cli, terminal):
    run = cli("gc")
    assert run.code == 0, run.err
    folders = gc_folders(payments)
    assert drawn_bar(run.err, "gc: examining checkpoint folders") == (folders, folders)
    assert "checkpoint folder(s) examined" not in run.err  # the bar, not the lines
    assert "deleted 0 file(s)" in run.out


def test_on_a_terminal_an_export_draws_its_copy_to_the_last_file(payments, cli: Cli, terminal):
    run = cli("savepoint", "--checkpoint-id", "3")
    assert run.code == 0, run.err
    files = len(payments.coordinator.get_outcome(3).completed.durable_handles)
    assert drawn_bar(run.err, "copying files") == (files, files)  # progress: stderr
    assert "copied" not in run.out + run.err
    assert run.out.startswith("savepoint of checkpoint 3:")


def test_on_a_terminal_a_restore_draws_its_file_check_beside_the_report(
    payments, cli: Cli, terminal
) -> None:
    run = cli("restore", "2")
    assert run.code == 0, run.out + run.err
    files = len(payments.coordinator.get_outcome(2).completed.durable_handles)
    assert drawn_bar(run.err, "checking files") == (files, files)  # progress: stderr
    assert f"checked {files}/{files} file(s)" not in run.err
    assert "restored pipeline payments to checkpoint 2" in run.out


@pytest.mark.parametrize(
    "env",
    [{}, {"TTY_COMPATIBLE": "1", "NO_COLOR": "1"}, {"TTY_COMPATIBLE": "1", "TERM": "dumb"}],
    ids=["piped", "NO_COLOR", "TERM=dumb"],
)
def test_elsewhere_the_output_is_plain_text(payments, cli: Cli, monkeypatch, env) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    listed, collected, exported, restored = (
        cli("checkpoints", "list"),
        cli("gc"),
        cli("savepoint", "--checkpoint-id", "3"),
        cli("restore", "2"),
    )
    for run in (listed, collected, exported, restored):
        assert run.code == 0, run.err
        assert ESCAPE not in run.out + run.err and not BOX.search(run.out + run.err), run.out
    assert re.search(r"^id\s+type\s+status", listed.out, re.M), listed.out
    assert re.search(r"^--\s+-+", listed.out, re.M), listed.out
    folders = gc_folders(payments)
    assert f"gc: {folders}/{folders} checkpoint folder(s) examined" in collected.err
    assert collected.out.startswith("deleted 0 file(s)")  # stdout: the report alone
    assert "copied 6/6 file(s)" in exported.err  # progress: stderr, beside the result
    assert exported.out.startswith("savepoint of checkpoint 3:")
    assert "checked 6/6 file(s)" in restored.err


def test_under_json_a_terminal_gets_json_and_plain_progress(payments, cli: Cli, terminal):
    run = cli("--json", "savepoint", "--checkpoint-id", "3")
    assert run.code == 0, run.err
    assert run.json["checkpoint_id"] == 3
    assert ESCAPE not in run.out + run.err and not BOX.search(run.out + run.err)
    assert "copied 6/6 file(s)" in run.err


def test_the_command_draws_on_a_real_terminal_and_prints_plain_text_into_a_pipe(
    tmp_path: Path,
) -> None:
    root = (tmp_path / "store").as_uri()
    driver = payments_driver(root, epochs=3)
    folders = gc_folders(driver)
    on_tty = run_on(["checkpoints", "list"], root, tty=True)
    assert BOX.search(on_tty) and ESCAPE in on_tty, on_tty
    bar = run_on(["gc"], root, tty=True)
    assert drawn_bar(bar, "gc: examining checkpoint folders") == (folders, folders)
    piped = run_on(["checkpoints", "list"], root, tty=False) + run_on(["gc"], root, tty=False)
    assert ESCAPE not in piped and not BOX.search(piped), piped
    assert re.search(r"^id\s+type\s+status", piped, re.M), piped
    assert f"gc: {folders}/{folders} checkpoint folder(s) examined" in piped


@pytest.mark.spark
@pytest.mark.slow
def test_on_a_terminal_a_bootstrap_draws_its_states_to_the_last(
    spark, root: str, cli: Cli, terminal, tmp_path: Path, monkeypatch
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from demo.payments import BALANCE_SCHEMA

    monkeypatch.setenv("BATCHPOINT_PIPELINE_REF", REF)
    balances = tmp_path / "balances.parquet"
    rows = [{"account_id": "a-1", "balance": 120, "event_count": 3, "last_ts": 1}]
    pq.write_table(pa.Table.from_pylist(rows, BALANCE_SCHEMA), balances)
    states = sum(len(op.states) for op in build_pipeline().operators.values())

    run = cli(
        "savepoint", "bootstrap", "savepoints/boot", "--state", f"balances.balances={balances}"
    )
    assert run.code == 0, run.out + run.err
    assert drawn_bar(run.err, "writing states") == (states, states)
    assert "state(s) written" not in run.out + run.err
    assert "savepoint bootstrapped at savepoints/boot" in run.out
    # The command it names exists (it named a --savepoint flag restore does not have).
    assert "`batchpoint restore savepoints/boot`" in run.out
