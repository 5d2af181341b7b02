"""Stop-with-savepoint stops (invariant 16, protocol/stopping.py): the stop is decided in
the savepoint's admission CAS and takes effect in its settle CAS, so a checkpoint
admitted before it never completes after it, whatever the interleaving; triggers refuse
while stopping or stopped (STOPPED); `resume` and any restore start the pipeline again.
Interleavings are forced with the hook store (tests/support/hooks.py), on the local
store and SeaweedFS."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from tests.support.hooks import HookStore, once

from batchpoint.errors import TriggerRefused
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointStatus,
    CheckpointType,
    FileHandle,
    TaskAcknowledgeResult,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.protocol.sinks import SinkPublisher
from batchpoint.protocol.stopping import NotStopped
from batchpoint.storage.base import ObjectStore
from support.clock import FakeClock
from support.restoring import restore

NAME = "stops"
SINKS = [("sink", "append", ["k"])]
STOP = CheckpointProperties(stop_pipeline=True)
CHECKPOINT, SAVEPOINT = CheckpointType.CHECKPOINT, CheckpointType.SAVEPOINT


def coordinator(store: Any, clock: FakeClock | None = None, **config: Any) -> CheckpointCoordinator:
    c = CheckpointCoordinator(store, NAME, CheckpointConfig(**config), clock or FakeClock())
    c.register(simple_pipeline(NAME, [("keyed", 2), ("sink", 1)]))
    return c


def ack_all(c: CheckpointCoordinator, cid: int) -> list[TaskAcknowledgeResult]:
    results = []
    for task in c.get_checkpoint(cid).expected_tasks:
        key = c.layout.task_data_prefix(cid, task, "a1") + "part-0.parquet"
        data = f"{task} of {cid}".encode() * 8
        c.store.put(key, data)
        handle = FileHandle(key, len(data), hashlib.sha256(data).hexdigest(), rows=1, name="s")
        results.append(c.acknowledge(cid, task, "a1", (handle,)))
    return results


def trigger(c: CheckpointCoordinator, offset: int, kind: CheckpointType, stop: bool = False) -> int:
    props = STOP if stop else None
    return c.trigger({"src": {"p0": offset}}, checkpoint_type=kind, properties=props).checkpoint_id


def stop_after_its_settle(c: CheckpointCoordinator, offset: int) -> int:
    """A stop-with-savepoint trigger from the point after its own settle (which found
    nothing to finalize yet): its admission, then its pending record."""
    pending = c.checkpoint_trigger.trigger(
        c.load_spec(),
        {"src": {"p0": offset}},
        checkpoint_type=SAVEPOINT,
        properties=STOP,
        timeout=None,
    )
    return pending.checkpoint_id


def complete(
    c: CheckpointCoordinator, offset: int, kind: CheckpointType, stop: bool = False
) -> int:
    cid = trigger(c, offset, kind, stop)
    ack_all(c, cid)
    outcome = c.try_finalize(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED, outcome
    c.notify_checkpoint_complete(cid, SINKS)
    return cid


def sink_epochs(c: CheckpointCoordinator) -> list[int]:
    manifest = SinkPublisher(c.store, c.layout).manifest("sink")
    assert manifest is not None
    return [e.checkpoint_id for e in manifest.chain()]


@pytest.mark.parametrize("acked", ["before the savepoint completes", "after it completes"])
def test_a_checkpoint_triggered_before_the_stop_and_acked_after_never_completes(
    store: ObjectStore, acked: str
) -> None:
    c = coordinator(store)
    first = complete(c, 1, CHECKPOINT)
    late = trigger(c, 2, CHECKPOINT)
    stop = trigger(c, 3, SAVEPOINT, stop=True)
    control = c.control.load()
    assert control.pending_entry(late) is None and control.is_discarded(late)
    assert control.stopping is not None and control.stopping.abandoned == (late,)
    assert c.get_checkpoint(stop).base_checkpoint_id == first  # not the abandoned one
    if acked == "before the savepoint completes":
        ack_all(c, late)
        outcome = c.try_finalize(late)
        assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    ack_all(c, stop)
    assert c.try_finalize(stop).status is CheckpointStatus.COMPLETED  # type: ignore[union-attr]
    if acked == "after it completes":
        assert set(ack_all(c, late)) == {TaskAcknowledgeResult.DISCARDED}
        c.try_finalize(late)
    outcome = c.get_outcome(late)
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is CheckpointFailureReason.STOPPED
    assert f"savepoint {stop}" in outcome.message
    control = c.control.load()
    assert control.head == stop and control.stopping is None
    assert control.stopped is not None and control.stopped.savepoint == stop
    assert late not in control.retained_ids()
    assert c.notify_checkpoint_complete(late, SINKS).published == []
    c.notify_checkpoint_complete(stop, SINKS)
    assert sink_epochs(c) == [first, stop]


@pytest.mark.parametrize("point", ["before its control read", "before its outcome write"])
def test_a_finalize_racing_the_stop_never_completes_after_it(
    store: ObjectStore, point: str
) -> None:
    """The abandoned checkpoint's finalizer is paused at a chosen call while the stop is
    admitted (by a trigger whose settle ran before the last ack: `trigger` settles
    first, and would complete the checkpoint itself). Before it read the control
    record: the finalizer sees it abandoned and aborts it. After (its decision taken,
    COMPLETED about to be written): the write lands, but the checkpoint is not pending
    any more, so it is never retained, never the head and never published; the
    savepoint keeps the abort-first order."""
    c = coordinator(store)
    first = complete(c, 1, CHECKPOINT)
    late = trigger(c, 2, CHECKPOINT)
    ack_all(c, late)
    stopped: list[int] = []
    armed: list[bool] = []  # not while the finalizer's side registers its pipeline
    if point == "before its control read":
        key_of = c.control.key
        when = lambda op, key: bool(armed) and op == "get" and key == key_of  # noqa: E731
    else:
        key_of = c.layout.outcome(late)
        when = lambda op, key: bool(armed) and op == "create" and key == key_of  # noqa: E731
    hook = once(lambda: stopped.append(stop_after_its_settle(c, 3)), when)
    finalizer_side = coordinator(HookStore(store, hook))
    armed.append(True)
    outcome = finalizer_side.try_finalize(late)
    assert hook.fired and outcome is not None
    (stop,) = stopped
    control = c.control.load()
    assert late not in control.retained_ids() and control.head == first
    if point == "before its control read":
        assert outcome.status is CheckpointStatus.ABORTED
        assert outcome.reason is CheckpointFailureReason.STOPPED
    else:
        assert outcome.status is CheckpointStatus.COMPLETED  # decided before the stop
    report = c.notify_checkpoint_complete(late, SINKS)
    assert report.published == []
    ack_all(c, stop)
    assert c.try_finalize(stop).status is CheckpointStatus.COMPLETED  # type: ignore[union-attr]
    assert c.get_outcome(late).status is outcome.status  # type: ignore[union-attr]
    c.notify_checkpoint_complete(stop, SINKS)
    control = c.control.load()
    assert control.head == stop and control.stopped is not None
    assert late not in control.retained_ids()
    assert sink_epochs(c) == [first, stop]


def test_a_trigger_while_stopping_or_stopped_is_refused(store: ObjectStore) -> None:
    c = coordinator(store)
    complete(c, 1, CHECKPOINT)
    stop = trigger(c, 2, SAVEPOINT, stop=True)
    for kind in (CHECKPOINT, SAVEPOINT):
        with pytest.raises(TriggerRefused) as refused:
            trigger(c, 3, kind)
        assert refused.value.reason is CheckpointFailureReason.STOPPED
        assert f"stopping: savepoint {stop}" in refused.value.detail
    ack_all(c, stop)
    c.try_finalize(stop)
    counter = c.ids.peek()
    for kind in (CHECKPOINT, SAVEPOINT):
        with pytest.raises(TriggerRefused) as refused:
            trigger(c, 3, kind, stop=kind is SAVEPOINT)
        assert refused.value.reason is CheckpointFailureReason.STOPPED
        detail = refused.value.detail
        assert f"stopped with savepoint {stop} at " in detail and "batchpoint resume" in detail
    assert c.ids.peek() == counter  # refused before an id was taken
    assert c.control.load().pending == ()


def test_resume_lets_the_next_checkpoint_complete_exactly_once(store: ObjectStore) -> None:
    c = coordinator(store)
    first = complete(c, 1, CHECKPOINT)
    with pytest.raises(NotStopped, match="is not stopped: nothing to resume"):
        c.resume()
    stop = complete(c, 2, SAVEPOINT, stop=True)
    assert c.stopped() is not None
    cleared = c.resume()
    assert cleared.savepoint == stop and c.stopped() is None
    after = trigger(c, 3, CHECKPOINT)
    assert c.get_checkpoint(after).base_checkpoint_id == stop
    ack_all(c, after)
    assert c.try_finalize(after).status is CheckpointStatus.COMPLETED  # type: ignore[union-attr]
    c.notify_checkpoint_complete(after, SINKS)
    c.notify_checkpoint_complete(after, SINKS)  # a retry publishes nothing twice
    assert sink_epochs(c) == [first, stop, after]
    assert c.control.load().head == after
    with pytest.raises(NotStopped):
        c.resume()


def test_a_restore_clears_the_stop(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=3)
    first = complete(c, 1, CHECKPOINT)
    complete(c, 2, SAVEPOINT, stop=True)
    restore(c, first)
    control = c.control.load()
    assert control.stopped is None and control.stopping is None and control.head == first
    complete(c, 3, CHECKPOINT)


def test_a_restore_while_stopping_clears_it_and_aborts_the_savepoint(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=3)
    first = complete(c, 1, CHECKPOINT)
    stop = trigger(c, 2, SAVEPOINT, stop=True)
    restore(c, first)
    assert c.control.load().stopping is None
    ack_all(c, stop)
    assert c.try_finalize(stop).status is CheckpointStatus.ABORTED  # type: ignore[union-attr]
    assert c.control.load().stopped is None
    complete(c, 3, CHECKPOINT)


def test_an_aborted_stop_savepoint_stops_nothing(store: ObjectStore) -> None:
    clock = FakeClock()
    c = coordinator(store, clock, timeout=60)
    complete(c, 1, CHECKPOINT)
    late = trigger(c, 2, CHECKPOINT)
    stop = trigger(c, 3, SAVEPOINT, stop=True)
    ack_all(c, late)  # in time: only the stop keeps it from completing
    clock.now += 120
    c.settle()
    stop_outcome = c.get_outcome(stop)
    assert stop_outcome is not None and stop_outcome.reason is CheckpointFailureReason.EXPIRED
    late_outcome = c.get_outcome(late)
    assert late_outcome is not None and late_outcome.reason is CheckpointFailureReason.STOPPED
    control = c.control.load()
    assert control.stopping is None and control.stopped is None
    complete(c, 4, CHECKPOINT)


@pytest.mark.parametrize("point", ["before admission", "between admission and record"])
def test_two_stop_savepoints_racing_one_wins(store: ObjectStore, point: str) -> None:
    c = coordinator(store)
    complete(c, 1, CHECKPOINT)
    other: list[object] = []

    def trigger_b() -> None:
        try:
            other.append(trigger(c, 2, SAVEPOINT, stop=True))
        except TriggerRefused as exc:
            other.append(exc)

    if point == "before admission":  # B runs whole while A holds a fresh id
        when = lambda op, key: op in ("create", "replace") and key == c.layout.id_counter  # noqa: E731
    else:  # B runs after A's admission, before A's pending record exists
        when = lambda op, key: op == "create" and key.startswith(c.layout.active_prefix)  # noqa: E731
    hook = once(trigger_b, when)
    a_side = coordinator(HookStore(store, hook))
    try:
        mine: object = trigger(a_side, 2, SAVEPOINT, stop=True)
    except TriggerRefused as exc:
        mine = exc
    assert hook.fired
    results = [mine, *other]
    won = [r for r in results if isinstance(r, int)]
    refused = [r for r in results if isinstance(r, TriggerRefused)]
    assert len(won) == 1 and len(refused) == 1, results
    assert refused[0].reason is CheckpointFailureReason.STOPPED
    control = c.control.load()
    assert [p.checkpoint_id for p in control.pending] == won
    assert control.stopping is not None and control.stopping.savepoint == won[0]


def test_an_import_is_admitted_while_stopped(store: ObjectStore) -> None:
    """A stopped pipeline may import the savepoint it is going to restore."""
    c = coordinator(store)
    complete(c, 1, CHECKPOINT)
    complete(c, 2, SAVEPOINT, stop=True)
    entry = c.checkpoint_trigger.admit_import(c.clock())
    assert entry.type is SAVEPOINT and entry.base is None


# == a repair is not a resume ==========================================================


@pytest.mark.parametrize("record", ["readable, forced", "damaged"])
def test_a_repair_keeps_a_stopped_pipeline_stopped(store: ObjectStore, record: str) -> None:
    c = coordinator(store, num_retained=3)
    complete(c, 1, CHECKPOINT)
    stop = complete(c, 2, SAVEPOINT, stop=True)
    if record == "damaged":
        c.store.put(c.layout.head, b'{"kind": "pipeline-control", "version": 2, "head": ')
    report = c.repair(force=True)
    control = c.control.load()
    assert control.head == stop
    assert control.stopped is not None and control.stopped.savepoint == stop
    assert any("stays stopped" in str(f) for f in report.findings), report.findings
    with pytest.raises(TriggerRefused) as refused:
        trigger(c, 3, CHECKPOINT)
    assert refused.value.reason is CheckpointFailureReason.STOPPED
    c.resume()
    complete(c, 3, CHECKPOINT)


def test_a_repair_after_a_restore_from_the_stop_savepoint_does_not_stop_again(
    store: ObjectStore,
) -> None:
    c = coordinator(store, num_retained=3)
    complete(c, 1, CHECKPOINT)
    stop = complete(c, 2, SAVEPOINT, stop=True)
    restore(c, stop)  # the usual deploy: stop with a savepoint, restore the new code from it
    c.store.put(c.layout.head, b'{"kind": "pipeline-control", "version": 2, "head": ')
    c.repair()
    assert c.control.load().stopped is None
    complete(c, 3, CHECKPOINT)
