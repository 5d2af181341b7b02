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

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from batchpoint.runtime.driver import PipelineDriver
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from support.cli import REF, Cli, payments_driver, payments_on_store

#: rich's box characters (the heavy head and light body of its default table)
BOX = re.compile("[┏┃┡│└━─]")
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
    rows = [line for line in run.out.splitlines() if re.search(r"│ (head|retained) ", line)]
    assert len(rows) == 3 and all(line.startswith("│") for line in rows), run.out
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
    assert drawn_bar(run.out, "copying files") == (files, files)
    assert "copied" not in run.out
    assert "savepoint of checkpoint 3:" in run.out


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
    assert "copied 6/6 file(s)" in exported.out
    assert "checked 6/6 file(s)" in restored.err


def test_under_json_a_terminal_gets_json_and_plain_progress(payments, cli: Cli, terminal):
    run = cli("--json", "savepoint", "--checkpoint-id", "3")
    assert run.code == 0, run.err
    assert run.json["checkpoint_id"] == 3
    assert ESCAPE not in run.out + run.err and not BOX.search(run.out + run.err)
    assert "copied 6/6 file(s)" in run.err


def run_on(argv: list[str], root: str, tty: bool) -> str:
    """The installed `batchpoint ARGV` with stdout and stderr on a new
    pseudo-terminal (`tty`) or a pipe; what it wrote."""
    env = {k: v for k, v in os.environ.items() if k not in TERMINAL_SWITCHES}
    env.update(BATCHPOINT_ROOT=root, TERM="xterm-256color", COLUMNS="160")
    command = [str(Path(sys.executable).parent / "batchpoint"), *argv]
    if not tty:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr
    leader, follower = pty.openpty()
    with subprocess.Popen(command, env=env, stdout=follower, stderr=follower) as child:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert child.wait(timeout=120) == 0, b"".join(chunks)
    os.close(leader)
    return b"".join(chunks).decode()


#: rich's switches, which the environment of the tests' own run may set
TERMINAL_SWITCHES = ("TTY_COMPATIBLE", "TTY_INTERACTIVE", "FORCE_COLOR", "NO_COLOR")


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
    assert drawn_bar(run.out, "writing states") == (states, states)
    assert "state(s) written" not in run.out
    assert "savepoint bootstrapped at savepoints/boot" in run.out
