"""Exactly-once under failures, in the manner of Flink's FailingSource/ValidatingSink
ITCases: run the payments pipeline for several epochs, kill or fail it at each point in
turn, recover the way a scheduler would (retry the task, or run the next epoch), and
check that the state and the published sinks equal the pandas reference.

A killed task is simulated with InjectedKill (BATCHPOINT_FAULT_MODE=raise): it unwinds
the task without any of its error handling, like SIGKILL, but keeps the Spark session.
One test kills a real spark_jobs process instead (tests/jobs/test_run_operator.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from batchpoint.ops.maintenance import gc
from batchpoint.protocol.checkpoint import (
    AckRecord,
    CheckpointFailureReason,
    CheckpointStatus,
    TaskAcknowledgeResult,
)
from batchpoint.protocol.savepoints import SavepointLocation, check_savepoint
from batchpoint.runtime.faults import InjectedFaults, InjectedKill
from batchpoint.runtime.restore import restore_checkpoint
from batchpoint.runtime.streams import reads_channel
from support.payments import PaymentsRun

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _faults_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHPOINT_FAULT_MODE", "raise")


def _data_files(run: PaymentsRun, checkpoint_id: int) -> set[str]:
    layout = run.runner.driver.coordinator.layout
    return {i.key for i in run.store.list(layout.data_prefix(checkpoint_id))}


def _referenced(run: PaymentsRun, checkpoint_id: int) -> set[str]:
    """The files of the checkpoint's own folder it references (not those it shares with
    its base: they live in the base's folder)."""
    c = run.runner.driver.coordinator
    own = c.layout.data_prefix(checkpoint_id)
    return {
        h.path for h in c.completed.get(checkpoint_id).durable_handles if h.path.startswith(own)
    }


@pytest.mark.parametrize(
    ("operator", "point"),
    [
        ("dedup", "before-snapshot"),
        ("balances", "after-snapshot"),
        ("alerts", "after-ack"),
    ],
)
def test_task_killed_then_retried(
    make_run: Callable[..., PaymentsRun],
    after_first_epoch: Path,
    monkeypatch: pytest.MonkeyPatch,
    operator: str,
    point: str,
) -> None:
    run = make_run(copy_from=after_first_epoch)
    run.add_input(1)
    pending = run.runner.driver.trigger()
    cid = pending.checkpoint_id
    monkeypatch.setenv("BATCHPOINT_FAULT", f"{operator}:{point}:{cid}")
    with pytest.raises(InjectedKill):
        run.runner.run_operators(cid, attempt="first")
    assert run.runner.driver.coordinator.status(cid) is CheckpointStatus.PENDING

    monkeypatch.delenv("BATCHPOINT_FAULT")
    reports = run.runner.run_operators(cid, attempt="retry")  # what an Airflow retry does
    outcome, _ = run.runner.complete(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    by_op = {r.operator: r for r in reports}
    if point == "after-ack":
        assert by_op[operator].skipped  # its acks survived the kill: nothing to redo
    # files the killed attempt wrote but never acknowledged are garbage, and only them
    leftovers = _data_files(run, cid) - _referenced(run, cid)
    gc(run.runner.driver.coordinator, run.runner.driver.coordinator.store)
    assert _data_files(run, cid) == _referenced(run, cid)
    if point == "after-snapshot":
        assert any("/first/" in key for key in leftovers)

    run.epoch(2)
    run.assert_matches_reference()


def test_a_runner_without_hooks_injects_no_fault(
    make_run: Callable[..., PaymentsRun],
    after_first_epoch: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """BATCHPOINT_FAULT reaches an attempt only through hooks that ask for it: the
    tests' runner dies where it names, a production runner (no hooks) runs on."""
    from batchpoint.runtime.runner import OperatorRunner

    run = make_run(copy_from=after_first_epoch)
    run.add_input(1)
    cid = run.runner.driver.trigger().checkpoint_id
    monkeypatch.setenv("BATCHPOINT_FAULT", "dedup:before-snapshot")
    with pytest.raises(InjectedKill):
        run.runner.operator_runner(attempt="hooked").run(cid, "dedup")
    epoch = run.runner
    plain = OperatorRunner(epoch.pipeline, epoch.store_ref, epoch.spark, config=epoch.config)
    assert plain.hooks is None
    report = plain.run(cid, "dedup")
    assert set(report.results.values()) == {TaskAcknowledgeResult.SUCCESS}


def test_duplicate_attempt_learns_duplicate_and_removes_its_files(
    make_run: Callable[..., PaymentsRun], after_first_epoch: Path
) -> None:
    """Two attempts of balances run at once (a zombie after a lost heartbeat, or Spark
    speculation at the job level): the winner acknowledges between the zombie's snapshot
    and its ack, so every zombie ack is DUPLICATE and its files go."""
    run = make_run(copy_from=after_first_epoch)
    run.add_input(1)
    cid = run.runner.driver.trigger().checkpoint_id
    run.runner.operator_runner(attempt="up").run(cid, "dedup")
    winner_files: set[str] = set()

    class Interleave(InjectedFaults):
        """The zombie's hooks: at its after-snapshot point, the winner runs to its acks."""

        def at(self, point: str, operator: str, checkpoint_id: int) -> None:
            if (operator, point) == ("balances", "after-snapshot") and not winner_files:
                run.runner.operator_runner(attempt="winner").run(cid, "balances")
                winner_files.update(_data_files(run, cid))
            super().at(point, operator, checkpoint_id)

    zombie = run.runner.operator_runner(attempt="zombie", hooks=Interleave()).run(cid, "balances")
    assert set(zombie.results.values()) == {TaskAcknowledgeResult.DUPLICATE}
    assert not any("/zombie/" in key for key in _data_files(run, cid))
    assert any("/winner/" in key for key in winner_files)
    run.runner.run_operators(cid)
    outcome, _ = run.runner.complete(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    run.epoch(2)
    run.assert_matches_reference()


def test_spark_task_failure_is_retried_by_spark(
    make_run: Callable[..., PaymentsRun],
    after_first_epoch: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = make_run(copy_from=after_first_epoch)
    run.add_input(1)
    cid = run.runner.driver.trigger().checkpoint_id
    monkeypatch.setenv("BATCHPOINT_FAULT", f"balances:spark-task:{cid}")
    run.runner.run_operators(cid)
    outcome, _ = run.runner.complete(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    # every subtask's files come from the retried Spark attempt; the first attempt's
    # uploads were deleted by the failing task itself or are unreferenced garbage
    gc(run.runner.driver.coordinator, run.runner.driver.coordinator.store)
    assert _data_files(run, cid) == _referenced(run, cid)
    monkeypatch.delenv("BATCHPOINT_FAULT")
    run.epoch(2)
    run.assert_matches_reference()


def test_decline_aborts_and_the_next_epoch_catches_up(
    make_run: Callable[..., PaymentsRun], after_first_epoch: Path
) -> None:
    from batchpoint.runtime.runner import OperatorFailed

    run = make_run(copy_from=after_first_epoch)
    published_before = run.runner.driver.sinks.manifest("balances_table")
    run.add_input(1)
    # a record without its key: dedup must decline, naming the file
    bad = "sources/payments/p0/e00001-f99.jsonl"
    run.store.put(bad, b'{"account_id": "a", "amount": 1, "ts": 1}\n')
    cid = run.runner.driver.trigger().checkpoint_id
    with pytest.raises(OperatorFailed, match=r"e00001-f99\.jsonl.*event_id"):
        run.runner.run_operators(cid)
    outcome = run.runner.driver.coordinator.get_outcome(cid)
    assert outcome is not None and outcome.reason is CheckpointFailureReason.DECLINED
    assert "e00001-f99.jsonl" in outcome.message
    assert run.runner.driver.sinks.manifest("balances_table") == published_before
    assert run.runner.driver.coordinator.head.get().checkpoint_id == cid - 1
    # the producer withdraws the bad file; the aborted epoch's barrier is never used
    # again, and the next epoch reads epochs 1 and 2 together: nothing is lost
    run.store.delete(bad)
    result = run.epoch(2)
    assert result.pending.base_checkpoint_id == cid - 1
    run.assert_matches_reference()


def test_expired_checkpoint_then_next_epoch(
    make_run: Callable[..., PaymentsRun], after_first_epoch: Path
) -> None:
    run = make_run(copy_from=after_first_epoch, timeout=60)
    run.add_input(1)
    cid = run.runner.driver.trigger().checkpoint_id
    run.runner.operator_runner().run(cid, "dedup")  # the rest never runs
    run.clock.advance(61)
    expired = run.runner.driver.coordinator.expire_overdue()
    assert [o.checkpoint_id for o in expired] == [cid]
    assert expired[0].reason is CheckpointFailureReason.EXPIRED
    result = run.epoch(2)
    assert result.pending.base_checkpoint_id == cid - 1
    run.assert_matches_reference()


def test_coordinator_killed_before_publishing(
    make_run: Callable[..., PaymentsRun], after_first_epoch: Path
) -> None:
    run = make_run(copy_from=after_first_epoch)
    run.add_input(1)
    cid = run.runner.driver.trigger().checkpoint_id
    run.runner.run_operators(cid)
    run.runner.driver.coordinator.try_finalize(cid)  # completes, then "dies": no publish
    manifest = run.runner.driver.sinks.manifest("alerts")
    assert manifest is not None and cid not in manifest.epochs
    result = run.epoch(2)  # notify-complete of the next checkpoint publishes the chain
    manifest = run.runner.driver.sinks.manifest("alerts")
    assert manifest is not None
    assert [e.checkpoint_id for e in manifest.chain()][-2:] == [cid, result.checkpoint_id]
    run.assert_matches_reference()


def test_rescaling_4_to_3_to_6(make_run: Callable[..., PaymentsRun]) -> None:
    run = make_run(parallelism=4)
    run.epoch(0)
    run.epoch(1)
    for parallelism in (3, 6):
        restore_checkpoint(run.runner.driver, None, {"dedup": parallelism, "balances": parallelism})
        result = run.epoch(2 if parallelism == 3 else 3)
        assert sum(t.operator == "dedup" for t in result.pending.expected_tasks) == parallelism
        run.assert_matches_reference()


def test_consumers_that_key_alike_read_one_channel_written_once(
    make_run: Callable[..., PaymentsRun], after_first_epoch: Path
) -> None:
    run = make_run(copy_from=after_first_epoch)
    completed = run.runner.driver.coordinator.completed.get(1)
    balances = [h for a in completed.acks if a.task.operator == "balances" for h in a.handles]
    channels = [h for h in balances if h.name.startswith("channel-")]
    # both sinks key balances' output by account_id with max parallelism 128
    assert {h.name for h in channels} == {"channel-balances_table"}
    assert all(h.meta["consumers"] == ["balances_table", "alerts"] for h in channels)
    assert all(reads_channel(h, "alerts") for h in channels)
    assert not any(reads_channel(h, "balances") for h in channels)
    # every file's handle carries its rows' Spark schema: readers start no job for it
    assert all(h.meta.get("spark_schema") for a in completed.acks for h in a.handles)
    # balances_table (no function of its own) stages that channel's files by reference;
    # alerts filters them, so it writes its own
    (table_ack,) = [a for a in completed.acks if a.task.operator == "balances_table"]
    assert {h.path for h in table_ack.handles} == {h.path for h in channels}
    assert all(h.name == "sink" and h.meta["adopted_from"] for h in table_ack.handles)
    assert table_ack.state_size == 0 and table_ack.rows == sum(h.rows for h in channels)
    (alerts_ack,) = [a for a in completed.acks if a.task.operator == "alerts"]
    assert not any(h.meta.get("adopted_from") for h in alerts_ack.handles)
    # and the next epoch, whose two sinks read that one channel, publishes the reference
    run.epoch(1)
    run.assert_matches_reference()


def test_channels_are_collected_once_the_epoch_completes(
    make_run: Callable[..., PaymentsRun], after_first_epoch: Path
) -> None:
    run = make_run(copy_from=after_first_epoch)
    c = run.runner.driver.coordinator
    completed = c.completed.get(1)
    channels = {h.path for h in completed.handles if h.name.startswith("channel-")}
    durable = {h.path for h in completed.durable_handles}
    staged_by_sink = channels & durable  # balances' channel, the balances_table sink's files
    assert staged_by_sink and channels - durable
    gc(c, c.store)
    assert not any(run.store.exists(p) for p in channels - durable)
    assert all(run.store.exists(p) for p in durable)
    # without its channels the checkpoint still restores, and exports a whole savepoint
    restore_checkpoint(run.runner.driver, 1)
    target = SavepointLocation(run.store, "savepoints/after-gc")
    report = c.savepoints.export(1, target)
    assert report.files == len(durable) and check_savepoint(target) == []
    # and the next epoch continues from it exactly once
    run.epoch(1)
    run.assert_matches_reference()


def test_acks_record_each_tasks_metrics(
    make_run: Callable[..., PaymentsRun], after_first_epoch: Path
) -> None:
    run = make_run(copy_from=after_first_epoch)
    outcome = run.runner.driver.coordinator.get_outcome(1)
    acks = {a.task: a for a in outcome.completed.acks}
    for ack in acks.values():
        assert ack.metrics.sync_ms > 0 and ack.metrics.async_ms > 0, ack
        assert ack.metrics.records_out == sum(h.rows for h in ack.handles) > 0, ack

    def of(operator: str) -> list[AckRecord]:
        return [a for task, a in acks.items() if task.operator == operator]

    # a consumer's records in are exactly the rows its producer wrote for it
    for producer, consumer in (("dedup", "balances"), ("balances", "alerts")):
        written = sum(h.rows for a in of(producer) for h in a.handles if reads_channel(h, consumer))
        assert written > 0
        assert sum(a.metrics.records_in for a in of(consumer)) == written
    # dedup reads the source itself: none of its rows came through a channel
    assert [a.metrics.records_in for a in of("dedup")] == [0] * len(of("dedup"))

    # the operator tasks' logs say the same, and each stream as it is written
    lines: list[str] = []
    run.runner.log = lines.append
    result = run.epoch(1)
    assert result.outcome is not None and result.outcome.completed is not None
    second = {a.task: a for a in result.outcome.completed.acks}
    balances_in = sum(a.metrics.records_in for t, a in second.items() if t.operator == "balances")
    balances_out = sum(a.metrics.records_out for t, a in second.items() if t.operator == "balances")
    assert any(
        line.startswith(
            f"checkpoint 2: records in {balances_in} (from upstream operators), "
            f"records out {balances_out}, "
        )
        for line in lines
    ), lines
    assert any(
        re.match(
            r"snapshot: state-balances written \(\d+ file\(s\), \d+ bytes\), \d of \d streams", line
        )
        for line in lines
    ), lines
