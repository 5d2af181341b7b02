"""A stop-with-savepoint beside a restore, a repair and a resume with the control record
lost (found by a reviewer): the stop's abandoned checkpoint expired after a restore and
set the pipeline FAILED; a repair dropped the stop in flight, so the savepoint completed
without stopping the pipeline; and resume said "not stopped" of a stopped pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchpoint.errors import TriggerRefused
from batchpoint.ops.maintenance import resume
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointStatus,
    CheckpointType,
)
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.protocol.stopping import NotStopped
from batchpoint.storage.local import LocalObjectStore
from support.clock import FakeClock
from support.protocol_steps import ack_all, complete, coordinator
from support.restoring import restore

STOP = CheckpointProperties(stop_pipeline=True)


def test_a_restore_during_a_stop_aborts_what_the_stop_abandoned_uncounted(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    c = coordinator(LocalObjectStore(tmp_path), clock, tolerable_failed_checkpoints=0)
    first = complete(c)
    late = c.trigger({"src": {"p0": 2}}).checkpoint_id  # a scheduled run's, tasks running
    c.trigger({"src": {"p0": 3}}, checkpoint_type=CheckpointType.SAVEPOINT, properties=STOP)
    assert c.control.load().stopping is not None

    restore(c, first)
    clock.advance(3600)  # past every deadline
    c.settle()

    outcome = c.get_outcome(late)
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is CheckpointFailureReason.RESTORED
    assert c.failures.state().failed_ids == ()
    assert c.trigger({"src": {"p0": 4}}).checkpoint_id > late  # the restore started it


@pytest.mark.parametrize("record", ["lost", "damaged"])
def test_a_repair_keeps_a_stop_in_flight(tmp_path: Path, record: str) -> None:
    store = LocalObjectStore(tmp_path)
    c = coordinator(store, FakeClock())
    stop = c.trigger(
        {"src": {"p0": 1}}, checkpoint_type=CheckpointType.SAVEPOINT, properties=STOP
    ).checkpoint_id
    if record == "lost":
        store.delete(c.control.key)
    else:
        store.put(c.control.key, b'{"kind": "pipeline-control", "vers')

    assert c.repair().written
    assert c.control.load().stopping is not None
    ack_all(c, stop)
    done = c.try_finalize(stop)
    assert done is not None and done.status is CheckpointStatus.COMPLETED
    assert c.control.load().stopped is not None
    with pytest.raises(TriggerRefused, match="stopped with savepoint"):
        c.trigger({"src": {"p0": 2}})


def test_resume_with_the_control_record_lost_names_repair(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    c = coordinator(store, FakeClock())
    complete(c)
    complete(c, CheckpointType.SAVEPOINT, properties=STOP)
    store.delete(c.control.key)

    with pytest.raises(NotStopped, match="batchpoint repair"):
        resume(c)
    c.repair()
    assert c.control.load().stopped is not None  # it was stopped all along


def test_a_repair_rebuilds_what_a_stop_in_flight_abandoned(tmp_path: Path) -> None:
    """The rebuilt stop abandoned nothing: the periodic checkpoint the stop had abandoned
    went back to pending and completed, its input then published twice (the reviewer of
    the first fix)."""
    store = LocalObjectStore(tmp_path)
    c = coordinator(store, FakeClock())
    periodic = c.trigger({"src": {"p0": 1}}).checkpoint_id
    stop = c.trigger(
        {"src": {"p0": 2}}, checkpoint_type=CheckpointType.SAVEPOINT, properties=STOP
    ).checkpoint_id
    store.delete(c.control.key)

    assert c.repair().written
    rebuilt = c.control.load()
    assert rebuilt.stopping is not None and rebuilt.stopping.abandoned == (periodic,)
    assert [p.checkpoint_id for p in rebuilt.pending] == [stop]
    ack_all(c, periodic)
    ack_all(c, stop)
    c.try_finalize(stop)
    outcome = c.try_finalize(periodic)
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is CheckpointFailureReason.STOPPED
