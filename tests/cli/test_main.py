"""The command line as a whole: global options anywhere on the line, `python -m
batchpoint`, help, and the one-line error for a command that does not exist."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from batchpoint.cli.main import build_parser


@pytest.mark.parametrize(
    "argv",
    [
        ["--json", "--pipeline", "payments", "checkpoints", "list"],
        ["checkpoints", "--json", "list", "--pipeline", "payments"],
        ["checkpoints", "list", "--json", "--pipeline", "payments"],
        ["--pipeline", "payments", "checkpoints", "list", "--json"],
    ],
)
def test_global_options_go_anywhere(payments, cli, argv):
    run = cli(*argv)
    assert run.code == 0 and run.json["pipeline"] == "payments"


def test_a_root_given_anywhere_wins_over_the_environment(payments, cli, root, monkeypatch):
    monkeypatch.setenv("BATCHPOINT_ROOT", "file:///nonexistent/elsewhere")
    assert cli("stats", "--root", root, "--json").json["completed"] == 3
    assert cli("--root", root, "stats", "--json").json["completed"] == 3


def test_every_command_is_listed_in_the_help():
    text = build_parser().format_help()
    for name in ("checkpoints", "stats", "verify", "quarantine", "gc", "reset"):
        assert name in text
    assert "savepoint" in text and "restore" in text


def test_an_unknown_command_is_one_error_line(cli):
    run = cli("nonsense")
    assert run.code == 2 and run.err.startswith("error: argument COMMAND: invalid choice")
    assert len(run.err.strip().splitlines()) == 1


def test_python_m_batchpoint_runs_the_command(payments, root):
    env = {**os.environ, "BATCHPOINT_ROOT": root}
    done = subprocess.run(
        [sys.executable, "-m", "batchpoint", "stats", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert '"completed": 3' in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "batchpoint", "--pipeline", "nope", "stats"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: no pipeline 'nope'")


def test_the_gate_variable_is_checked_as_the_dags_check_it(payments, cli, monkeypatch):
    monkeypatch.setenv("BATCHPOINT_QUALITY_GATE", "no_colon")
    run = cli("--pipeline-ref", "batchpoint.demo.payments:pipeline", "verify")
    assert run.code == 2
    assert run.err == (
        "error: BATCHPOINT_QUALITY_GATE='no_colon': expected 'package.module:attribute'\n"
    )
