"""A BATCHPOINT_* variable that nothing reads (a misspelled one) is warned of with the
setting meant, and every name the project reads is a setting or a declared non-setting."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from batchpoint.settings import KNOWN_VARIABLES, Settings, variable_names
from batchpoint.settings.variable_names import NOT_SETTINGS, PREFIX, S3_PREFIX

PROJECT = Path(__file__).resolve().parents[1]
# Built, not written out, so the scan below does not find the misspelling in this file.
MISSPELLED = PREFIX + "CHANGLOG_MIN_BYTES"


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if no warning had been given in this process yet."""
    monkeypatch.setattr(variable_names, "_warned", set())


def test_a_misspelled_variable_is_warned_of_once_with_the_setting_meant(
    tmp_path, caplog, fresh_process
):
    env = {
        "BATCHPOINT_ROOT": (tmp_path / "root").as_uri(),
        MISSPELLED: "1MiB",
        PREFIX + "FAULT_MODE": "raise",  # read, but not a setting
        S3_PREFIX + "MAX_ATTEMPTS": "3",  # a store option, checked by the store
    }
    with caplog.at_level(logging.WARNING, logger=variable_names.__name__):
        settings = Settings.from_env(env)
        Settings.from_env(env)
    warned = [r.getMessage() for r in caplog.records]
    assert warned == [
        f"{MISSPELLED} is not a batchpoint setting and is ignored; did you mean "
        "BATCHPOINT_CHANGELOG_MIN_BYTES? (README: Configuration)"
    ]
    assert "1MiB" not in warned[0]  # a value may be a credential
    # Ignored indeed: the setting it meant keeps its default.
    assert (
        settings.checkpoint.changelog_min_bytes
        == Settings.from_env(
            {"BATCHPOINT_ROOT": env["BATCHPOINT_ROOT"]}
        ).checkpoint.changelog_min_bytes
    )


def test_names_are_matched_in_any_case_as_the_settings_read_them(tmp_path, caplog, fresh_process):
    env = {
        "BATCHPOINT_ROOT": (tmp_path / "root").as_uri(),
        "BATCHPOINT_Num_Retained": "7",  # read: the settings take any case
        "batchpoint_num_retain": "7",  # a misspelling in lower case
    }
    with caplog.at_level(logging.WARNING, logger=variable_names.__name__):
        assert Settings.from_env(env).checkpoint.num_retained == 7
    (warned,) = [r.getMessage() for r in caplog.records]
    assert warned.startswith("batchpoint_num_retain is not a batchpoint setting")
    assert "did you mean BATCHPOINT_NUM_RETAINED?" in warned


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("TIMEOUT", "CHECKPOINT_TIMEOUT"),  # the tail of one setting
        ("NUM_RETAIN", "NUM_RETAINED"),
        ("QUALITYGATE", "QUALITY_GATE"),
        ("SPARK_REMOTE_URL", "SPARK_REMOTE"),
        ("ZZZ", None),  # the shared prefix alone makes nothing close
        ("INTERVAL", None),  # the tail of two settings: neither is guessed
    ],
)
def test_the_setting_meant_is_named_only_when_one_is_close(given, meant):
    message = variable_names.unknown_variable_message(PREFIX + given, KNOWN_VARIABLES)
    if meant is None:
        assert "did you mean" not in message
    else:
        assert f"did you mean {PREFIX}{meant}?" in message


LIST_CHECKPOINTS = ("--pipeline", "payments", "checkpoints", "list", "--json")


def test_the_cli_prints_the_warning_and_goes_on(tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(PREFIX)},
        "PYTHONPATH": os.pathsep.join([str(PROJECT), str(PROJECT / "include")]),
        MISSPELLED: "1MiB",
    }
    root = (tmp_path / "r").as_uri()
    run = subprocess.run(
        [sys.executable, "-m", "batchpoint", "--root", root, *LIST_CHECKPOINTS],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f"{MISSPELLED} is not a batchpoint setting" in run.stderr
    assert "did you mean BATCHPOINT_CHANGELOG_MIN_BYTES?" in run.stderr
    assert run.stderr.count(MISSPELLED) == 1, run.stderr
    # It went on: the root was read (a fresh one holds no pipeline) and stdout is JSON.
    assert "no pipeline 'payments'" in json.loads(run.stdout)["error"]


# A name as code spells it: not inside a longer one (AIRFLOW_CONN_BATCHPOINT_STORAGE is an
# Airflow connection), and not a prefix being joined (f"BATCHPOINT_{name}").
_NAME = re.compile(r"(?<![A-Za-z0-9_])BATCHPOINT_[A-Z0-9_]*[A-Z0-9](?![A-Za-z0-9_{])")
_SCANNED = ("include", "spark_jobs", "dags", "plugins", "demo", "devstack", "tests", "bench")


def test_every_name_the_project_reads_is_a_setting_or_declared_not_one():
    files = [p for d in _SCANNED for p in (PROJECT / d).rglob("*.py")]
    files += [PROJECT / name for name in ("dev", "docker-compose.yaml")]
    undeclared = {
        f"{name} ({path.relative_to(PROJECT)})"
        for path in files
        for name in _NAME.findall(path.read_text())
        if not name.startswith(S3_PREFIX) and name not in KNOWN_VARIABLES | NOT_SETTINGS
    }
    assert not undeclared, sorted(undeclared)
    assert not NOT_SETTINGS & KNOWN_VARIABLES
