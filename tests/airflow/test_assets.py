"""The pipeline's Asset: an event for every completed checkpoint and savepoint (its id
and type in the extra), none for an aborted one, and exactly one when the cleanup task
completes a checkpoint whose finalize task failed; the same of each sink's Asset, for the
checkpoints that published it (issue 40). A DAG scheduled on the Asset runs after a
completed checkpoint: tests/airflow/test_rest_stack.py (it needs a real scheduler); a
checkpoint DAG scheduled on its upstream's sinks: test_upstream_schedule.py."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.s3]


SINKS = ("balances_table", "alerts")  # the demo pipeline's


def events(pipeline: str = "payments", sink: str | None = None) -> list[dict[str, Any]]:
    """The events of the pipeline's asset, or of its sink's, oldest first (the session's
    database: every test adds)."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    from batchpoint.airflow.assets import batchpoint_asset, batchpoint_sink_asset

    asset = batchpoint_asset(pipeline) if sink is None else batchpoint_sink_asset(pipeline, sink)
    with create_session() as session:
        rows = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == asset.uri)
            .order_by(AssetEvent.id)
            .all()
        )
        return [{**dict(e.extra or {}), "task": e.source_task_id} for e in rows]


def test_completed_checkpoints_and_savepoints_update_the_pipelines_asset(
    bp, write_epoch, monkeypatch
):
    before = len(events())
    sinks_before = {sink: len(events(sink=sink)) for sink in SINKS}
    write_epoch(0)
    assert bp.run("payments_checkpoint")[0].state == "success"
    write_epoch(1)
    monkeypatch.setenv("FAKE_JOB_FAIL", "balances")
    assert bp.run("payments_checkpoint")[0].state == "failed"  # checkpoint 2 aborted
    monkeypatch.delenv("FAKE_JOB_FAIL")
    run, states = bp.run("payments_savepoint", {"target": "", "stop_pipeline": False})
    assert run.state == "success", states

    assert events()[before:] == [
        {"pipeline": "payments", "checkpoint_id": 1, "type": "checkpoint", "task": "finalize"},
        {"pipeline": "payments", "checkpoint_id": 3, "type": "savepoint", "task": "finalize"},
    ]
    for sink in SINKS:  # each sink's asset: the same completions, the sink named
        assert events(sink=sink)[sinks_before[sink] :] == [
            {**sink_event(sink, 1, "checkpoint"), "task": "finalize"},
            {**sink_event(sink, 3, "savepoint"), "task": "finalize"},
        ], sink


def sink_event(sink: str, checkpoint_id: int, type: str) -> dict[str, Any]:
    return {
        "pipeline": "payments",
        "sink": sink,
        "checkpoint_id": checkpoint_id,
        "restore_generation": 0,
        "type": type,
    }


def test_a_checkpoint_completed_by_cleanup_has_one_event(bp, write_epoch, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from batchpoint.airflow.operators.checkpoint import FinalizeCheckpointOperator

    def finalize_fails(self, context):  # the fault: finalize never gets to run
        raise AirflowFailException("injected: finalize lost its worker")

    monkeypatch.setattr(FinalizeCheckpointOperator, "execute", finalize_fails)
    before = len(events())
    sinks_before = {sink: len(events(sink=sink)) for sink in SINKS}
    write_epoch(0)
    run, states = bp.run("payments_checkpoint")
    assert states["finalize"] == "failed", states
    assert run.state == "success", states  # the cleanup completed it: finalize's work is done
    outcome = bp.driver().coordinator.get_outcome(1)
    assert outcome is not None and outcome.completed is not None, outcome
    assert events()[before:] == [
        {"pipeline": "payments", "checkpoint_id": 1, "type": "checkpoint", "task": "cleanup"}
    ]
    for sink in SINKS:
        assert events(sink=sink)[sinks_before[sink] :] == [
            {**sink_event(sink, 1, "checkpoint"), "task": "cleanup"}
        ], sink
