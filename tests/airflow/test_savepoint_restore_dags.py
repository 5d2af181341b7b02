"""The savepoint and restore DAGs under dag.test(), against SeaweedFS, with the fake
spark-submit; conf is what the UI's trigger form sends. Each test walks one story, so
that the checkpoint runs it needs are paid for once."""

from __future__ import annotations

import pytest

from batchpoint.protocol.checkpoint import CheckpointStatus, CheckpointType
from batchpoint.protocol.savepoints import SavepointLocation, copy_objects, read_savepoint
from batchpoint.storage import open_store
from batchpoint.storage.local import LocalObjectStore

pytestmark = [pytest.mark.airflow, pytest.mark.s3]


def _xcom(run, task_id):
    ti = next(t for t in run.get_task_instances() if t.task_id == task_id)
    return ti.xcom_pull(task_ids=task_id)


def test_stop_pipeline_without_the_api_connection_fails_before_any_work(bp, write_epoch):
    write_epoch(0)
    run, states = bp.run("payments_savepoint", {"stop_pipeline": True})
    assert run.state == "failed"
    assert states["trigger"] == "failed"
    assert bp.driver().coordinator.checkpoint_ids() == []


def test_savepoint_exported_elsewhere_moved_and_restored(bp, write_epoch, tmp_path):
    c = bp.driver().coordinator
    write_epoch(0)
    assert bp.run("payments_checkpoint")[0].state == "success"

    # a savepoint: retained, never subsumed, exported with its _metadata
    elsewhere = f"s3://{bp.seaweed.bucket}/exported-{tmp_path.name}/sp"
    # Savepoints go only under configured roots: this deployment adds one.
    # (and the local disk the folder is moved to below)
    roots = [f"{bp.root}/savepoints/", f"s3://{bp.seaweed.bucket}/exported-{tmp_path.name}/"]
    bp.set(savepoint_roots=",".join([*roots, tmp_path.as_uri()]))
    run, states = bp.run(
        "payments_savepoint",
        {"target": elsewhere, "stop_pipeline": False, "description": "pre-deploy"},
    )
    assert run.state == "success", states
    assert states["stop_pipeline"] == "skipped"
    assert _xcom(run, "export_savepoint")["location"] == elsewhere
    outcome = c.get_outcome(2)
    assert outcome.status is CheckpointStatus.COMPLETED
    assert outcome.pending.type is CheckpointType.SAVEPOINT
    assert outcome.pending.properties["description"] == "pre-deploy"
    assert not next(m for m in c.completed.markers() if m.checkpoint_id == 2).subsumable
    source = open_store(elsewhere, bp.seaweed.storage_options())
    metadata = read_savepoint(SavepointLocation(source))
    assert metadata.checkpoint_id == 2 and metadata.description == "pre-deploy"
    assert all(h.path.startswith("data/") for h in metadata.handles)

    write_epoch(1)
    assert bp.run("payments_checkpoint")[0].state == "success"  # checkpoint 3

    # move the folder to a local disk: nothing in it names where it was
    moved = LocalObjectStore(tmp_path / "moved")
    copy_objects(source, moved, [(i.key, i.key) for i in source.list("")])

    run, states = bp.run(
        "payments_restore", {"source": moved.uri, "parallelism": 1, "dry_run": False}
    )
    assert run.state == "success", states
    result = _xcom(run, "restore")
    assert result["imported_from"] == moved.uri
    assert result["checkpoint_id"] == 4  # a new id: ids are never reused
    imported = c.get_outcome(4)
    assert imported.pending.type is CheckpointType.SAVEPOINT
    assert imported.pending.barrier == c.get_outcome(2).pending.barrier
    assert c.head.get().checkpoint_id == 4
    assert all(op.parallelism == 1 for op in bp.driver().current_spec().operators)

    run, states = bp.run("payments_checkpoint")
    assert run.state == "success", states
    assert c.get_outcome(5).pending.base_checkpoint_id == 4


def test_restore_dry_run_refusal_and_restore_with_a_new_parallelism(bp, write_epoch):
    c = bp.driver().coordinator
    write_epoch(0)
    assert bp.run("payments_checkpoint")[0].state == "success"
    write_epoch(1)
    assert bp.run("payments_checkpoint")[0].state == "success"

    # a dry run checks and reports, and changes nothing
    run, states = bp.run("payments_restore", {"source": "latest", "dry_run": True})
    assert run.state == "success"
    assert states == {"check": "success", "restore": "skipped"}
    report = _xcom(run, "check")
    assert report["checkpoint_id"] == 2 and report["checks"][0]["passed"]
    assert c.head.get().restore_generation == 0

    # an id that is not retained is refused, with the head untouched
    run, states = bp.run("payments_restore", {"source": "7"})
    assert run.state == "failed"
    assert states == {"check": "failed", "restore": "upstream_failed"}
    assert c.head.get().checkpoint_id == 2

    # a real restore: head moved back (new generation), sinks rewound, parallelism set
    run, states = bp.run(
        "payments_restore", {"source": "1", "parallelism": {"balances": 3}, "dry_run": False}
    )
    assert run.state == "success", states
    head = c.head.get()
    assert (head.checkpoint_id, head.restore_generation) == (1, 1)
    spec = bp.driver().current_spec()
    assert spec.operator("balances").parallelism == 3
    assert spec.operator("dedup").parallelism == 2
    assert bp.driver().sinks.manifest("alerts").current == 1

    # and the next checkpoint continues from it with three balances subtasks
    run, states = bp.run("payments_checkpoint")
    assert run.state == "success", states
    pending = c.get_outcome(3).pending
    assert pending.base_checkpoint_id == 1
    assert [str(t) for t in pending.expected_tasks if t.operator == "balances"] == [
        "balances#0",
        "balances#1",
        "balances#2",
    ]
