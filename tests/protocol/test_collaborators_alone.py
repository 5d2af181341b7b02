"""Each protocol collaborator built alone (Flink's PendingCheckpointTest): from the real
parts the composition root gives it (the records port, the files port, the control
store, the fake clock, over a local store) and, for what it must ask of another collaborator, a
recording function written here, so that each test shows exactly what its one
collaborator asks of the others. The records a test starts from are written by hand
(tests/support/collaborator_parts.py). This file: one checkpoint's lifecycle (ack
accounting, finalize, trigger, restore, publish); test_collaborators_alone_upkeep.py:
savepoints, GC, repair and statistics."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from batchpoint.errors import TriggerRefused
from batchpoint.protocol.ack_accounting import AckAccounting, DecideAbort
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointOutcome,
    CheckpointStatus,
    CheckpointType,
    DeclineResult,
    PendingCheckpoint,
    TaskAcknowledgeResult,
)
from batchpoint.protocol.completed_store import CompletedCheckpointStore
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.control import PendingEntry
from batchpoint.protocol.decider import CheckpointRequestDecider
from batchpoint.protocol.failures import CheckpointFailureManager
from batchpoint.protocol.finalizer import CheckpointFinalizer
from batchpoint.protocol.ids import CheckpointIDCounter
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.protocol.ports import AbortCheckpoint
from batchpoint.protocol.publish import CompletionNotifier, SinkTarget
from batchpoint.protocol.quarantine import QuarantineStore
from batchpoint.protocol.restorer import CheckpointRestorer
from batchpoint.protocol.settlement import Abort, FinalizeWait
from batchpoint.protocol.sink_manifest import SinkMode
from batchpoint.protocol.sinks import SinkPublisher
from batchpoint.protocol.trigger import CheckpointTrigger, DeployBase
from support.collaborator_parts import (
    K0,
    K1,
    PIPELINE,
    S0,
    TASKS,
    TIMEOUT,
    Parts,
    write_ack,
    write_completed,
    write_file,
    write_pending,
)
from support.python_source import parse_file

SPEC = simple_pipeline(PIPELINE, [("keyed", 2), ("sink", 1)])
SINK = SinkTarget("sink", SinkMode.APPEND, ("k",))
Asked = list[tuple[object, ...]]


@pytest.fixture
def parts(tmp_path: Path) -> Parts:
    return Parts.at(tmp_path)


def recording_abort(asked: Asked) -> AbortCheckpoint:
    """An `abort` port (CheckpointFinalizer.abort) that only says what it was asked (and
    the trigger time, when a trigger gives it: the `AbortAtTrigger` port)."""

    def abort(
        checkpoint_id: int,
        reason: CheckpointFailureReason,
        message: str,
        triggered_at: float | None = None,
    ) -> CheckpointOutcome:
        said = (checkpoint_id, reason, message)
        asked.append(said if triggered_at is None else (*said, triggered_at))
        entry = PendingEntry(checkpoint_id, CheckpointType.CHECKPOINT, None, 0, 0.0)
        placeholder = entry.placeholder(PIPELINE, triggered_at)
        return CheckpointOutcome(
            CheckpointStatus.ABORTED, placeholder, 0.0, reason=reason, message=message
        )

    return abort


def failures_of(parts: Parts) -> CheckpointFailureManager:
    return CheckpointFailureManager(parts.store, parts.layout, tolerable=0)


def test_no_test_of_a_collaborator_alone_builds_the_coordinator() -> None:
    here = Path(__file__)
    files = [here, here.with_name("test_collaborators_alone_upkeep.py")]
    files.append(here.parents[1] / "support" / "collaborator_parts.py")
    for path in files:
        tree = parse_file(path)
        modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        assert "batchpoint.protocol.coordinator" not in modules, path.name
        assert "CheckpointCoordinator" not in names, path.name


# == AckAccounting: the acks are write-once, a decline asks for an abort =================


def ack_accounting(parts: Parts, decide_abort: DecideAbort) -> AckAccounting:
    return AckAccounting(
        records=parts.records, files=parts.files, clock=parts.clock, decide_abort=decide_abort
    )


def test_ack_accounting_writes_one_ack_and_refuses_another_attempt(parts: Parts) -> None:
    asked: Asked = []

    def decide_abort(pending: PendingCheckpoint, abort: Abort) -> tuple[bool, CheckpointOutcome]:
        asked.append((pending.checkpoint_id, abort))
        raise AssertionError("an ack never aborts")

    accounting = ack_accounting(parts, decide_abort)
    write_pending(parts, 1)
    mine, theirs = (
        write_file(parts, parts.layout.task_data_prefix(1, K0, a) + "part-0", a)
        for a in ("a1", "a2")
    )
    ok = TaskAcknowledgeResult.SUCCESS
    assert accounting.acknowledge(1, K0, "a1", [mine]) is ok
    assert accounting.acknowledge(1, K0, "a1", [mine]) is ok  # the same attempt again
    assert accounting.acknowledge(1, K0, "a2", [theirs]) is TaskAcknowledgeResult.DUPLICATE
    assert accounting.acknowledge(1, TaskId("other", 0), "a1") is TaskAcknowledgeResult.UNKNOWN
    acks = parts.reads.acks(1)
    assert list(acks) == [K0]
    assert (acks[K0].attempt, acks[K0].acked_at) == ("a1", parts.clock())
    assert parts.store.exists(mine.path)
    assert not parts.store.exists(theirs.path)  # the losing attempt's own file goes
    assert asked == []


def test_ack_accounting_asks_decide_abort_when_a_task_declines(parts: Parts) -> None:
    asked: Asked = []
    won = [True]

    def decide_abort(pending: PendingCheckpoint, abort: Abort) -> tuple[bool, CheckpointOutcome]:
        asked.append((pending.checkpoint_id, abort))
        status = CheckpointStatus.ABORTED if won[0] else CheckpointStatus.COMPLETED
        return won[0], CheckpointOutcome(status, pending, parts.clock(), reason=abort.reason)

    accounting = ack_accounting(parts, decide_abort)
    write_pending(parts, 1)
    write_ack(parts, 1, K0)
    assert accounting.decline(1, K0, "a1", "late") is DeclineResult.IGNORED_ACKNOWLEDGED
    assert accounting.decline(1, TaskId("nobody", 0), "a1", "?") is DeclineResult.UNKNOWN
    assert asked == []
    assert accounting.decline(1, K1, "a1", "disk full") is DeclineResult.ABORTED
    declined = Abort(CheckpointFailureReason.DECLINED, "task keyed#1 declined: disk full")
    assert asked == [(1, declined)]
    assert [(d.task, d.reason) for d in parts.reads.declines(1)] == [(K1, "disk full")]
    won[0] = False  # a finalize decided first: the decline came too late
    assert accounting.decline(1, S0, "a1", "gone") is DeclineResult.IGNORED_COMPLETED


# == CheckpointFinalizer: the outcome, written once, and the settle after it ===============


def finalizer(parts: Parts) -> CheckpointFinalizer:
    return CheckpointFinalizer(
        records=parts.records,
        files=parts.files,
        control=parts.control,
        failures=failures_of(parts),
        config=CheckpointConfig(timeout=TIMEOUT),
        clock=parts.clock,
    )


def test_finalizer_completes_a_checkpoint_once_every_ack_is_in(parts: Parts) -> None:
    subject = finalizer(parts)
    write_pending(parts, 1)
    for task in TASKS[:-1]:
        write_ack(parts, 1, task)
    assert subject.finalize(1) is FinalizeWait.ACKS
    assert parts.reads.get_outcome(1) is None
    write_ack(parts, 1, TASKS[-1])
    outcome = subject.finalize(1)
    assert isinstance(outcome, CheckpointOutcome)
    assert outcome.status is CheckpointStatus.COMPLETED
    assert outcome.completed is not None
    assert [a.task for a in outcome.completed.acks] == list(TASKS)
    stored = parts.reads.get_outcome(1)
    assert stored is not None and stored.status is CheckpointStatus.COMPLETED
    control = parts.control.load()
    assert (control.head, control.retained_ids(), control.pending) == (1, [1], ())
    assert not parts.store.exists(parts.layout.active(1))  # the marker goes last
    assert failures_of(parts).state().last_completed_id == 1
    assert subject.finalize(1) == outcome  # decided once: a retry reads it


def test_finalizer_aborts_a_checkpoint_whose_file_is_not_intact(parts: Parts) -> None:
    subject = finalizer(parts)
    write_pending(parts, 1)
    acks = [write_ack(parts, 1, task) for task in TASKS]
    parts.store.delete(acks[1].handles[0].path)
    outcome = subject.finalize(1)
    assert isinstance(outcome, CheckpointOutcome)
    assert outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is CheckpointFailureReason.FINALIZE_FAILED
    assert "1 referenced file(s) are not intact" in outcome.message
    control = parts.control.load()
    assert (control.head, control.pending, control.is_discarded(1)) == (None, (), True)
    assert failures_of(parts).state().failed_ids == (1,)


def test_finalizer_expires_a_checkpoint_past_its_deadline(parts: Parts) -> None:
    subject = finalizer(parts)
    write_pending(parts, 1)
    write_ack(parts, 1, K0)
    assert subject.settle() == []
    parts.clock.advance(TIMEOUT + 1)
    [outcome] = subject.settle()
    assert outcome.reason is CheckpointFailureReason.EXPIRED
    assert outcome.message.endswith("by: keyed#1, sink#0")
    assert parts.control.load().is_discarded(1)


# == CheckpointTrigger: allocate, admit with the decider, write the pending record =========


def trigger_of(parts: Parts, asked: Asked) -> CheckpointTrigger:
    config = CheckpointConfig(timeout=TIMEOUT)
    return CheckpointTrigger(
        records=parts.records,
        control=parts.control,
        ids=CheckpointIDCounter(parts.store, parts.layout),
        decider=CheckpointRequestDecider(PIPELINE, config, parts.control.key),
        failures=failures_of(parts),
        config=config,
        clock=parts.clock,
        abort=recording_abort(asked),
    )


def test_trigger_allocates_an_id_admits_it_and_writes_its_record(parts: Parts) -> None:
    asked: Asked = []
    subject = trigger_of(parts, asked)
    kind = CheckpointType.CHECKPOINT
    first = subject.trigger(SPEC, {"src": 7}, checkpoint_type=kind, properties=None, timeout=None)
    assert (first.checkpoint_id, first.base_checkpoint_id) == (1, None)
    assert (first.expected_tasks, first.deadline) == (TASKS, parts.clock() + TIMEOUT)
    assert parts.reads.get_pending(1) == first
    assert parts.control.load().pending == (PendingEntry.of(first),)
    with pytest.raises(TriggerRefused) as refused:  # the decider: one pending at a time
        subject.trigger(SPEC, {"src": 8}, checkpoint_type=kind, properties=None, timeout=None)
    assert refused.value.reason is CheckpointFailureReason.TOO_MANY_CONCURRENT
    assert [p.checkpoint_id for p in parts.control.load().pending] == [1]
    # The refusal used no id; an import is admitted beside the pending one, with no base.
    imported = subject.admit_import(parts.clock())
    assert (imported.checkpoint_id, imported.base, imported.imported) == (2, None, True)
    assert asked == []


def test_trigger_builds_on_the_head_and_asks_abort_when_the_deploy_is_refused(
    parts: Parts,
) -> None:
    write_completed(parts, 1)
    CheckpointIDCounter(parts.store, parts.layout).get_and_increment()  # 1 was allocated
    asked: Asked = []
    judged: list[DeployBase] = []

    def check_base(base: DeployBase) -> list[str]:
        judged.append(base)
        return ["operator keyed changed its key"]

    with pytest.raises(TriggerRefused) as refused:
        trigger_of(parts, asked).trigger(
            SPEC, {"src": 9}, checkpoint_type=CheckpointType.CHECKPOINT, properties=None,
            timeout=None, check_base=check_base,
        )  # fmt: skip
    assert refused.value.reason is CheckpointFailureReason.INCOMPATIBLE_DEPLOY
    # the base the admission chose, the head, read for the check: completed
    assert [(b.checkpoint_id, b.completed is not None) for b in judged] == [(1, True)]
    assert parts.control.load().pending_entry(2) is not None  # admitted, then handed to abort
    refusal = "operator keyed changed its key"
    # with its trigger time: no pending record will say when it was triggered
    assert asked == [(2, CheckpointFailureReason.INCOMPATIBLE_DEPLOY, refusal, parts.clock())]
    assert parts.reads.get_pending(2) is None  # and no pending record written


# == CheckpointRestorer: one CAS moves the head, the roll-forward aborts what it left ======


def restorer_of(parts: Parts, asked: Asked) -> CheckpointRestorer:
    return CheckpointRestorer(
        records=parts.records,
        control=parts.control,
        completed=CompletedCheckpointStore(parts.store, parts.layout, parts.control),
        quarantine=QuarantineStore(parts.store, parts.layout),
        sinks=SinkPublisher(parts.store, parts.layout),
        failures=failures_of(parts),
        clock=parts.clock,
        abort=recording_abort(asked),
        verify_checksums=True,
    )


def test_restorer_moves_the_head_rewinds_the_sink_and_asks_abort_for_the_abandoned(
    parts: Parts,
) -> None:
    sinks = SinkPublisher(parts.store, parts.layout)
    for completed in (write_completed(parts, 1), write_completed(parts, 2, base=1)):
        assert sinks.publish(completed, "sink", SinkMode.APPEND, ["k"])
    write_pending(parts, 3, base=2)
    asked: Asked = []
    restorer = restorer_of(parts, asked)
    chosen = restorer.choose(1)  # the candidate walk, then the one way in
    head = restorer.restore(chosen.target)
    assert (head.checkpoint_id, head.restore_generation, chosen.skipped) == (1, 1, ())
    control = parts.control.load()
    assert (control.head, control.pending, control.is_discarded(3)) == (1, (), True)
    assert control.restore is not None and control.restore.sinks_rewound
    assert asked == [(3, CheckpointFailureReason.RESTORED, "restore to checkpoint 1")]
    manifest = sinks.manifest("sink")
    assert manifest is not None and (manifest.current, manifest.generation) == (1, 1)
    assert parts.store.exists(parts.layout.restore(1))


def test_restorer_skips_a_damaged_candidate_and_quarantines_it(parts: Parts) -> None:
    write_completed(parts, 1)
    damaged = write_completed(parts, 2, base=1)
    parts.store.put(damaged.handles[0].path, b"not what was written")
    asked: Asked = []
    restorer = restorer_of(parts, asked)
    chosen = restorer.choose()
    assert restorer.restore(chosen.target).checkpoint_id == 1
    assert [f.checkpoint_id for f in chosen.skipped] == [2]
    assert "quarantined" in chosen.skipped[0].problem
    assert QuarantineStore(parts.store, parts.layout).held(2) is not None
    assert asked == []  # nothing was pending: nothing to abort


# == CompletionNotifier: roll a restore forward, then publish on the timeline only =========


def notifier_of(parts: Parts, asked: Asked) -> CompletionNotifier:
    sinks = SinkPublisher(parts.store, parts.layout)

    def roll_forward() -> None:
        asked.append(("roll_forward", sinks.manifest("sink")))

    def alias_of(checkpoint_id: int) -> int | None:
        asked.append(("alias_of", checkpoint_id))
        return None

    return CompletionNotifier(
        reads=parts.reads,
        control=parts.control,
        sinks=sinks,
        roll_forward=roll_forward,
        alias_of=alias_of,
        base_of=lambda checkpoint_id: None,
    )


def test_notifier_rolls_forward_first_then_publishes_the_unpublished_chain(
    parts: Parts,
) -> None:
    write_completed(parts, 1)
    write_completed(parts, 2, base=1)
    asked: Asked = []
    subject = notifier_of(parts, asked)
    report = subject.notify_checkpoint_complete(2, [SINK])
    assert asked == [("roll_forward", None)]  # before any manifest was written
    assert (report.published, report.stale) == (["sink@1", "sink@2"], "")
    manifest = SinkPublisher(parts.store, parts.layout).manifest("sink")
    assert manifest is not None and (manifest.current, sorted(manifest.epochs)) == (2, [1, 2])
    assert subject.notify_checkpoint_complete(2, [SINK]).published == []  # idempotent


def test_notifier_refuses_a_checkpoint_off_the_current_timeline(parts: Parts) -> None:
    write_completed(parts, 1)
    write_completed(parts, 2, base=1)
    parts.change_control(lambda c: replace(c, head=1, restore_generation=1))  # a restore to 1
    asked: Asked = []
    report = notifier_of(parts, asked).notify_checkpoint_complete(2, [SINK])
    assert report.is_stale and "not on the current timeline" in report.stale
    assert report.published == []
    assert SinkPublisher(parts.store, parts.layout).manifest("sink") is None
    assert asked == [("roll_forward", None)]
