"""A restore in doubt (model seed 8038 of the Delta model): the control record is lost
after a restore wrote its intent and before its roll-forward wrote anything, so no
record but the lost one says whether its compare-and-swap moved the head. `repair`
must neither rebuild on the old timeline (losing the restore) nor invent the restore:
it refuses naming both heads, and `--head` (the operator's answer) rebuilds on either.
Invariant 14: repair derives only what the records prove.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from batchpoint.protocol.checkpoint import CheckpointType
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.protocol.repair import RepairStatus
from batchpoint.protocol.savepoints import SavepointLocation
from batchpoint.storage.base import ObjectStore
from support.protocol_steps import complete, coordinator, manifest


class _Crash(BaseException):
    """The process dies here: nothing after it runs, no handler sees it."""


def _damage(c: CheckpointCoordinator) -> None:
    data = c.store.get(c.layout.head).data
    c.store.put(c.layout.head, data[: len(data) // 2])  # the control record cut short


def _intents(c: CheckpointCoordinator) -> list[tuple[int, int | None]]:
    return sorted((i.restore_generation, i.checkpoint_id) for i, _ in c.records.restore_intents())


def _restore_without_roll_forward(c: CheckpointCoordinator, cid: int) -> int:
    """A restore whose process died right after its compare-and-swap; its generation."""
    examined = c.restorer.choose(cid).target
    finish = c.restorer.finish
    calls = 0

    def finish_once() -> None:  # the roll-forward before the move runs; the one after dies
        nonlocal calls
        calls += 1
        if calls > 1:
            raise _Crash
        finish()

    c.restorer.finish = finish_once  # type: ignore[method-assign]
    try:
        with pytest.raises(_Crash):
            c.restorer.restore(examined)
    finally:
        del c.restorer.finish
    moved = c.control.load()
    assert moved.head == cid and moved.restore is not None and not moved.restore.sinks_rewound
    return moved.restore_generation


def _imported(c: CheckpointCoordinator, store: ObjectStore) -> tuple[int, int]:
    """A savepoint exported and imported back, then a newer checkpoint: (import, head)."""
    complete(c)
    savepoint = complete(c, CheckpointType.SAVEPOINT)
    head = complete(c)
    c.savepoints.export(savepoint, SavepointLocation(store, "savepoints/old"))
    imported = c.savepoints.import_folder(SavepointLocation(store, "savepoints/old"))
    return imported.checkpoint_id, head


def test_a_restore_that_moved_the_head_is_refused_then_finished_with_head(
    store: ObjectStore,
) -> None:
    c = coordinator(store, num_retained=5)
    imported, old_head = _imported(c, store)
    generation = _restore_without_roll_forward(c, imported)
    _damage(c)

    report = c.repair()
    assert report.status is RepairStatus.REFUSED, report.findings
    assert [(i.restore_generation, i.checkpoint_id) for i in report.plan.in_doubt] == [
        (generation, imported)
    ]
    assert f"`batchpoint repair --head {imported}`" in report.reason
    assert f"`batchpoint repair --head {old_head}`" in report.reason
    assert c.control.snapshot().damage is not None

    done = c.repair(head=imported)
    assert done.status is RepairStatus.WRITTEN, done.reason
    control = c.control.load()
    assert control.head == imported and control.restore_generation > generation
    assert control.restore is not None and control.restore.sinks_rewound
    assert manifest(c).generation == control.restore_generation


def _dies_before_its_move(c: CheckpointCoordinator, cid: int) -> None:
    examined = c.restorer.choose(cid).target

    def die(_mutate: Callable[[Any], Any]) -> Any:
        raise _Crash

    c.control.update = die  # type: ignore[method-assign]
    try:
        with pytest.raises(_Crash):
            c.restorer.restore(examined)
    finally:
        del c.control.update


def test_a_restore_that_died_before_its_move_is_refused_then_kept_with_head(
    store: ObjectStore,
) -> None:
    c = coordinator(store, num_retained=5)
    imported, old_head = _imported(c, store)
    _dies_before_its_move(c, imported)
    assert c.control.load().head == old_head  # the move never happened
    _damage(c)

    report = c.repair()
    assert report.status is RepairStatus.REFUSED
    assert report.head == old_head  # the head the other records prove, offered
    kept = c.repair(head=old_head)
    assert kept.status is RepairStatus.WRITTEN, kept.reason
    assert c.control.load().head == old_head


@pytest.mark.parametrize("answer", ["keep the stop", "finish the restore"])
def test_a_stopped_pipeline_stays_stopped_unless_the_answer_is_the_restore(
    store: ObjectStore, answer: str
) -> None:
    """Invariant 16: only a restore or resume starts a stopped pipeline again. Keeping
    the proven head (the stop's savepoint) keeps the stop; finishing the restore in
    doubt starts the pipeline, as the restore would have."""
    c = coordinator(store, num_retained=5)
    first = complete(c)
    stop = complete(
        c, CheckpointType.SAVEPOINT, properties=CheckpointProperties(stop_pipeline=True)
    )
    assert c.control.load().stopped is not None
    _dies_before_its_move(c, first)
    _damage(c)
    assert c.repair().status is RepairStatus.REFUSED

    chosen = stop if answer == "keep the stop" else first
    assert c.repair(head=chosen).status is RepairStatus.WRITTEN
    control = c.control.load()
    assert control.head == chosen
    if answer == "keep the stop":
        assert control.stopped is not None and control.stopped.savepoint == stop
    else:
        assert control.stopped is None


def test_a_finished_restore_leaves_nothing_in_doubt(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=5)
    imported, _ = _imported(c, store)
    c.restorer.restore(c.restorer.choose(imported).target)
    _damage(c)

    report = c.repair()
    assert report.status is RepairStatus.WRITTEN, report.reason
    assert report.plan.in_doubt == ()
    assert c.control.load().head == imported


def test_a_restore_that_lost_its_generation_withdraws_its_intent(store: ObjectStore) -> None:
    """Restore A reads generation 0 and writes its intent; restore B (another process)
    takes generation 1 before A's compare-and-swap; A withdraws and moves as 2."""
    c = coordinator(store, num_retained=5)
    first = complete(c)
    second = complete(c)
    complete(c)
    other = coordinator(store, num_retained=5)
    update = c.control.update
    raced = False

    def racing_update(mutate: Callable[[Any], Any]) -> Any:
        nonlocal raced
        if not raced:
            raced = True
            other.restorer.restore(other.restorer.choose(second).target)
        return update(mutate)

    c.control.update = racing_update  # type: ignore[method-assign]
    try:
        generation = _restore_without_roll_forward(c, first)
    finally:
        del c.control.update
    assert generation == 2
    assert _intents(c) == [(1, second), (2, first)]  # A's intent for 1 was withdrawn
    _damage(c)

    report = c.repair()
    assert report.status is RepairStatus.REFUSED
    assert [(i.restore_generation, i.checkpoint_id) for i in report.plan.in_doubt] == [(2, first)]
    assert report.head == second  # B's restore is proven by its record
    assert c.repair(head=first).status is RepairStatus.WRITTEN
    assert c.control.load().head == first


def test_head_must_name_a_checkpoint_that_can_be_the_head(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=5)
    imported, _ = _imported(c, store)
    _restore_without_roll_forward(c, imported)
    _damage(c)
    report = c.repair(head=999)
    assert report.status is RepairStatus.REFUSED
    assert report.reason == "checkpoint 999 cannot be the head: no outcome record"
    assert c.control.snapshot().damage is not None
