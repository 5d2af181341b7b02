"""The pipeline's Asset: an event for every completed checkpoint and savepoint (its id
and type in the extra), none for an aborted one, and exactly one when the cleanup task
completes a checkpoint whose finalize task failed. A DAG scheduled on the Asset runs after
a completed checkpoint: tests/airflow/test_rest_stack.py (it needs a real scheduler)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.s3]


def events(pipeline: str = "payments") -> list[dict[str, Any]]:
    """The asset's events, oldest first (the session's database: every test adds)."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    from batchpoint.airflow.assets import batchpoint_asset

    with create_session() as session:
        rows = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == batchpoint_asset(pipeline).uri)
            .order_by(AssetEvent.id)
            .all()
        )
        return [{**dict(e.extra or {}), "task": e.source_task_id} for e in rows]


def test_completed_checkpoints_and_savepoints_update_the_pipelines_asset(
    bp, write_epoch, monkeypatch
):
    before = len(events())
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


def test_a_checkpoint_completed_by_cleanup_has_one_event(bp, write_epoch, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from batchpoint.airflow.operators.checkpoint import FinalizeCheckpointOperator

    def finalize_fails(self, context):  # the fault: finalize never gets to run
        raise AirflowFailException("injected: finalize lost its worker")

    monkeypatch.setattr(FinalizeCheckpointOperator, "execute", finalize_fails)
    before = len(events())
    write_epoch(0)
    run, states = bp.run("payments_checkpoint")
    assert states["finalize"] == "failed", states
    assert run.state == "success", states  # the cleanup completed it: finalize's work is done
    outcome = bp.driver().coordinator.get_outcome(1)
    assert outcome is not None and outcome.completed is not None, outcome
    assert events()[before:] == [
        {"pipeline": "payments", "checkpoint_id": 1, "type": "checkpoint", "task": "cleanup"}
    ]
