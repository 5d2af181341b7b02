"""Regression tests for issue 24's reproductions 2 and 3: `repair` respects history.

It derives the head from the outcome *and* restore records (never an epoch a restore
abandoned, never an imported savepoint no restore chose, never a quarantined
checkpoint), refuses a readable control record unless forced (and then says what it
changes), and writes by compare-and-swap on what it read. Interleavings run from a hook
in a store wrapper at a chosen call of repair, never from sleeps; every test runs on the
local store and on SeaweedFS.
"""

from __future__ import annotations

import pytest
from tests.support.hooks import HookStore, once

from batchpoint.ops.maintenance import gc as ops_gc
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointStatus,
    CheckpointType,
)
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.repair import RepairStatus
from batchpoint.protocol.savepoints import SavepointLocation
from batchpoint.quality.quarantine import QuarantineStore
from batchpoint.storage.base import ObjectStore
from support.clock import FakeClock
from support.protocol_steps import (
    ack_all,
    complete,
    coordinator,
    manifest,
    quarantine,
    sink_epochs,
)
from support.restoring import restore


def snapshot(store: ObjectStore) -> dict[str, bytes]:
    """Every object and its bytes: equal before and after means nothing was written."""
    return {info.key: store.get(info.key).data for info in store.list("")}


def damage_control_record(c: CheckpointCoordinator) -> None:
    c.store.put(c.layout.head, b'{"kind": "pipeline-control", "version": 1, "head": ')


# == reproduction 2: repair never restores what a restore abandoned ======================


@pytest.mark.parametrize("after_restore", ["quarantined", "abandoned", "one completed"])
def test_repair_keeps_the_head_a_restore_chose(store: ObjectStore, after_restore: str) -> None:
    c = coordinator(store, num_retained=5)
    first, second, third = complete(c), complete(c), complete(c)
    if after_restore == "quarantined":
        quarantine(c, second)
        quarantine(c, third)
    restore(c, first)
    expected = complete(c) if after_restore == "one completed" else first
    assert sink_epochs(c) == sorted({first, expected})
    damage_control_record(c)

    report = c.repair()
    assert report.status is RepairStatus.WRITTEN
    head = c.head.get()
    assert head.checkpoint_id == expected, report.findings
    assert head.restore_generation == 2  # above the restore's, so its stale work stays stale
    # the sinks are rewound to the head, never republished from the abandoned epochs
    assert manifest(c).current == expected and sink_epochs(c) == sorted({first, expected})
    assert {second, third} <= set(c.completed.retained_ids())  # kept, as the restore kept them
    said = " ".join(map(str, report.findings))
    assert f"checkpoint {third}" in said and "not the head" in said
    assert c.trigger({"src": {"p0": 9}}).base_checkpoint_id == expected


def test_a_restore_whose_record_is_lost_still_counts(store: ObjectStore) -> None:
    """The restore's roll-forward rewound the sinks but its record is gone (and so is
    the control record): the sinks' generation still names the restore."""
    c = coordinator(store, num_retained=5)
    first = complete(c)
    complete(c)
    complete(c)
    restore(c, first)
    store.delete(c.layout.restore(1))
    store.delete(c.layout.head)

    report = c.repair()
    assert report.status is RepairStatus.WRITTEN
    assert c.head.get().checkpoint_id == first
    assert c.head.get().restore_generation == 2  # above the sinks' generation: rewinds apply
    assert manifest(c).current == first and manifest(c).generation == 2
    assert any("sink sink shows checkpoint" in f.problem for f in report.findings)


def test_repair_never_makes_an_imported_savepoint_the_head(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=5)
    complete(c)
    savepoint = complete(c, CheckpointType.SAVEPOINT)
    complete(c)
    head = complete(c)
    c.savepoints.export(savepoint, SavepointLocation(store, "savepoints/old"))
    imported = c.savepoints.import_folder(SavepointLocation(store, "savepoints/old")).checkpoint_id
    epochs = sink_epochs(c)
    store.delete(c.layout.head)

    report = c.repair()
    assert report.status is RepairStatus.WRITTEN
    assert c.head.get().checkpoint_id == head
    assert imported in c.completed.retained_ids()  # retained, never the head
    assert manifest(c).current == head and sink_epochs(c) == epochs
    assert any(f.checkpoint_id == imported and "imported" in f.problem for f in report.findings)

    # once a restore chose it, it is the head a repair keeps
    restore(c, imported)
    damage_control_record(c)
    assert c.repair().status is RepairStatus.WRITTEN
    assert c.head.get().checkpoint_id == imported
    assert manifest(c).current == imported


def test_repair_leaves_an_agreeing_record_and_refuses_a_readable_one_unless_forced(
    store: ObjectStore,
) -> None:
    c = coordinator(store, num_retained=5)
    first, second = complete(c), complete(c)
    before = snapshot(store)
    planned = c.repair(dry_run=True)
    assert planned.status is RepairStatus.DRY_RUN and planned.agrees
    agreeing = c.repair()  # run by mistake on a healthy pipeline: nothing to do
    assert agreeing.status is RepairStatus.UNCHANGED and agreeing.agrees
    assert agreeing.changes == ()
    assert snapshot(store) == before

    quarantine(c, second)  # the record's head is now one no restore may choose
    before = snapshot(store)
    refused = c.repair()
    assert refused.status is RepairStatus.REFUSED
    assert f"head: checkpoint {second} -> checkpoint {first}" in refused.reason
    assert "--force" in refused.reason
    assert snapshot(store) == before

    forced = c.repair(force=True)
    assert forced.status is RepairStatus.WRITTEN
    assert f"head: checkpoint {second} -> checkpoint {first}" in forced.changes
    assert c.head.get().checkpoint_id == first and manifest(c).current == first
    again = c.repair(force=True)  # the records agree now
    assert again.status is RepairStatus.UNCHANGED


def test_repair_refuses_when_the_records_prove_no_head(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=5)
    first, second = complete(c), complete(c)
    restore(c, first)
    quarantine(c, first)  # the only checkpoint of the restored timeline
    damage_control_record(c)
    before = snapshot(store)
    report = c.repair()
    assert report.status is RepairStatus.REFUSED and "prove no head" in report.reason
    assert snapshot(store) == before  # never the abandoned checkpoint, never empty state
    QuarantineStore(store, c.layout).release(first)
    assert c.repair().status is RepairStatus.WRITTEN
    assert c.head.get().checkpoint_id == first and second in c.completed.retained_ids()


def test_dry_run_prints_the_plan_and_writes_nothing(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=1)
    first, second = complete(c), complete(c)
    open_one = c.trigger({"src": {"p0": 3}}).checkpoint_id
    damage_control_record(c)
    before = snapshot(store)
    plan = c.repair(dry_run=True)
    assert snapshot(store) == before
    assert plan.status is RepairStatus.DRY_RUN and plan.previous.state == "unreadable"
    assert plan.head == second and plan.control.retained_ids() == [second]
    assert plan.plan.abandoned == (open_one,) and first in plan.plan.queued
    assert plan.control.restore is not None and plan.control.restore.target == second
    assert any(c.layout.head in f.subject for f in plan.findings)


def test_unreadable_outcome_is_held_never_queued(store: ObjectStore) -> None:
    clock = FakeClock()
    c = coordinator(store, clock, num_retained=1)
    broken, good = complete(c), complete(c)  # num_retained 1: broken is subsumed...
    damage_control_record(c)
    store.put(c.layout.outcome(broken), b"{trunc")  # ...but repair cannot read that
    files = [i.key for i in store.list(c.layout.data_prefix(broken))]

    report = c.repair()
    assert report.status is RepairStatus.WRITTEN and report.head == good
    assert report.plan.held == [broken] and broken not in report.plan.queued
    control = c.control.load()
    assert not control.is_discarded(broken) and broken not in control.retained_ids()
    assert not control.with_discarded([broken], clock()).is_discarded(broken)  # never queued
    clock.advance(1e6)
    found = ops_gc(c, c.store)
    assert [i.key for i in store.list(c.layout.data_prefix(broken))] == files
    assert any(f.checkpoint_id == broken and "batchpoint repair" in str(f) for f in found.findings)


# == reproduction 3: repair racing a live finalize loses and changes nothing ==============


@pytest.mark.parametrize("racer", ["a finalize", "another repair, then a finalize"])
def test_repair_racing_a_finalize_changes_nothing(store: ObjectStore, racer: str) -> None:
    c = coordinator(store, num_retained=5)
    complete(c)
    second = complete(c)
    if racer == "a finalize":
        quarantine(c, second)  # a readable record a forced repair would change
    else:
        store.delete(c.layout.head)  # two repairs race to create it
    newcomer: list[int] = []
    left: list[bytes] = []

    def race() -> None:
        if racer != "a finalize":
            assert c.repair().status is RepairStatus.WRITTEN
        newcomer.append(complete(c))  # triggered, acked, finalized, settled, published
        left.append(store.get(c.layout.head).data)

    # right after repair read the control record (and listed the checkpoints)
    hook = once(race, lambda op, key: op == "get" and key.endswith("/outcome.json"))
    repairer = CheckpointCoordinator(HookStore(store, hook), c.pipeline, c.config, c.clock)

    report = repairer.repair(force=True)
    assert hook.fired and newcomer
    head = c.head.get()
    assert head.checkpoint_id == newcomer[0], "the head moved back behind a completed checkpoint"
    assert newcomer[0] in c.completed.retained_ids()
    assert manifest(c).current == newcomer[0] and sink_epochs(c)[-1] == newcomer[0]
    assert store.get(c.layout.head).data == left[0]  # the record as the racer left it
    assert report.status is RepairStatus.LOST and "nothing was written" in report.reason
    c.garbage_collector(grace=0).collect()
    assert not c.control.load().is_discarded(newcomer[0])


def trigger_repaired_unseen(store: ObjectStore, c: CheckpointCoordinator) -> int:
    """Trigger a checkpoint whose admission wins, then damage and repair the control
    record before the trigger writes its pending record: the repair cannot know it."""

    def damage_and_repair() -> None:
        damage_control_record(c)
        assert c.repair().status is RepairStatus.WRITTEN

    hook = once(damage_and_repair, lambda op, key: op == "create" and "/active/" in key)
    triggering = CheckpointCoordinator(HookStore(store, hook), c.pipeline, c.config, c.clock)
    cid = triggering.trigger({"src": {"p0": 2}}).checkpoint_id
    assert hook.fired
    return cid


def test_a_checkpoint_a_repair_could_not_know_is_still_collected(store: ObjectStore) -> None:
    """Found by the concurrency model: a trigger won its admission, then the control
    record was damaged and repaired before the trigger wrote its pending record, so the
    repair knew nothing of the checkpoint. Its tasks ran, its finalize aborted it (a
    new generation), and it must still be queued for GC, or its files stay forever."""
    c = coordinator(store, num_retained=5)
    complete(c)
    cid = trigger_repaired_unseen(store, c)
    ack_all(c, cid)
    outcome = c.try_finalize(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    assert list(store.list(c.layout.data_prefix(cid)))

    c.garbage_collector(grace=0).collect()

    assert not list(store.list(c.layout.data_prefix(cid)))


def test_a_checkpoint_a_repair_with_no_head_could_not_know_never_completes(
    store: ObjectStore,
) -> None:
    """Found by the concurrency model (seed 70247): as above, but before any checkpoint
    completed, so the repair proved no head and kept the generation: the checkpoint stayed
    on the timeline and its finalize completed it, in no set (never retained, its files
    never collected). A finalize now completes only what the control record admits."""
    c = coordinator(store, num_retained=5)
    cid = trigger_repaired_unseen(store, c)
    assert c.control.load().restore_generation == 0  # no head: no new generation
    ack_all(c, cid)
    outcome = c.try_finalize(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.ABORTED
    assert outcome.reason is CheckpointFailureReason.NEEDS_REPAIR
    assert c.control.load().is_discarded(cid)

    c.garbage_collector(grace=0).collect()

    assert not list(store.list(c.layout.data_prefix(cid)))
