"""The deploy model checker in the suite (issue 36, invariants 15-18): fixed seeds of
tests/support/deploy_model, each a scripted sequence of code changes and user steps on
the real engine (Spark, the local store; one on SeaweedFS) beside the plain-Python
reference of every state and sink. Two of the scripts (support/deploy_model/scripts.py)
run here, a few minutes; between them all the scripts deploy every kind of change the
generator makes and take every step it takes (`bench/deploy_check.py --scripted`). A
sequence fails at its first violation, with the steps that led to it.

bench/deploy_check.py runs the same sequences from many seeds; a seed that finds a
defect there is pinned here as a script once the defect is understood."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from batchpoint.storage import StoreRef
from support.deploy_model.changes import KINDS
from support.deploy_model.drive import ACTIONS, Options, SequenceResult, run_sequence
from support.deploy_model.pinned import run_pinned
from support.deploy_model.scripts import SCRIPTS, SUITE
from support.deploy_model.sequence import Sequence
from support.deploy_model.world import World

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: Pinned shortest sequences of the defects the checker found that no regression test
#: of issue 36's rows covers (the rest run from `bench/deploy_check.py --pinned`).
PINNED_HERE = (
    "plan-after-an-allowing-restore",
    "restore-plan-after-an-allowing-restore",
    "incomplete-migrate-after-a-restore",
    "max-parallelism-refused-twice",
    "narrowing-on-a-version-1-base",
    "tightening-on-a-version-1-base",
    "sink-mode-back-to-append-after-gc",
    "sink-shown-beside-a-newer-record",
    "table-sink-renamed-after-a-restore-took-it-back",
    "restore-latest-past-a-newer-record-to-a-new-sink",
    "sink-shown-by-its-name-at-the-head-after-a-restore",
)


def _run(spark: Any, ref: StoreRef, seed: int, script: tuple[str, ...]) -> SequenceResult:
    deploys = sum(step in KINDS for step in script)
    result = run_sequence(World(spark, ref), seed, Options(deploys=deploys, script=script))
    assert not result.tally.violations, "\n".join(
        [f"seed {seed}: {result.tally.violations[0]}", *result.tally.log]
    )
    return result


def test_the_scripts_cover_every_kind_of_change_and_step() -> None:
    scripted = {step for _, script in SCRIPTS.values() for step in script}
    assert set(KINDS) - scripted == set()
    assert set(ACTIONS) - {"epoch"} - scripted == set()


@pytest.mark.parametrize("case", SUITE)
def test_a_scripted_deploy_sequence_keeps_every_state_and_sink(
    spark: Any, tmp_path: Path, case: str
) -> None:
    seed, script = SCRIPTS[case]
    result = _run(spark, StoreRef.of((tmp_path / "store").as_uri()), seed, script)
    drawn = set(result.tally.changes) | set(result.tally.actions)
    assert {s for s in script if s in KINDS or s in ACTIONS} <= drawn, result.tally.log


def test_a_deploy_sequence_on_seaweedfs(
    spark: Any,
    seaweed: Any,
    make_s3_store: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An S3 root names its table catalog (a SQLite file here, as a deployment's)."""
    monkeypatch.setenv("BATCHPOINT_TABLE_CATALOG", f"sqlite:///{tmp_path / 'catalog.db'}")
    ref = StoreRef.of(make_s3_store().uri, seaweed.storage_options())
    _run(spark, ref, 9, ("rename-op-uid", "add-column", "savepoint", "sink-table", "restore"))


@pytest.mark.parametrize("case", PINNED_HERE)
def test_a_pinned_sequence_keeps_its_invariants(spark: Any, tmp_path: Path, case: str) -> None:
    seq = Sequence(World(spark, StoreRef.of((tmp_path / "store").as_uri())), random.Random(0))
    run_pinned(seq, case)
    assert not seq.tally.violations, "\n".join([str(seq.tally.violations[0]), *seq.tally.log])
