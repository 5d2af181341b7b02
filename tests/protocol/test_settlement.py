"""The rules of protocol/settlement.py and protocol/timeline.py, as pure functions (no
store), and what a finalize says it waits for, through a real coordinator."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from batchpoint.protocol.checkpoint import (
    AUDIT_PROPERTY,
    AckRecord,
    CheckpointFailureReason,
    CheckpointStatus,
    CheckpointType,
    DeclineRecord,
    FileHandle,
    PendingCheckpoint,
    TaskMetrics,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.protocol.reads import AckProgress
from batchpoint.protocol.settlement import (
    Abort,
    AuditWait,
    FinalizeWait,
    SettlementAction,
    audit_wait,
    deadline_verdict,
    decide_settlement,
)
from batchpoint.protocol.timeline import is_stale, on_timeline
from batchpoint.storage.base import ObjectStore
from support.clock import FakeClock

TASKS = (TaskId("a", 0), TaskId("a", 1), TaskId("b", 0))
PENDING = PendingCheckpoint(
    pipeline="p",
    checkpoint_id=7,
    type=CheckpointType.CHECKPOINT,
    base_checkpoint_id=6,
    restore_generation=0,
    barrier={},
    base_barrier={},
    expected_tasks=TASKS,
    trigger_time=1000.0,
    deadline=1060.0,
)
AUDITED = replace(PENDING, properties={AUDIT_PROPERTY: True})


def _acks(*tasks: TaskId, at: float = 1010.0) -> dict[TaskId, AckRecord]:
    return {t: AckRecord(7, t, "att", (), TaskMetrics(), at) for t in tasks}


def _progress(*acked: TaskId, declines: tuple[DeclineRecord, ...] = ()) -> AckProgress:
    missing = tuple(t for t in TASKS if t not in acked)
    return AckProgress(7, CheckpointStatus.PENDING, acked, missing, declines, None)


# -- the restore generation -------------------------------------------------------------


def test_a_decision_is_stale_only_against_a_newer_generation() -> None:
    assert is_stale(0, 1) and is_stale(2, 5)
    assert not is_stale(1, 1) and not is_stale(2, 1)
    assert on_timeline(3, 3)
    assert not on_timeline(2, 3) and not on_timeline(3, 2)


# -- the deadlines ----------------------------------------------------------------------


def test_the_ack_deadline() -> None:
    assert (
        deadline_verdict(PENDING, _acks(TaskId("a", 0)), 1050.0, audited=False) is FinalizeWait.ACKS
    )
    expired = deadline_verdict(PENDING, _acks(TaskId("a", 0)), 1061.0, audited=False)
    assert isinstance(expired, Abort) and expired.reason is CheckpointFailureReason.EXPIRED
    assert expired.message == "not acknowledged within 60s by: a#1, b#0"
    late = {**_acks(TaskId("a", 0), TaskId("a", 1)), **_acks(TaskId("b", 0), at=1061.0)}
    verdict = deadline_verdict(PENDING, late, 1070.0, audited=False)
    assert isinstance(verdict, Abort) and verdict.message.endswith("by: b#0")
    assert deadline_verdict(PENDING, _acks(*TASKS), 1070.0, audited=False) is None


def test_the_audit_deadline() -> None:
    every = _acks(*TASKS)
    assert audit_wait(PENDING, 1050.0) is AuditWait.NONE
    assert audit_wait(AUDITED, 1050.0) is AuditWait.OPEN
    assert audit_wait(AUDITED, 1061.0) is AuditWait.OVERDUE
    assert audit_wait(AUDITED, 1061.0, audited=True) is AuditWait.NONE
    # anyone but the audit waits for the audit, acks missing or not
    assert deadline_verdict(AUDITED, every, 1050.0, audited=False) is FinalizeWait.AUDIT
    assert (
        deadline_verdict(AUDITED, _acks(TaskId("a", 0)), 1050.0, audited=False)
        is FinalizeWait.AUDIT
    )
    assert deadline_verdict(AUDITED, every, 1050.0, audited=True) is None
    overdue = deadline_verdict(AUDITED, every, 1061.0, audited=False)
    assert isinstance(overdue, Abort) and overdue.reason is CheckpointFailureReason.EXPIRED
    assert overdue.message == "every task acknowledged it, but its audit gave no verdict within 60s"


# -- a run that is over -----------------------------------------------------------------


def test_a_run_that_is_over_settles_its_checkpoint_by_one_table() -> None:
    decline = DeclineRecord(7, TaskId("a", 1), "att", "out of memory", 1020.0)
    declined = decide_settlement(
        PENDING, _progress(TaskId("a", 0), declines=(decline,)), {}, 1030.0
    )
    assert declined.action is SettlementAction.DECLINED
    assert declined.abort == Abort(
        CheckpointFailureReason.DECLINED, "task a#1 declined: out of memory"
    )

    failed = decide_settlement(
        PENDING, _progress(TaskId("a", 0)), {"a": "killed", "c": "x"}, 1030.0
    )
    assert (failed.action, failed.abort) == (SettlementAction.DECLINED, None)
    assert dict(failed.decline) == {TaskId("a", 1): "killed"}  # only its subtasks still missing

    finalized = decide_settlement(PENDING, _progress(*TASKS), {"a": "killed"}, 1030.0)
    assert (finalized.action, finalized.abort) == (SettlementAction.FINALIZED, None)

    no_verdict = decide_settlement(AUDITED, _progress(*TASKS), {}, 1030.0)
    assert no_verdict.action is SettlementAction.ABORTED and no_verdict.abort is not None
    assert no_verdict.abort.reason is CheckpointFailureReason.FINALIZE_FAILED
    # past its deadline an audited one is finalized (which expires it, as settle would)
    late_audit = decide_settlement(AUDITED, _progress(*TASKS), {}, 1061.0)
    assert late_audit.action is SettlementAction.FINALIZED

    expired = decide_settlement(PENDING, _progress(TaskId("a", 0)), {}, 1060.0)
    assert expired.action is SettlementAction.EXPIRED and expired.abort is not None
    assert expired.abort.message == "not acknowledged within 60s by: a#1, b#0"

    stopped = decide_settlement(PENDING, _progress(TaskId("a", 0)), {}, 1030.0)
    assert stopped.action is SettlementAction.ABORTED and stopped.abort is not None
    assert stopped.abort.reason is CheckpointFailureReason.EXPIRED
    assert "ended before every task acknowledged (missing: a#1, b#0)" in stopped.abort.message
    assert SettlementAction.ABORTED == "aborted"  # what reports show, as before


# -- what a finalize waits for, through the coordinator ---------------------------------


@pytest.fixture
def coordinator(store: ObjectStore) -> CheckpointCoordinator:
    spec = simple_pipeline("waits", [("a", 2)])
    c = CheckpointCoordinator(store, spec, CheckpointConfig(max_concurrent=2), FakeClock())
    c.register(spec)
    return c


def _ack_all(c: CheckpointCoordinator, checkpoint_id: int) -> None:
    for task in (TaskId("a", 0), TaskId("a", 1)):
        key = c.layout.task_data_prefix(checkpoint_id, task, "att") + "f"
        c.store.put(key, b"x")
        handle = FileHandle(key, 1, hashlib.sha256(b"x").hexdigest())
        c.acknowledge(checkpoint_id, task, "att", [handle])


def test_finalize_says_what_it_waits_for(coordinator: CheckpointCoordinator) -> None:
    c = coordinator
    base = c.trigger({"src": {"p0": 0}}).checkpoint_id
    later = c.trigger({"src": {"p0": 1}}).checkpoint_id
    assert c.finalize(later) is FinalizeWait.ACKS
    _ack_all(c, later)
    assert c.finalize(later) is FinalizeWait.BASE  # its base is still pending
    assert c.try_finalize(later) is None
    _ack_all(c, base)
    done = c.finalize(base)
    assert not isinstance(done, FinalizeWait) and done.status is CheckpointStatus.COMPLETED
    after = c.finalize(later)
    assert not isinstance(after, FinalizeWait) and after.status is CheckpointStatus.COMPLETED
