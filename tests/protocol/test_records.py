"""Bad records, refusals and the protocol's edge decisions, through the coordinator's
real read and write paths, on every backend.

Corrupt bytes are written with `store.put` at the real key (from the layout), so each
read path that meets them must say which object is bad and what is wrong with it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest

from batchpoint.errors import (
    CorruptRecord,
    RecordError,
    RestoreRefused,
    TriggerRefused,
    UnsupportedRecordVersion,
)
from batchpoint.protocol.checkpoint import (
    INDEPENDENT_OF_BASE,
    CheckpointFailureReason,
    CheckpointStatus,
    CheckpointType,
    DeclineRecord,
    DeclineResult,
    FileHandle,
    PendingCheckpoint,
    TaskAcknowledgeResult,
)
from batchpoint.protocol.completed_store import settle_outcome
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.control import ControlUnreadable
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.failures import PipelineStatus
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.storage.base import ObjectStore
from support.clock import FakeClock
from support.restoring import restore

SPEC = simple_pipeline("rec", [("a", 2), ("b", 1)])
TASKS = SPEC.expected_tasks()


def _coordinator(
    store: ObjectStore, clock: FakeClock | None = None, **config: Any
) -> CheckpointCoordinator:
    c = CheckpointCoordinator(store, SPEC, CheckpointConfig(**config), clock=clock or FakeClock())
    c.register(SPEC)
    return c


def _state(
    c: CheckpointCoordinator, cid: int, task: TaskId, attempt: str = "att", body: bytes = b""
) -> tuple[FileHandle, ...]:
    body = body or f"state of {task} in {cid} by {attempt}".encode()
    key = c.layout.task_data_prefix(cid, task, attempt) + "part-0.parquet"
    c.store.put(key, body)
    return (FileHandle(key, len(body), hashlib.sha256(body).hexdigest(), rows=1),)


def _ack_all(c: CheckpointCoordinator, cid: int, tasks: tuple[TaskId, ...] = TASKS) -> None:
    for task in tasks:
        result = c.acknowledge(cid, task, "att", _state(c, cid, task))
        assert result is TaskAcknowledgeResult.SUCCESS, (task, result)


def _complete(
    c: CheckpointCoordinator,
    epoch: int,
    checkpoint_type: CheckpointType = CheckpointType.CHECKPOINT,
) -> int:
    pending = c.trigger({"src": {"p0": epoch}}, checkpoint_type=checkpoint_type)
    _ack_all(c, pending.checkpoint_id)
    outcome = c.try_finalize(pending.checkpoint_id)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED, outcome
    return pending.checkpoint_id


# == corrupt records through the real read paths ==========================================


@dataclass(frozen=True)
class _World:
    """One completed checkpoint (`done`) and one pending one (`pending`, acked by a#0)."""

    c: CheckpointCoordinator
    done: int
    pending: int


def _world(store: ObjectStore) -> _World:
    c = _coordinator(store, max_concurrent=2)
    done = _complete(c, 0)
    pending = c.trigger({"src": {"p0": 1}}).checkpoint_id
    assert c.acknowledge(pending, TASKS[0], "att", _state(c, pending, TASKS[0])).value == "SUCCESS"
    return _World(c, done, pending)


ReadPath = Callable[[_World], object] | tuple[Callable[[_World], object], type[Exception]]

# record name -> (its key, the reads that must refuse it). Every read path here is one
# the coordinator really takes: the sensors' progress polls, finalize, trigger, restore.
TARGETS: dict[str, tuple[Callable[[_World], str], list[ReadPath]]] = {
    "outcome": (
        lambda w: w.c.layout.outcome(w.done),
        [
            lambda w: w.c.get_outcome(w.done),
            lambda w: w.c.try_finalize(w.done),
            lambda w: w.c.progress(w.done),
            lambda w: w.c.completed.get(w.done),
        ],
    ),
    "pending": (
        lambda w: w.c.layout.active(w.pending),
        [
            lambda w: w.c.get_pending(w.pending),
            # a new trigger builds on the newest admitted checkpoint: it names the record
            (lambda w: w.c.trigger({"src": {"p0": 2}}), TriggerRefused),
        ],
    ),
    "ack": (
        lambda w: w.c.layout.ack(w.pending, TASKS[0]),
        [
            lambda w: w.c.acks(w.pending),
            lambda w: w.c.progress(w.pending),
            # a second attempt finds the first one's (corrupt) ack in its way
            lambda w: w.c.acknowledge(w.pending, TASKS[0], "att-2", ()),
        ],
    ),
    "control": (
        lambda w: w.c.layout.head,
        [
            (lambda w: w.c.head.get(), ControlUnreadable),
            (lambda w: w.c.completed.retained_ids(), ControlUnreadable),
            (lambda w: w.c.trigger({"src": {"p0": 2}}), TriggerRefused),
            (lambda w: restore(w.c), RestoreRefused),
        ],
    ),
    "id counter": (
        lambda w: w.c.layout.id_counter,
        [lambda w: w.c.ids.peek(), lambda w: w.c.ids.get_and_increment()],
    ),
    "failures": (
        lambda w: w.c.layout.failures,
        [lambda w: w.c.failures.state(), lambda w: w.c.trigger({"src": {"p0": 2}})],
    ),
    "spec": (
        lambda w: w.c.layout.spec,
        [
            lambda w: CheckpointCoordinator(w.c.store, "rec").load_spec(),
            lambda w: CheckpointCoordinator(w.c.store, "rec").trigger({"src": {"p0": 2}}),
        ],
    ),
}


def _wrong_kind() -> bytes:
    return DeclineRecord(1, TaskId("a", 0), "att", "boom", 1_000_000.0).encode()


def _bump_version(good: bytes) -> bytes:
    document = json.loads(good)
    document["version"] = 99
    return json.dumps(document).encode()


# bad payload -> (bytes from the good ones, the error, what its message must say)
BAD: dict[str, tuple[Callable[[bytes], bytes], type[RecordError], str]] = {
    "corrupt": (lambda good: b"{not json at all", CorruptRecord, "invalid JSON"),
    "truncated": (lambda good: good[: len(good) // 2], CorruptRecord, "truncated JSON"),
    "empty": (lambda good: b"", CorruptRecord, "empty"),
    "not an object": (lambda good: b"[1, 2, 3]", CorruptRecord, "expected a JSON object"),
    "wrong kind": (lambda good: _wrong_kind(), CorruptRecord, "found kind 'decline'"),
    "unknown version": (_bump_version, UnsupportedRecordVersion, "version 99"),
}


@pytest.mark.parametrize("target", list(TARGETS))
def test_bad_record_is_refused_naming_key_and_problem(
    store: ObjectStore, target: str, subtests: pytest.Subtests
) -> None:
    w = _world(store)
    key_of, read_paths = TARGETS[target]
    key = key_of(w)
    good = store.get(key).data
    for bad, (make_bad, error, problem) in BAD.items():
        with subtests.test(bad=bad):
            store.put(key, make_bad(good))
            for number, path in enumerate(read_paths):
                read, expected = path if isinstance(path, tuple) else (path, error)
                with pytest.raises(expected) as caught:
                    read(w)
                message = str(caught.value)
                where = f"{target} / {bad} / read path {number}: {message}"
                assert getattr(caught.value, "key", key) == key, where
                assert f"'{key}'" in message, where
                assert problem in message, where
            if bad == "wrong kind":
                assert "expected a '" in str(caught.value)
            if bad == "unknown version":
                assert "upgrade batchpoint" in str(caught.value)
            if target == "control":  # a newer release's record is not to be rebuilt
                named = "batchpoint repair" in str(caught.value)
                assert named is (bad != "unknown version"), where
            # Refusing is all a reader may do: the bad record stays for a human to see.
            assert store.get(key).data == make_bad(good)
        store.put(key, good)  # none of the refused reads wrote anything: start afresh


def test_bad_field_in_outcome_names_the_field(store: ObjectStore) -> None:
    w = _world(store)
    key = w.c.layout.outcome(w.done)
    document = json.loads(store.get(key).data)
    document["status"] = "MAYBE"
    store.put(key, json.dumps(document).encode())
    with pytest.raises(CorruptRecord, match="bad status 'MAYBE'") as caught:
        w.c.get_outcome(w.done)
    assert key in str(caught.value)

    del document["checkpoint"]
    document["status"] = "COMPLETED"
    store.put(key, json.dumps(document).encode())
    with pytest.raises(CorruptRecord, match="missing field 'checkpoint'"):
        w.c.try_finalize(w.done)


# == trigger refusals ======================================================================


def test_min_pause_refuses_checkpoints_not_savepoints(store: ObjectStore) -> None:
    clock = FakeClock()
    c = _coordinator(store, clock, min_pause=10)
    done = _complete(c, 0)
    clock.advance(3)
    next_id = c.ids.peek()

    with pytest.raises(TriggerRefused) as refused:
        c.trigger({"src": {"p0": 1}})
    assert refused.value.reason is CheckpointFailureReason.MINIMUM_PAUSE
    message = str(refused.value)
    assert f"checkpoint {done} completed 3.0s ago" in message
    assert "min_pause is 10s" in message and "retry in 7.0s" in message
    assert c.ids.peek() == next_id, "a refused trigger must not use up an id"

    savepoint = c.trigger({"src": {"p0": 1}}, checkpoint_type=CheckpointType.SAVEPOINT)
    assert savepoint.is_savepoint
    c.abort(savepoint.checkpoint_id, CheckpointFailureReason.DECLINED, "not needed")

    clock.advance(7)
    assert c.trigger({"src": {"p0": 1}}).base_checkpoint_id == done


def test_max_concurrent_refuses_checkpoints_not_savepoints(store: ObjectStore) -> None:
    c = _coordinator(store, max_concurrent=1)
    first = c.trigger({"src": {"p0": 0}})

    with pytest.raises(TriggerRefused) as refused:
        c.trigger({"src": {"p0": 1}})
    assert refused.value.reason is CheckpointFailureReason.TOO_MANY_CONCURRENT
    assert str(refused.value) == (
        f"pipeline 'rec': 1 checkpoint(s) pending ({first.checkpoint_id}); max_concurrent is 1"
    )
    savepoint = c.trigger({"src": {"p0": 1}}, checkpoint_type=CheckpointType.SAVEPOINT)
    # it reads on from the pending checkpoint, not from the (empty) head
    assert savepoint.base_checkpoint_id == first.checkpoint_id
    assert savepoint.base_barrier == first.barrier


def test_an_idle_checkpoint_is_refused_only_when_it_would_change_nothing(
    store: ObjectStore,
) -> None:
    c = _coordinator(store, skip_idle=True, tolerable_failed_checkpoints=10)
    done = _complete(c, 1)
    next_id = c.ids.peek()

    with pytest.raises(TriggerRefused) as refused:
        c.trigger({"src": {"p0": 1}})
    assert refused.value.reason is CheckpointFailureReason.NO_NEW_INPUT
    assert refused.value.reason.counts_as_failure is False
    assert f"no source has new input since checkpoint {done}" in str(refused.value)
    assert "BATCHPOINT_SKIP_IDLE_EPOCHS=false" in str(refused.value)
    assert c.ids.peek() == next_id, "a refused trigger must not use up an id"
    assert c.failures.state().status is PipelineStatus.RUNNING

    # new input, a new source, a savepoint and a rescale all run
    for barrier, kind in [
        ({"src": {"p0": 2}}, CheckpointType.CHECKPOINT),
        ({"src": {"p0": 1, "p1": 1}}, CheckpointType.CHECKPOINT),
        ({"src": {"p0": 1}, "other": {"p0": 1}}, CheckpointType.CHECKPOINT),
        ({"src": {"p0": 1}}, CheckpointType.SAVEPOINT),
    ]:
        pending = c.trigger(barrier, checkpoint_type=kind)
        assert pending.base_checkpoint_id == done
        c.abort(pending.checkpoint_id, CheckpointFailureReason.DECLINED, "not needed")
    rescaled = simple_pipeline("rec", [("a", 3), ("b", 1)])
    c.register(rescaled)
    pending = c.trigger({"src": {"p0": 1}})
    assert pending.expected_tasks == rescaled.expected_tasks()
    c.abort(pending.checkpoint_id, CheckpointFailureReason.DECLINED, "not needed")
    c.register(SPEC)

    # off by default in the protocol: a checkpoint per trigger, as in Flink
    plain = CheckpointCoordinator(
        store, SPEC, CheckpointConfig(tolerable_failed_checkpoints=10), clock=FakeClock()
    )
    pending = plain.trigger({"src": {"p0": 1}})
    assert pending.base_checkpoint_id == done
    plain.abort(pending.checkpoint_id, CheckpointFailureReason.DECLINED, "not needed")


def test_the_first_checkpoint_after_a_restored_savepoint_runs_even_when_idle(
    store: ObjectStore,
) -> None:
    c = _coordinator(store, skip_idle=True)
    _complete(c, 1)
    savepoint = _complete(c, 2, CheckpointType.SAVEPOINT)
    _complete(c, 3)
    restore(c, savepoint)

    # NO_CLAIM: the savepoint stays its holder's, and one checkpoint must make the
    # pipeline independent of its files before the holder may delete it.
    first = c.trigger({"src": {"p0": 2}})
    assert first.base_checkpoint_id == savepoint
    assert INDEPENDENT_OF_BASE in first.properties
    _ack_all(c, first.checkpoint_id)
    outcome = c.try_finalize(first.checkpoint_id)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED

    with pytest.raises(TriggerRefused) as refused:
        c.trigger({"src": {"p0": 2}})
    assert refused.value.reason is CheckpointFailureReason.NO_NEW_INPUT
    assert f"since checkpoint {first.checkpoint_id}" in str(refused.value)


def test_failed_pipeline_refuses_until_reset_or_restore(store: ObjectStore) -> None:
    c = _coordinator(store, tolerable_failed_checkpoints=1)
    done = _complete(c, 0)

    def fail_twice(epoch: int) -> list[int]:
        ids = []
        for i in range(2):
            p = c.trigger({"src": {"p0": epoch + i}})
            assert (
                c.decline(p.checkpoint_id, TaskId("b", 0), "att", "disk full")
                is DeclineResult.ABORTED
            )
            ids.append(p.checkpoint_id)
        return ids

    failed = fail_twice(1)
    state = c.failures.state()
    assert state.status is PipelineStatus.FAILED and state.failed_ids == tuple(failed)
    for kind in CheckpointType:
        with pytest.raises(TriggerRefused) as refused:
            c.trigger({"src": {"p0": 9}}, checkpoint_type=kind)
        assert refused.value.reason is CheckpointFailureReason.PIPELINE_FAILED
        message = str(refused.value)
        assert "pipeline 'rec' is FAILED and takes no checkpoints" in message
        assert "2 consecutive checkpoints failed (tolerable: 1)" in message
        assert f"last: checkpoint {failed[-1]} declined: task b#0 declined: disk full" in message
        assert "Reset it (batchpoint reset) or restore a checkpoint" in message

    c.reset_failures()
    state = c.failures.state()
    assert state.status is PipelineStatus.RUNNING and not state.failed_ids
    assert state.reason == "explicit reset"
    fail_twice(3)  # the count starts again from zero after a reset
    with pytest.raises(TriggerRefused, match="is FAILED"):
        c.trigger({"src": {"p0": 5}})

    restore(c, done)
    state = c.failures.state()
    assert state.status is PipelineStatus.RUNNING and not state.failed_ids
    assert state.reason == f"restored to checkpoint {done}"
    assert c.trigger({"src": {"p0": 5}}).base_checkpoint_id == done


# == decline ===============================================================================


def test_decline_semantics(store: ObjectStore) -> None:
    c = _coordinator(store)
    p = c.trigger({"src": {"p0": 0}})
    cid = p.checkpoint_id
    c.acknowledge(cid, TaskId("a", 0), "att", _state(c, cid, TaskId("a", 0)))

    # a speculative attempt of a task that already acked cannot veto the checkpoint
    assert (
        c.decline(cid, TaskId("a", 0), "att-2", "speculation lost")
        is DeclineResult.IGNORED_ACKNOWLEDGED
    )
    assert c.status(cid) is CheckpointStatus.PENDING
    assert c.declines(cid) == []
    assert c.decline(cid, TaskId("zz", 0), "att", "who?") is DeclineResult.UNKNOWN
    assert c.decline(cid + 100, TaskId("a", 0), "att", "which?") is DeclineResult.UNKNOWN

    _ack_all(c, cid, (TaskId("a", 1), TaskId("b", 0)))
    assert c.try_finalize(cid).status is CheckpointStatus.COMPLETED  # type: ignore[union-attr]
    assert c.decline(cid, TaskId("b", 0), "att-2", "too late") is DeclineResult.IGNORED_COMPLETED
    assert c.status(cid) is CheckpointStatus.COMPLETED

    p = c.trigger({"src": {"p0": 1}})
    assert c.decline(p.checkpoint_id, TaskId("b", 0), "att", "disk full") is DeclineResult.ABORTED
    outcome = c.get_outcome(p.checkpoint_id)
    assert outcome is not None and outcome.reason is CheckpointFailureReason.DECLINED
    assert outcome.message == "task b#0 declined: disk full"
    assert [(d.task, d.reason) for d in c.declines(p.checkpoint_id)] == [
        (TaskId("b", 0), "disk full")
    ]
    assert (
        c.decline(p.checkpoint_id, TaskId("a", 0), "att", "me too") is DeclineResult.ALREADY_ABORTED
    )
    assert c.head.get().checkpoint_id == cid


# == retention =============================================================================


def test_savepoints_are_never_subsumed(store: ObjectStore) -> None:
    c = _coordinator(store, num_retained=1)
    savepoint = _complete(c, 0, CheckpointType.SAVEPOINT)
    savepoint_files = [h.path for h in c.completed.get(savepoint).handles]
    checkpoints = [_complete(c, epoch) for epoch in range(1, 5)]

    assert c.completed.retained_ids() == [savepoint, checkpoints[-1]]
    c.garbage_collector().collect(history_limit=0)
    assert all(store.exists(path) for path in savepoint_files)
    assert c.completed.get(savepoint).pending.is_savepoint
    # and a savepoint stays restorable however far the head has moved on
    assert restore(c, savepoint).checkpoint_id == savepoint


def test_subsumption_keeps_num_retained(store: ObjectStore) -> None:
    c = _coordinator(store, num_retained=2)
    ids = []
    for epoch in range(5):
        ids.append(_complete(c, epoch))
        assert c.completed.retained_ids() == ids[-2:]
    files = {cid: [h.path for h in c.completed.get(cid).handles] for cid in ids}

    report = c.garbage_collector().collect()
    for cid in ids[:-2]:
        assert not any(store.exists(path) for path in files[cid]), cid
        assert set(files[cid]) <= set(report.deleted_files)
    for cid in ids[-2:]:
        assert all(store.exists(path) for path in files[cid]), cid
    assert c.head.get().checkpoint_id == ids[-1]


# == finalize checks the files ============================================================


def _acked_pending(c: CheckpointCoordinator) -> tuple[int, FileHandle]:
    p = c.trigger({"src": {"p0": 0}})
    _ack_all(c, p.checkpoint_id)
    (handle,) = c.acks(p.checkpoint_id)[TaskId("a", 1)].handles
    return p.checkpoint_id, handle


@pytest.mark.parametrize("damage", ["missing", "wrong size"])
def test_finalize_fails_on_damaged_file(store: ObjectStore, damage: str) -> None:
    c = _coordinator(store)
    cid, handle = _acked_pending(c)
    if damage == "missing":
        store.delete(handle.path)
        problem = f"{handle.path}: missing"
    else:
        store.put(handle.path, b"x" * (handle.size + 3))
        problem = f"{handle.path}: size {handle.size + 3} bytes, recorded {handle.size}"

    outcome = c.try_finalize(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is CheckpointFailureReason.FINALIZE_FAILED
    assert outcome.message == f"1 referenced file(s) are not intact: {problem}"
    assert c.head.get().checkpoint_id is None
    assert cid in c.failures.state().failed_ids


@pytest.mark.parametrize("verify_checksums", [True, False])
def test_flipped_byte_is_caught_by_checksums(store: ObjectStore, verify_checksums: bool) -> None:
    c = _coordinator(store, verify_checksums=verify_checksums)
    cid, handle = _acked_pending(c)
    data = bytearray(store.get(handle.path).data)
    data[len(data) // 2] ^= 0x01
    store.put(handle.path, bytes(data))

    outcome = c.try_finalize(cid)
    assert outcome is not None
    if verify_checksums:
        assert outcome.reason is CheckpointFailureReason.FINALIZE_FAILED
        assert handle.path in outcome.message
        assert f"recorded {handle.sha256[:12]}" in outcome.message
    else:
        # sizes alone cannot see it: that is what verify_checksums is for
        assert outcome.status is CheckpointStatus.COMPLETED


# == restore ===============================================================================


def test_late_finalize_of_old_timeline_cannot_move_head(store: ObjectStore) -> None:
    c = _coordinator(store, max_concurrent=3, num_retained=5)
    first = _complete(c, 0)
    second = _complete(c, 1)

    # (a) pending at restore: aborted by the restore itself
    p = c.trigger({"src": {"p0": 2}})
    _ack_all(c, p.checkpoint_id)
    head = restore(c, first)
    assert (head.checkpoint_id, head.restore_generation) == (first, 1)
    late = c.try_finalize(p.checkpoint_id)
    assert late is not None and late.reason is CheckpointFailureReason.RESTORED

    # (b) a trigger that read the head before the restore writes its pending record after
    # it: still of generation 0, based on the abandoned checkpoint
    stale_id = c.ids.get_and_increment()
    stale = replace(
        p,
        checkpoint_id=stale_id,
        restore_generation=0,
        base_checkpoint_id=second,
        base_barrier=c.get_checkpoint(second).barrier,
        deadline=p.deadline + 1e6,
    )
    store.create(c.layout.active(stale_id), stale.encode())
    _ack_all(c, stale_id)
    outcome = c.try_finalize(stale_id)
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is CheckpointFailureReason.RESTORED
    assert outcome.message == "a restore happened after it was triggered"

    # (c) a finalizer of the old timeline replaying its head move: the settle CAS of a
    # checkpoint it completed in generation 0
    completed_before = c.get_outcome(second)
    assert completed_before is not None and completed_before.completed is not None
    _, moved = c.control.update(lambda now: settle_outcome(now, completed_before, 5, 0.0))
    assert moved is False

    head = c.head.get()
    assert (head.checkpoint_id, head.restore_generation) == (first, 1)
    nxt = c.trigger({"src": {"p0": 3}})
    assert nxt.base_checkpoint_id == first and nxt.restore_generation == 1
    assert nxt.checkpoint_id > stale_id, "ids keep growing across restores"


def test_outcome_written_before_restore_settled_after_it(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finalizer that wrote COMPLETED and stalled before moving the head: the restore
    settles it first (in the old generation), and the stalled finalizer's retry cannot
    move the head of the new generation."""
    c = _coordinator(store, max_concurrent=2, num_retained=5)
    first = _complete(c, 0)
    p = c.trigger({"src": {"p0": 1}})
    _ack_all(c, p.checkpoint_id)
    with monkeypatch.context() as m:
        m.setattr(c.finalizer, "_after_outcome", lambda outcome: None)  # the stall
        assert c.try_finalize(p.checkpoint_id).status is CheckpointStatus.COMPLETED  # type: ignore[union-attr]
    assert c.head.get().checkpoint_id == first
    assert isinstance(c.get_pending(p.checkpoint_id), PendingCheckpoint)

    restore(c, first)
    c.try_finalize(p.checkpoint_id)  # the stalled finalizer resumes
    head = c.head.get()
    assert (head.checkpoint_id, head.restore_generation) == (first, 1)
    assert c.get_pending(p.checkpoint_id) is None


# == settling happens once ================================================================


def test_settled_checkpoint_is_not_settled_again(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sensors and Airflow retries call try_finalize/abort/decline on checkpoints that
    settled long ago; that must return the outcome and change nothing: not count a
    failure again after a reset, not re-add a subsumed checkpoint to the store."""
    clock = FakeClock()
    c = _coordinator(store, clock, tolerable_failed_checkpoints=0, num_retained=1)
    expired = c.trigger({"src": {"p0": 0}}).checkpoint_id
    clock.advance(601)
    assert [o.checkpoint_id for o in c.expire_overdue()] == [expired]
    assert c.failures.state().status is PipelineStatus.FAILED
    c.reset_failures()

    assert c.try_finalize(expired).reason is CheckpointFailureReason.EXPIRED  # type: ignore[union-attr]
    assert c.abort(expired, CheckpointFailureReason.EXPIRED).reason is (
        CheckpointFailureReason.EXPIRED
    )
    assert c.decline(expired, TaskId("b", 0), "late", "x") is DeclineResult.ALREADY_ABORTED
    state = c.failures.state()
    assert state.status is PipelineStatus.RUNNING and not state.failed_ids, state

    old = _complete(c, 1)
    new = _complete(c, 2)
    assert c.completed.retained_ids() == [new]
    c.garbage_collector().collect()
    assert c.control.load().is_discarded(old)
    assert c.try_finalize(old).status is CheckpointStatus.COMPLETED  # type: ignore[union-attr]
    assert c.completed.retained_ids() == [new], "a subsumed checkpoint came back"
