"""A pipeline stopped with a savepoint, as its DAGs see it under dag.test() against
SeaweedFS: the checkpoint DAG's run skips with the reason (the control record, not the
DAG's pause, is what stops it), the savepoint DAG asked by hand fails saying how to
resume, and after `resume` the next scheduled run completes a checkpoint on the
savepoint."""

from __future__ import annotations

import pytest

from batchpoint.ops.epoch import finalize
from batchpoint.ops.maintenance import resume
from batchpoint.protocol.checkpoint import CheckpointStatus, CheckpointType
from batchpoint.protocol.properties import CheckpointProperties
from support.fake_epochs import ack_all

pytestmark = [pytest.mark.airflow, pytest.mark.s3]


def test_a_stopped_pipeline_skips_its_runs_until_resumed(bp, write_epoch):
    write_epoch(0)
    assert bp.run("payments_checkpoint")[0].state == "success"  # checkpoint 1
    driver = bp.driver()
    c = driver.coordinator
    write_epoch(1)
    stop = driver.trigger(
        CheckpointType.SAVEPOINT, properties=CheckpointProperties(stop_pipeline=True)
    )
    ack_all(driver, stop)
    assert finalize(driver, stop.checkpoint_id).outcome.completed is not None  # type: ignore[union-attr]

    write_epoch(2)  # new input: only the stop keeps a checkpoint from starting
    run, states = bp.run("payments_checkpoint")
    rest = {state for task, state in states.items() if task != "trigger"}
    assert run.state == "success" and rest == {"skipped"}, states  # skipped by its trigger
    assert c.checkpoint_ids() == [1, stop.checkpoint_id]

    run, states = bp.run("payments_savepoint", {"stop_pipeline": False})
    assert run.state == "failed" and states["trigger"] == "failed", states
    assert c.checkpoint_ids() == [1, stop.checkpoint_id]

    assert resume(c).savepoint == stop.checkpoint_id
    run, states = bp.run("payments_checkpoint")
    assert run.state == "success", states
    (after,) = [cid for cid in c.checkpoint_ids() if cid > stop.checkpoint_id]
    outcome = c.get_outcome(after)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    assert outcome.pending.base_checkpoint_id == stop.checkpoint_id
