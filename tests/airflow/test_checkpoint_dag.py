"""The checkpoint DAG under dag.test(), against SeaweedFS, with the fake spark-submit
(each operator job acks in well under a second): the happy path, each failure path and
the request decider's refusals. The real Spark jobs run in test_end_to_end.py."""

from __future__ import annotations

import pytest

from batchpoint.errors import TriggerRefused
from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointStatus
from batchpoint.protocol.failures import PipelineStatus

pytestmark = [pytest.mark.airflow, pytest.mark.s3]

OPERATORS = ("dedup", "balances", "balances_table", "alerts")


def test_a_run_completes_one_checkpoint_and_publishes_it(bp, write_epoch):
    write_epoch(0)
    run, states = bp.run("payments_checkpoint")

    assert run.state == "success", states
    assert set(states.values()) == {"success"}
    c = bp.driver().coordinator
    assert c.head.get().checkpoint_id == 1
    outcome = c.get_outcome(1)
    assert outcome.status is CheckpointStatus.COMPLETED
    # every subtask acked, from a try-specific attempt folder
    assert {a.task for a in outcome.completed.acks} == set(outcome.pending.expected_tasks)
    assert all(
        a.attempt.startswith("af-") and a.attempt.endswith("-t1") for a in outcome.completed.acks
    )
    # the run's id is on the checkpoint, and the sinks published it
    assert outcome.pending.properties["scheduler_run_id"] == run.run_id
    manifest = bp.driver().sinks.manifest("balances_table")
    assert manifest is not None and manifest.current == 1


def test_a_declining_operator_aborts_the_checkpoint_and_the_next_run_recovers(
    bp, write_epoch, monkeypatch
):
    write_epoch(0)
    monkeypatch.setenv("FAKE_JOB_FAIL", "balances")
    run, states = bp.run("payments_checkpoint")

    assert run.state == "failed"
    assert states["operators.dedup"] == "success"
    assert states["operators.balances"] == "failed"
    assert states["wait_for_acks"] == "failed"  # failed fast on the decline
    assert states["finalize"] == "upstream_failed"
    assert states["cleanup"] == "failed"  # ran (all_done) and reported the abort
    c = bp.driver().coordinator
    outcome = c.get_outcome(1)
    assert outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is CheckpointFailureReason.DECLINED
    assert "injected failure" in outcome.message
    assert c.failures.state().consecutive_failures == 1
    # cleanup removed what the aborted checkpoint staged
    assert list(c.store.list(c.layout.data_prefix(1))) == []
    assert c.head.get().checkpoint_id is None

    monkeypatch.delenv("FAKE_JOB_FAIL")
    run, states = bp.run("payments_checkpoint")
    assert run.state == "success", states
    assert c.get_outcome(2).status is CheckpointStatus.COMPLETED
    assert c.get_outcome(2).pending.base_checkpoint_id is None  # an abort is never a base
    assert c.failures.state().consecutive_failures == 0


def test_a_killed_job_with_no_retry_left_is_declined_on_its_behalf(bp, write_epoch, monkeypatch):
    write_epoch(0)
    monkeypatch.setenv("FAKE_JOB_KILL", "dedup")
    run, states = bp.run("payments_checkpoint")

    assert run.state == "failed"
    assert states["operators.dedup"] == "failed"
    assert states["wait_for_acks"] == "failed"
    c = bp.driver().coordinator
    outcome = c.get_outcome(1)
    assert outcome.reason is CheckpointFailureReason.DECLINED
    assert "died (exit 137)" in outcome.message


def test_a_checkpoint_nobody_acknowledges_expires_at_its_deadline(bp, write_epoch):
    """The deferrable sensor, its trigger run inline by dag.test: the trigger's own
    deadline ends the wait, the sensor aborts the checkpoint as EXPIRED."""
    write_epoch(0)
    bp.set(ack_sensor_mode="deferrable", checkpoint_timeout=3)
    run, states = bp.run("payments_checkpoint", mark_success_pattern=r"operators\..*")

    assert run.state == "failed"
    assert states["wait_for_acks"] == "failed"
    assert states["cleanup"] == "failed"
    c = bp.driver().coordinator
    outcome = c.get_outcome(1)
    assert outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is CheckpointFailureReason.EXPIRED
    assert c.failures.state().consecutive_failures == 1


def test_min_pause_skips_the_run_with_the_reason(bp, write_epoch):
    write_epoch(0)
    bp.set(min_pause=3600)
    assert bp.run("payments_checkpoint")[0].state == "success"

    run, states = bp.run("payments_checkpoint")
    assert run.state == "success"  # skipped, not failed: nothing is wrong
    assert skipped_by_the_trigger(states)
    assert bp.driver().coordinator.checkpoint_ids() == [1]


def skipped_by_the_trigger(states: dict[str, str]) -> bool:
    """The trigger skipped every later task at once (as a ShortCircuitOperator does)."""
    rest = {task: state for task, state in states.items() if task != "trigger"}
    return states["trigger"] == "success" and set(rest.values()) == {"skipped"}


def test_a_run_with_no_new_input_is_skipped_and_the_next_with_input_runs(bp, write_epoch):
    write_epoch(0)
    assert bp.run("payments_checkpoint")[0].state == "success"

    run, states = bp.run("payments_checkpoint")
    assert run.state == "success"  # idle, not failed
    assert skipped_by_the_trigger(states)
    c = bp.driver().coordinator
    assert c.checkpoint_ids() == [1]
    with pytest.raises(TriggerRefused, match="no source has new input since checkpoint 1"):
        bp.driver().trigger()

    write_epoch(1)
    run, states = bp.run("payments_checkpoint")
    assert run.state == "success", states
    assert c.checkpoint_ids() == [1, 2]
    assert c.get_outcome(2).pending.base_checkpoint_id == 1

    bp.set(skip_idle_epochs=False)  # operators that act without input run every epoch
    assert bp.run("payments_checkpoint")[0].state == "success"
    assert c.checkpoint_ids() == [1, 2, 3]


def test_max_concurrent_skips_the_run_while_another_checkpoint_is_pending(bp, write_epoch):
    write_epoch(0)
    pending = bp.driver().trigger()  # e.g. a run that is still going
    _run, states = bp.run("payments_checkpoint")

    assert skipped_by_the_trigger(states)
    assert bp.driver().coordinator.status(pending.checkpoint_id) is CheckpointStatus.PENDING


def test_past_the_tolerable_failures_the_pipeline_refuses_until_reset(bp, write_epoch, monkeypatch):
    from batchpoint.cli.main import main as cli

    write_epoch(0)
    bp.set(tolerable_failed_checkpoints=0)
    monkeypatch.setenv("FAKE_JOB_FAIL", "dedup")
    assert bp.run("payments_checkpoint")[0].state == "failed"
    c = bp.driver().coordinator
    assert c.failures.state().status is PipelineStatus.FAILED

    monkeypatch.delenv("FAKE_JOB_FAIL")
    run, states = bp.run("payments_checkpoint")
    assert run.state == "failed"
    assert states["trigger"] == "failed"  # a FAILED pipeline needs someone: not a skip
    assert c.checkpoint_ids() == [1]

    for name, value in bp.seaweed.storage_options().items():  # the CLI reads the env only
        monkeypatch.setenv(f"BATCHPOINT_S3_{name.upper()}", value)
    assert cli(["--root", bp.root, "--pipeline", "payments", "reset"]) == 0
    run, states = bp.run("payments_checkpoint")
    assert run.state == "success", states
    assert c.failures.state().status is PipelineStatus.RUNNING
