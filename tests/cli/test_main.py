"""The command line as a whole: global options anywhere on the line, `python -m
batchpoint`, help, --version, the one-line error for a command that does not exist (a JSON
object under --json), a bad --root named as the flag, and shell completion."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version

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
    run = cli("--pipeline-ref", "demo.payments:pipeline", "verify")
    assert run.code == 2
    assert run.err == (
        "error: BATCHPOINT_QUALITY_GATE='no_colon': expected 'package.module:attribute'\n"
    )


def test_version_is_the_installed_distributions(cli):
    run = cli("--version")
    assert run.code == 0 and run.out == f"batchpoint {version('batchpoint')}\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # found by argparse, before it knows --json was given
        (["--json", "nonsense"], "argument COMMAND: invalid choice"),
        (["checkpoints", "list", "--limit", "-1", "--json"], "argument --limit: must be 0"),
        # found by the command
        (["--json", "--pipeline", "nope", "stats"], "no pipeline 'nope'"),
        (["--json", "--root", "/no/scheme", "stats"], "argument --root: '/no/scheme': has no"),
    ],
)
def test_under_json_every_error_is_a_json_object(payments, cli, argv, message):
    run = cli(*argv)
    assert run.code == 2 and run.err == ""
    assert list(run.json) == ["json_version", "error"] and run.json["json_version"] == 2
    assert run.json["error"].startswith(message)


def test_a_bad_setting_under_json_is_a_json_object_too(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHPOINT_ROOT", "s3a://bucket/prefix")
    run = cli("stats", "--json")
    assert run.code == 2 and run.err == ""
    assert run.json["error"].startswith("BATCHPOINT_ROOT='s3a://bucket/prefix': use s3://")


def test_an_operand_after_a_double_dash_does_not_ask_for_json(payments, cli):
    run = cli("--pipeline", "nope", "stats", "--", "--json")
    assert run.code == 2 and run.out == "" and run.err.startswith("error: ")


@pytest.mark.parametrize("at", ["before", "after"])
def test_a_bad_root_flag_is_reported_as_the_flag(payments, cli, root, tmp_path, at):
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    flag = ["--root", a_file.as_uri()]
    run = cli(*([*flag, "stats"] if at == "before" else ["stats", *flag]))
    assert run.code == 2
    assert run.err.startswith(f"error: argument --root: '{a_file.as_uri()}': {a_file} exists")
    assert "BATCHPOINT_ROOT" not in run.err


def test_the_environments_root_is_still_named_as_the_variable(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHPOINT_ROOT", "/no/scheme")
    run = cli("stats")
    assert run.code == 2 and run.err.startswith("error: BATCHPOINT_ROOT='/no/scheme': has no")


def _complete(line: str, tmp_path) -> list[str]:
    """What the shell's completion hook gets for `line` from the installed command."""
    script = shutil.which("batchpoint", path=os.path.dirname(sys.executable))
    assert script, "the batchpoint console script is not installed in this environment"
    out = tmp_path / "completions"
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
    }
    done = subprocess.run([script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [word.strip() for word in out.read_text().split("\n")]


def test_the_shell_completes_commands_and_options(tmp_path):
    assert _complete("batchpoint chec", tmp_path) == ["checkpoints"]
    assert {"list", "show"} <= set(_complete("batchpoint checkpoints ", tmp_path))
    assert _complete("batchpoint --ver", tmp_path) == ["--version"]
    assert _complete("batchpoint stats --jso", tmp_path) == ["--json"]


def test_global_completion_finds_the_marker():
    script = shutil.which("batchpoint", path=os.path.dirname(sys.executable))
    done = subprocess.run(
        [sys.executable, "-m", "argcomplete._check_console_script", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_a_command_whose_optional_package_is_missing_names_the_extra(payments, root):
    """An install without the spark extra (pyspark made unimportable): `verify` with the
    pipeline's code, whose gate checks files in Spark tasks, says which extra to install,
    where the import's traceback came out."""
    blocked = "import sys; sys.modules['pyspark'] = None; from batchpoint.cli.main import main; "
    verify = ["verify", "1", "--pipeline-ref", "demo.payments:pipeline"]
    done = subprocess.run(
        [sys.executable, "-c", blocked + "sys.exit(main())", *verify],
        capture_output=True,
        text=True,
        env={**os.environ, "BATCHPOINT_ROOT": root},
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: this command needs pyspark, which is not installed here: install "
        "batchpoint[spark] (pip install 'batchpoint[spark]')"
    )


def test_ctrl_c_is_one_line_and_exit_130(payments, cli, monkeypatch):
    """A reviewer's finding: Ctrl-C printed a KeyboardInterrupt traceback."""
    from batchpoint.cli import checkpoints

    def interrupted(cmd):
        """List the checkpoints (stopped by Ctrl-C at once, here)."""
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoints, "cmd_list", interrupted)
    run = cli("checkpoints", "list")
    assert run.code == 130 and run.err == "error: interrupted\n", run.err
    run = cli("--json", "checkpoints", "list")
    assert run.code == 130 and json.loads(run.out)["error"] == "interrupted"
