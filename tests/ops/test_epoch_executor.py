"""The in-process executor runs the plan the DAGs render, step for step: a recording
wrapper around the real use cases it calls (the trigger, the operator runner, the ack
progress, the audit, finalize, the export, the run's settlement) sees one call per task
of the plan, in the plan's order, for a checkpoint, an audited checkpoint and an
exported savepoint; a task that raises ends the run, and its cleanup settles it as the
DAG's cleanup task would. Real Spark, real storage."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from batchpoint.ops import epoch_executor
from batchpoint.ops.epoch_executor import SavepointExport, StepStatus
from batchpoint.ops.epoch_plan import EpochPlan, PlannedTask, TaskKind
from batchpoint.ops.local_epoch import run_audited_epoch
from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointType
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.runtime.runner import OperatorFailed, OperatorRunner
from support.payments import INTEGRITY_ONLY, PaymentsRun

pytestmark = [pytest.mark.spark, pytest.mark.slow]


class Recorder:
    """Wraps the real calls; records the outermost ones only (a use case's own inner
    calls, e.g. the audit's finalize, are its business)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, run: PaymentsRun) -> None:
        self.calls: list[str] = []
        self._depth = 0
        for name in ("trigger_audited", "audit_then_finalize", "finalize", "export", "settle_run"):
            real = getattr(epoch_executor, name)
            monkeypatch.setattr(epoch_executor, name, self.wrap(name, real))
        driver = run.runner.driver
        monkeypatch.setattr(driver, "trigger", self.wrap("trigger", driver.trigger))
        progress = driver.coordinator.progress
        monkeypatch.setattr(driver.coordinator, "progress", self.wrap("progress", progress))
        real_run = OperatorRunner.run

        def run_operator(runner: OperatorRunner, checkpoint_id: int, name: str) -> Any:
            with self.call(f"run {name}"):
                return real_run(runner, checkpoint_id, name)

        monkeypatch.setattr(OperatorRunner, "run", run_operator)

    @contextmanager
    def call(self, label: str) -> Iterator[None]:
        if self._depth == 0:
            self.calls.append(label)
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    def wrap(self, label: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            with self.call(label):
                return real(*args, **kwargs)

        return recorded


def expected_call(plan: EpochPlan, task: PlannedTask) -> str | None:
    """The use case a task of the plan is, as the Airflow operator of its kind calls it;
    None: the cleanup, which has nothing to settle after a run that raised nothing."""
    return {
        TaskKind.TRIGGER_CHECKPOINT: "trigger_audited" if plan.audited else "trigger",
        TaskKind.TRIGGER_SAVEPOINT: "trigger",
        TaskKind.OPERATOR: f"run {task.operator}",
        TaskKind.WAIT_FOR_ACKS: "progress",
        TaskKind.AUDIT: "audit_then_finalize",
        TaskKind.FINALIZE: "finalize",
        TaskKind.EXPORT_SAVEPOINT: "export",
        TaskKind.CLEANUP: None,
    }[task.kind]


def assert_ran_the_plan(recorder: Recorder, plan: EpochPlan, result: Any) -> None:
    expected = [c for t in plan.tasks if (c := expected_call(plan, t)) is not None]
    assert recorder.calls == expected
    assert [s.task for s in result.steps] == list(plan.ids)
    assert {s.status for s in result.steps} == {StepStatus.DONE}


@pytest.fixture
def run(make_run: Callable[..., PaymentsRun], after_first_epoch: Path) -> PaymentsRun:
    run = make_run(copy_from=after_first_epoch)
    run.add_input(1)
    run.clock.advance(1)
    return run


def test_a_checkpoint_runs_its_plan(run: PaymentsRun, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = run.runner.plan()
    recorder = Recorder(monkeypatch, run)
    result = run.runner.run_epoch()
    assert_ran_the_plan(recorder, plan, result)
    assert recorder.calls[:2] == ["trigger", "run dedup"]
    assert result.outcome is not None and result.outcome.completed is not None
    cid = result.checkpoint_id
    assert sorted(result.published) == [f"alerts@{cid}", f"balances_table@{cid}"]
    run.assert_matches_reference()


def test_an_audited_checkpoint_runs_its_plan(
    run: PaymentsRun, make_gate: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = run.runner.plan(audit=True)
    gate = make_gate(run, quality=INTEGRITY_ONLY)
    recorder = Recorder(monkeypatch, run)
    result, audit = run_audited_epoch(run.runner, gate)
    assert_ran_the_plan(recorder, plan, result)
    assert recorder.calls[-2:] == ["audit_then_finalize", "finalize"]
    assert audit.report is not None and audit.report.passed
    assert result.outcome is not None and result.outcome.completed is not None
    assert result.outcome.pending.requires_audit
    # the audit published; the finalize after it found nothing new and lost nothing
    cid = result.checkpoint_id
    assert sorted(result.published) == [f"alerts@{cid}", f"balances_table@{cid}"]


def test_an_exported_savepoint_runs_its_plan(
    run: PaymentsRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = run.runner.plan(CheckpointType.SAVEPOINT, export=True)
    recorder = Recorder(monkeypatch, run)
    where = SavepointExport(target="savepoints/payments/before-deploy", description="why")
    result = run.runner.executor(export=where).run(plan, CheckpointProperties(description="why"))
    assert_ran_the_plan(recorder, plan, result)
    assert recorder.calls[-2:] == ["finalize", "export"]
    assert result.outcome is not None and result.outcome.pending.type is CheckpointType.SAVEPOINT
    assert result.export is not None and result.export.checkpoint_id == result.checkpoint_id
    assert result.export.location.endswith("savepoints/payments/before-deploy")
    assert run.store.exists("savepoints/payments/before-deploy/_metadata")


def test_a_task_that_raises_ends_the_run_and_the_cleanup_settles_it(
    run: PaymentsRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    run.store.put("sources/payments/p2/e00001-f98.jsonl", b'{"account_id": "a", "event_id": \n')
    plan = run.runner.plan()
    recorder = Recorder(monkeypatch, run)
    with pytest.raises(OperatorFailed, match=r"e00001-f98\.jsonl"):
        run.runner.run_epoch()
    # dedup declined; nothing after it ran but the cleanup, which settled the run
    assert recorder.calls == ["trigger", "run dedup", "settle_run"]
    result = run.runner.executor().run(plan)  # the next epoch meets the same input
    assert isinstance(result.error, OperatorFailed)
    statuses = {str(s.task): s.status for s in result.steps}
    assert statuses["operators.dedup"] is StepStatus.FAILED
    assert statuses["operators.balances"] is StepStatus.SKIPPED
    assert statuses["finalize"] is StepStatus.SKIPPED
    assert statuses["cleanup"] is StepStatus.DONE
    settlement = result.settlement
    assert settlement is not None and settlement.outcome is not None
    assert settlement.outcome.reason is CheckpointFailureReason.DECLINED
    assert settlement.checkpoint_id == result.checkpoint_id
