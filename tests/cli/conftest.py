"""Fixtures of the CLI tests: a fresh root (`root`), the payments pipeline on it with three
fake completed epochs (`payments`), and `cli` to run the command."""

from __future__ import annotations

import pytest

from batchpoint.runtime.driver import PipelineDriver
from support.cli import Cli, fresh_root, payments_driver


@pytest.fixture(autouse=True)
def plain_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain text, whatever the environment running the tests sets: rich draws when one
    of these says the output is a terminal (tests/cli/test_terminal_output.py sets them)."""
    for name in ("TTY_COMPATIBLE", "TTY_INTERACTIVE", "FORCE_COLOR", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def root(tmp_path, monkeypatch) -> str:
    return fresh_root(tmp_path, monkeypatch)


@pytest.fixture
def payments(root) -> PipelineDriver:
    return payments_driver(root, epochs=3)


@pytest.fixture
def cli(capsys) -> Cli:
    return Cli(capsys)
