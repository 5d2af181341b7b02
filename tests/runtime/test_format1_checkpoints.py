"""Checkpoints written in an older state format still restore, rescale and pass the gate:
format 1 (`_key_group` from a Python BLAKE2B hash) and format 2 (Spark's xxhash64), both
placing keys otherwise than format 3 (Spark's Murmur3 hash, bits reversed).

Each fixture is a real store written by the last writer of its format, batchpoint 0281aec
(format 1) and 69d6cc6 (format 2): one completed payments checkpoint over input epoch 0,
with its source files."""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from batchpoint.runtime.restore import restore_checkpoint
from batchpoint.state.format import FORMAT_VERSION, StateHandle
from support.payments import PaymentsRun

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DATA = Path(__file__).parent.parent / "data"


@pytest.fixture(params=[1, 2], ids=["format-1", "format-2"])
def format1_store(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A store whose checkpoint 1 is in state format `request.param`."""
    root = tmp_path / f"format{request.param}"
    with tarfile.open(DATA / f"payments-format{request.param}.tar.gz") as archive:
        archive.extractall(root, filter="data")
    return root


def _old_format(root: Path) -> int:
    return int(root.name.removeprefix("format"))


def _formats(run: PaymentsRun, checkpoint_id: int) -> set[int]:
    completed = run.runner.driver.coordinator.completed.get(checkpoint_id)
    return {StateHandle.coerce(h).format for h in completed.handles if h.name.startswith("state-")}


def test_new_epochs_continue_from_a_format_1_checkpoint(
    make_run: Callable[..., PaymentsRun], format1_store: Path
) -> None:
    run = make_run(copy_from=format1_store)
    assert _formats(run, 1) == {_old_format(format1_store)}
    for epoch in (1, 2):
        result = run.epoch(epoch)
        assert result.outcome is not None and result.outcome.completed is not None
        run.assert_matches_reference()
    assert _formats(run, 3) == {FORMAT_VERSION} == {3}


def test_a_format_1_checkpoint_restores_at_a_new_parallelism(
    make_run: Callable[..., PaymentsRun], format1_store: Path
) -> None:
    run = make_run(copy_from=format1_store)
    restore_checkpoint(run.runner.driver, 1, {"dedup": 3, "balances": 3})
    result = run.epoch(1)
    assert sum(t.operator == "balances" for t in result.pending.expected_tasks) == 3
    run.assert_matches_reference()


def test_the_gate_samples_a_format_1_checkpoint_with_its_own_hash(
    make_run: Callable[..., PaymentsRun], format1_store: Path, make_gate: Callable[..., Any]
) -> None:
    run = make_run(copy_from=format1_store)
    # The recomputation places source keys in key groups; with the new hash it would
    # sample other keys than the state's stored groups and every one would differ.
    report = make_gate(run, skip_suites=["payments_balances", "payments_seen"]).run(dry_run=True)
    (candidate,) = report.candidates
    assert candidate.passed, candidate.findings
    for state, check in (
        ("balances/balances", "balance-recompute"),
        ("dedup/seen", "seen-recompute"),
    ):
        details = candidate.checks[state][check]
        assert details["keys_compared"] > 0 and details["keys_differing"] == 0
