"""The payments pipeline with its balances published as an Iceberg or a Delta table, through real
Spark epochs and the faults around a table commit: the sink task killed before and
after its pre-commit, the finalize killed before and after the table commit, a repeated notify,
an aborted checkpoint, then a restore to an older checkpoint and new epochs. After it
all, the table as of every completed checkpoint equals the pandas reference as of that
checkpoint's barrier, and its history holds one commit per completed checkpoint (and
one rewind for the restore)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from batchpoint.ops.maintenance import gc
from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointStatus
from batchpoint.runtime.faults import InjectedKill
from batchpoint.runtime.restore import restore_checkpoint
from batchpoint.storage import StoreRef
from batchpoint.tables.delta import DeltaSinkTable
from batchpoint.tables.iceberg import IcebergSinkTable
from batchpoint.tables.service import sink_table
from batchpoint.tables.sync import SinkTableAdapter
from demo.payments import BALANCES_TABLE, SOURCE_ROOT
from demo.payments_reference import compute_reference
from support.payments import PaymentsRun

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _faults_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHPOINT_FAULT_MODE", "raise")


def _expected(run: PaymentsRun, checkpoint_id: int) -> pd.DataFrame:
    outcome = run.runner.driver.coordinator.get_outcome(checkpoint_id)
    assert outcome is not None
    return compute_reference(
        run.store, SOURCE_ROOT, upto=outcome.pending.barrier["events"]
    ).balances


def _as_of(table: SinkTableAdapter, checkpoint_id: int, columns: list[str]) -> pd.DataFrame:
    frame = table.read(checkpoint_id).to_pandas()
    return frame.sort_values("account_id", ignore_index=True)[columns]


def _kill_commit(
    monkeypatch: pytest.MonkeyPatch, when: str, checkpoint_id: int, table_format: str
) -> None:
    """Kill the finalize task just before or just after the table commit of a checkpoint
    (the real commit wrapped: neither format can be told to die half-way)."""
    adapter = DeltaSinkTable if table_format == "delta" else IcebergSinkTable
    real = adapter.commit

    def commit(self: Any, table: Any, step: Any, generation: int) -> None:
        if step.checkpoint_id == checkpoint_id and when == "before":
            raise InjectedKill(f"killed before the table commit of {checkpoint_id}")
        real(self, table, step, generation)
        if step.checkpoint_id == checkpoint_id and when == "after":
            raise InjectedKill(f"killed after the table commit of {checkpoint_id}")

    monkeypatch.setattr(adapter, "commit", commit)


def _root(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> Path | StoreRef:
    if backend == "local":
        return tmp_path / "store"
    seaweed = request.getfixturevalue("seaweed")
    fresh = request.getfixturevalue("make_s3_store")()  # a fresh prefix of the test's
    return StoreRef.of(fresh.uri, seaweed.storage_options())


# Iceberg on S3 needs a shared catalog (tests/tables and the stack runs cover it).
@pytest.mark.parametrize(
    ("table_format", "backend"),
    [("iceberg", "local"), ("delta", "local"), pytest.param("delta", "s3", marks=pytest.mark.s3)],
)
def test_the_table_follows_every_checkpoint_through_faults_and_a_restore(
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    table_format: str,
    backend: str,
) -> None:
    run = PaymentsRun.on(
        spark,
        _root(request, tmp_path, backend),
        balances_table=BALANCES_TABLE,
        table_format=table_format,
        num_retained=10,
    )
    driver = run.runner.driver
    completed: list[int] = []

    def finish(cid: int) -> None:
        outcome, _ = run.runner.complete(cid)
        assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
        completed.append(cid)

    # 1: a plain epoch creates the table.
    completed.append(run.epoch(0).checkpoint_id)

    # 2 and 3: the sink task killed before its pre-commit (its snapshot), then after it
    # (files staged, no ack); each retried.
    for epoch, point in ((1, "before-snapshot"), (2, "after-snapshot")):
        run.add_input(epoch)
        cid = driver.trigger().checkpoint_id
        monkeypatch.setenv("BATCHPOINT_FAULT", f"balances_table:{point}:{cid}")
        with pytest.raises(InjectedKill):
            run.runner.run_operators(cid, attempt="first")
        monkeypatch.delenv("BATCHPOINT_FAULT")
        run.runner.run_operators(cid, attempt="retry")
        finish(cid)

    # 4 and 5: the finalize killed before, then after, the table commit; its retry. The
    # last is then notified once more, as a repeated notify would.
    for epoch, when in ((3, "before"), (4, "after")):
        run.add_input(epoch)
        cid = driver.trigger().checkpoint_id
        run.runner.run_operators(cid)
        with monkeypatch.context() as patch:
            _kill_commit(patch, when, cid, table_format)
            with pytest.raises(InjectedKill):
                run.runner.complete(cid)
        finish(cid)
    assert driver.notify_complete(cid) == []

    # 6: aborted after its sink staged its files: never in the table.
    run.add_input(5)
    aborted = driver.trigger().checkpoint_id
    run.runner.run_operators(aborted)
    driver.coordinator.abort(aborted, CheckpointFailureReason.DECLINED, "test")
    driver.notify_complete(aborted)

    table = sink_table(run.store_ref, "payments", "balances_table", driver.pipeline.sinks[
        "balances_table"].table)  # fmt: skip
    history = table.history()
    assert [c.checkpoint_id for c in history] == completed  # one commit each, in order
    assert {c.operation for c in history} == {"publish"}

    # Restore to the second checkpoint; a new epoch continues from it.
    target = completed[1]
    restore_checkpoint(driver, target)
    completed.append(run.epoch(6).checkpoint_id)
    history = table.history()
    tail = [(c.checkpoint_id, c.operation) for c in history][-2:]
    assert tail == [(target, "rewind"), (completed[-1], "publish")]
    assert aborted not in {c.checkpoint_id for c in history}

    columns = list(_expected(run, completed[0]).columns)
    for cid in completed:
        got = _as_of(table, cid, columns)
        pd.testing.assert_frame_equal(got, _expected(run, cid), check_dtype=False)
        print(f"as of checkpoint {cid}: {len(got)} rows equal to the reference")
    print("commits:", [(c.checkpoint_id, c.operation, c.generation) for c in history])
    run.assert_matches_reference()  # the state and the manifests agree as well
    now = table.read().to_pandas().sort_values("account_id", ignore_index=True)[columns]
    pd.testing.assert_frame_equal(now, _expected(run, completed[-1]), check_dtype=False)

    # GC drops what no retained checkpoint needs; it expires their table snapshots
    # before deleting their files, so time travel offers only what it can read.
    gc(driver.coordinator, driver.coordinator.store)
    kept = {c.checkpoint_id for c in table.history()}
    manifest = driver.sinks.manifest("balances_table")
    assert manifest is not None and kept == set(manifest.epochs)
    for cid in kept:
        pd.testing.assert_frame_equal(
            _as_of(table, cid, columns), _expected(run, cid), check_dtype=False
        )
