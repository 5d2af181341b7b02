"""Fault injection itself: a fault that must fire exactly once across attempts."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from batchpoint.runtime.faults import (
    ENV,
    MODE_ENV,
    ONCE_ENV,
    InjectedKill,
    maybe_fail,
    spark_task_fault,
)


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


def test_the_spark_task_hook_is_only_made_for_the_named_operator(monkeypatch) -> None:
    monkeypatch.setenv(ENV, "balances:spark-task:3")
    assert spark_task_fault("dedup", 3) is None
    assert spark_task_fault("balances", 4) is None
    hook = spark_task_fault("balances", 3)
    assert hook is not None
    # Outside a Spark task (no TaskContext) it is a first attempt: it fails.
    with pytest.raises(RuntimeError, match="injected Spark task failure in balances subtask 1"):
        hook(1, "t7", [])
    monkeypatch.setenv(ENV, "balances:nowhere")
    with pytest.raises(ValueError, match="expected <operator>:<point>"):
        spark_task_fault("balances", 3)
