"""The command line as users of kubectl, gh and dbt expect it (issue 38): help in their
words with examples, the global options listed once and accepted before or after the
command, numbers right-aligned, a status in its colour on a terminal and no colour in a
pipe or under NO_COLOR / --no-color, a spinner on stderr for anything that takes over a
second, and --json with ISO 8601 timestamps, labelled fields and a version key.

The installed command runs on a real pseudo-terminal and into a pipe against stored
records (fake epochs: no Spark); the spinner's timing is driven by its own event."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from batchpoint.cli.json_body import TIME_KEY
from batchpoint.cli.main import build_parser
from batchpoint.cli.output import Output
from batchpoint.cli.status_colours import status_style
from batchpoint.protocol.checkpoint import CheckpointFailureReason
from support.cli import Cli, payments_driver, run_on

ESCAPE = "\x1b"
GREEN, RED = "\x1b[32m", "\x1b[31m"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
GLOBAL = ("--root", "--pipeline", "--json", "--no-color", "--pipeline-ref", "--spark-conn-id")
#: words of the code, not of its users
JARGON = ("register(", "subparsers", "Command`", "batchpoint.ops", "argparse")


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[Any]:
    """(path, parser) of every command and subcommand."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append(((*path, name), sub))
                found += commands(sub, (*path, name))
    return found


def test_the_top_help_lists_every_global_option_once_in_users_words() -> None:
    text = build_parser().format_help()
    for flag in GLOBAL:
        assert len(re.findall(rf"^\s+{re.escape(flag)}(?=\s)", text, re.M)) == 1, (flag, text)
    assert "global options (before or after the command)" in text
    assert "examples:" in text and "$ batchpoint checkpoints list" in text
    assert not [word for word in JARGON if word in text], text


@pytest.mark.parametrize("path", [p for p, _ in commands(build_parser())], ids=" ".join)
def test_each_command_has_a_summary_a_description_and_examples_not_the_globals(path) -> None:
    parser = dict(commands(build_parser()))[path]
    text = parser.format_help()
    summary = text.split("\n\n")[1]
    assert summary[0].isupper() and summary.rstrip().endswith("."), text
    assert "examples:\n  $ batchpoint " in text, text
    assert "see `batchpoint --help`" in text  # where the global options are
    assert not re.search(r"^\s+--root\b|^\s+--spark-conn-id\b", text, re.M), text
    assert not [word for word in JARGON if word in text], text


def test_the_installed_command_prints_that_help(tmp_path: Path) -> None:
    root = (tmp_path / "store").as_uri()
    top = run_on(["--help"], root, tty=False)
    assert top.startswith("usage: batchpoint") and "Inspect and operate" in top
    page = run_on(["checkpoints", "list", "--help"], root, tty=False)
    assert (
        "$ batchpoint checkpoints list --limit 5" in page
        and "--root" not in page.split("Global options")[0]
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--no-color", "--pipeline", "payments", "checkpoints", "list"],
        ["checkpoints", "--no-color", "list", "--pipeline", "payments"],
        ["checkpoints", "list", "--pipeline", "payments", "--no-color"],
    ],
)
def test_no_color_goes_before_or_after_the_command(payments, cli: Cli, argv) -> None:
    run = cli(*argv)
    assert run.code == 0 and "head = checkpoint 3" in run.out


def with_an_aborted_checkpoint(root: str) -> None:
    driver = payments_driver(root, epochs=3)
    pending = driver.trigger()
    driver.coordinator.abort(
        pending.checkpoint_id, CheckpointFailureReason.DECLINED, "a task declined"
    )


def test_numbers_are_right_aligned_and_text_left_aligned_in_a_pipe(tmp_path: Path) -> None:
    root = (tmp_path / "store").as_uri()
    with_an_aborted_checkpoint(root)
    out = run_on(["checkpoints", "list"], root, tty=False)
    header, rule, *rows = out.splitlines()[1:]
    assert ESCAPE not in out and rule.startswith("--")
    columns = {name: (m.start(), m.end()) for m in re.finditer(r"\S+", header) for name in [m[0]]}
    rows = [row for row in rows if row.strip()]
    assert len(rows) == 4, out
    for name in ("id", "duration", "size", "rows", "acks"):  # right: their last characters
        end = columns[name][1]
        assert all(row[end - 1] != " " and row[end : end + 1] in ("", " ") for row in rows), (
            name,
            out,
        )
    for name in ("type", "status"):  # left: their first characters
        start = columns[name][0]
        assert all(row[start] != " " and row[start - 1] == " " for row in rows), (name, out)
    aborted = rows[-1]
    assert "aborted" in aborted and aborted[columns["duration"][1] - 1] != " "


def test_a_terminal_shows_each_status_in_its_colour_a_pipe_and_no_color_do_not(
    tmp_path: Path,
) -> None:
    root = (tmp_path / "store").as_uri()
    with_an_aborted_checkpoint(root)
    on_tty = run_on(["checkpoints", "list"], root, tty=True)
    completed = [line for line in on_tty.splitlines() if re.search(r"(head|retained)\b", line)]
    completed = [line for line in completed if re.match(r"\s*\d", line)]  # rows, not the summary
    assert len(completed) == 3, on_tty
    assert all(re.search(f"{re.escape(GREEN)}(head|retained)", line) for line in completed)
    assert f"{RED}aborted" in on_tty, on_tty
    for plain in (
        run_on(["checkpoints", "list"], root, tty=True, env={"NO_COLOR": "1"}),
        run_on(["checkpoints", "list", "--no-color"], root, tty=True),
        run_on(["--no-color", "checkpoints", "list"], root, tty=True),
        run_on(["checkpoints", "list"], root, tty=False),
    ):
        assert ESCAPE not in plain and "aborted" in plain and "head" in plain, plain


@pytest.mark.parametrize(
    ("status", "colour"),
    [
        ("COMPLETED", "green"),
        ("head", "green"),
        ("retained", "green"),
        ("passed", "green"),
        ("PENDING", "yellow"),
        ("stopping", "yellow"),
        ("FAILED", "red"),
        ("quarantined", "red"),
        ("aborted", "red"),
        ("discarded", "dim"),
        ("something new", None),
    ],
)
def test_one_mapping_colours_every_status_whatever_its_case(status, colour) -> None:
    assert status_style(status) == colour


@pytest.fixture
def terminal_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("TERM", "xterm-256color")


def test_a_step_over_a_second_shows_a_spinner_on_stderr_only(
    terminal_stderr, capsys: pytest.CaptureFixture[str]
) -> None:
    out = Output(as_json=False, spinner_after=0.0)  # "a second" at once
    out.progress("starting Spark")
    assert out._bars is not None and out._bars.spinning.wait(timeout=30)
    out.progress("reading balances/balances")
    out.emit({}, "the result")
    printed = capsys.readouterr()
    assert printed.out == "the result\n"  # the result alone, not a frame of the display
    assert ESCAPE in printed.err and "reading balances/balances" in printed.err
    frames = ANSI.sub("", printed.err)
    assert re.search(r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] reading balances/balances +\d:\d\d:\d\d", frames), frames


def test_a_quick_command_draws_no_spinner(terminal_stderr, capsys) -> None:
    out = Output(as_json=False, spinner_after=60.0)
    out.progress("one line")
    out.emit({}, "done")
    printed = capsys.readouterr()
    assert printed.out == "done\n" and printed.err == "one line\n"
    assert out._bars is not None and not out._bars.spinning.is_set()


def test_in_a_pipe_progress_is_plain_lines_on_stderr(capsys) -> None:
    out = Output(as_json=False, spinner_after=0.0)
    assert out._bars is None  # no display at all
    out.progress("starting Spark")
    out.emit({}, "the result")
    assert capsys.readouterr() == ("the result\n", "starting Spark\n")


def times(body: Any, path: str = "") -> list[tuple[str, Any]]:
    """(where, value) of every time-named key at any depth."""
    if isinstance(body, dict):
        found = [(f"{path}.{k}", v) for k, v in body.items() if TIME_KEY.search(k)]
        return found + [t for k, v in body.items() for t in times(v, f"{path}.{k}")]
    if isinstance(body, list):
        return [t for i, v in enumerate(body) for t in times(v, f"{path}[{i}]")]
    return []


JSON_COMMANDS = [
    ["checkpoints", "list"],
    ["checkpoints", "show", "2"],
    ["stats"],
    ["quarantine", "list"],
    ["gc", "--dry-run"],
    ["verify", "--integrity-only"],
    ["lineage", "payments", "--downstream"],
    ["checkpoints", "show", "99"],  # an error: the same shape
]


@pytest.mark.parametrize("argv", JSON_COMMANDS, ids=" ".join)
def test_every_json_has_a_version_and_iso_8601_utc_times(payments, cli: Cli, argv) -> None:
    pending = payments.trigger()  # an aborted checkpoint too: its trigger and end times
    payments.coordinator.abort(pending.checkpoint_id, CheckpointFailureReason.DECLINED, "no")
    run = cli("--json", *argv)
    body = run.json
    assert body["json_version"] == 2, body
    for where, value in times(body):
        if value is None:  # not known
            continue
        assert isinstance(value, str), (where, value)
        parsed = datetime.fromisoformat(value)
        assert parsed.utcoffset() == timedelta(0) and value.endswith("+00:00"), (where, value)
    if argv[0] == "checkpoints" and argv[1] == "list":
        assert len([t for t in times(body) if t[1]]) >= 2 * 4  # trigger and end of each


def test_json_times_are_the_stored_times(payments, cli: Cli) -> None:
    stored = payments.coordinator.stats.history(None)[-1]
    (shown,) = cli("--json", "checkpoints", "list", "--limit", "1").json["checkpoints"]
    got = datetime.fromisoformat(shown["trigger_time"]).timestamp()
    assert abs(got - stored.trigger_time) < 0.001


def test_stats_json_labels_its_minimum_average_and_maximum(payments, cli: Cli) -> None:
    body = cli("stats", "--json").json
    for key in ("duration_s", "state_size"):
        assert set(body[key]) == {"min", "avg", "max"}, body
        assert body[key]["min"] <= body[key]["avg"] <= body[key]["max"]


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    """`batchpoint --json checkpoints show 2 | head -1`: the pipe closes before the
    command writes; it stops quietly, as other tools in a pipe do."""
    root = (tmp_path / "store").as_uri()
    payments_driver(root, epochs=3)
    environment = {**os.environ, "BATCHPOINT_ROOT": root}
    command = [
        str(Path(sys.executable).parent / "batchpoint"),
        "--json",
        "checkpoints",
        "show",
        "2",
    ]
    with subprocess.Popen(
        command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as child:
        assert child.stdout is not None and child.stderr is not None
        child.stdout.close()  # before it has imported anything: its first write fails
        err = child.stderr.read().decode()
        assert child.wait(timeout=120) == 2
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
