"""Fault injection itself: a fault that must fire exactly once across attempts."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from batchpoint.runtime.faults import ENV, MODE_ENV, ONCE_ENV, InjectedKill, maybe_fail


def _attempt(marker: str) -> bool:
    import os

    os.environ.update({ENV: "balances:after-snapshot:3", MODE_ENV: "raise", ONCE_ENV: marker})
    try:
        maybe_fail("balances", "after-snapshot", 3)
    except InjectedKill:
        return True
    return False


def test_a_once_fault_kills_the_first_attempt_only(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ENV, "balances:after-snapshot:3")
    monkeypatch.setenv(MODE_ENV, "raise")
    monkeypatch.setenv(ONCE_ENV, str(tmp_path / "fired"))
    maybe_fail("balances", "after-snapshot", 4)  # another checkpoint: does not count
    maybe_fail("dedup", "after-snapshot", 3)
    with pytest.raises(InjectedKill, match="balances dies at after-snapshot of 3"):
        maybe_fail("balances", "after-snapshot", 3)
    maybe_fail("balances", "after-snapshot", 3)  # the retry lives


def test_of_concurrent_attempts_in_processes_exactly_one_dies(tmp_path: Path) -> None:
    marker = str(tmp_path / "fired")
    with ProcessPoolExecutor(2) as pool:
        died = list(pool.map(_attempt, [marker] * 6))
    assert died.count(True) == 1


def test_without_once_every_attempt_dies(monkeypatch) -> None:
    monkeypatch.setenv(ENV, "balances:after-snapshot")
    monkeypatch.setenv(MODE_ENV, "raise")
    monkeypatch.delenv(ONCE_ENV, raising=False)
    for _ in range(2):
        with pytest.raises(InjectedKill):
            maybe_fail("balances", "after-snapshot", 7)
