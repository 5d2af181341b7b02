"""Regression tests for issue 10's reproductions 1-10: concurrent actors and damage.

Each interleaving is deterministic: the other actor's steps run from a hook in a store
wrapper at a chosen call of the actor under test (or protocol steps are called in a
chosen order), never from sleeps. Every test runs on the local store and on SeaweedFS.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from tests.support.hooks import HookStore, once

from batchpoint.errors import RestoreRefused, TriggerRefused
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointStatus,
    CheckpointType,
    FileHandle,
    TaskAcknowledgeResult,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.head import HeadMoveCause, HeadPointer
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.protocol.restore_candidates import Examination, RestoreCandidates
from batchpoint.protocol.savepoints import (
    SavepointLocation,
    SavepointPathRefused,
    confine,
)
from batchpoint.protocol.sinks import PublishResult, SinkPublisher, visible_files
from batchpoint.protocol.verify import check_handles
from batchpoint.storage.base import ObjectStore
from support.clock import FakeClock
from support.restoring import restore

NAME = "safe"
SINKS = [("sink", "append", ["k"])]


def coordinator(store: Any, clock: FakeClock | None = None, **config: Any) -> CheckpointCoordinator:
    c = CheckpointCoordinator(store, NAME, CheckpointConfig(**config), clock or FakeClock())
    c.register(simple_pipeline(NAME, [("keyed", 2), ("sink", 1)]))
    return c


def ack_all(c: CheckpointCoordinator, cid: int, extra: tuple[FileHandle, ...] = ()) -> None:
    for task in c.get_checkpoint(cid).expected_tasks:
        key = c.layout.task_data_prefix(cid, task, "a1") + "part-0.parquet"
        data = f"{task} of {cid}".encode() * 8
        c.store.put(key, data)
        stream = "sink" if task.operator == "sink" else "s"  # a sink stages its output
        handle = FileHandle(key, len(data), hashlib.sha256(data).hexdigest(), rows=1, name=stream)
        handles = (handle, *extra) if task.operator == "keyed" else (handle,)
        assert c.acknowledge(cid, task, "a1", handles) is TaskAcknowledgeResult.SUCCESS


def complete(
    c: CheckpointCoordinator,
    kind: CheckpointType = CheckpointType.CHECKPOINT,
    publish: bool = True,
) -> int:
    cid = c.trigger({"src": {"p0": 1}}, checkpoint_type=kind).checkpoint_id
    ack_all(c, cid)
    outcome = c.try_finalize(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED, outcome
    if publish:
        c.notify_checkpoint_complete(cid, SINKS)
    return cid


def files_of(c: CheckpointCoordinator, cid: int) -> list[FileHandle]:
    return list(c.completed.get(cid).handles)


def intact(c: CheckpointCoordinator, cid: int) -> bool:
    return not check_handles(c.store, files_of(c, cid), checksums=True)


def sink_epochs(c: CheckpointCoordinator) -> list[int]:
    manifest = SinkPublisher(c.store, c.layout).manifest("sink")
    assert manifest is not None
    return [e.checkpoint_id for e in manifest.chain()]


# == 1: GC never deletes a checkpoint completing during its pass ==========================


@pytest.mark.parametrize("point", ["control read", "folder listing"])
def test_gc_keeps_a_checkpoint_completing_during_its_pass(store: ObjectStore, point: str) -> None:
    c = coordinator(store)
    complete(c)
    aborted = c.trigger({"src": {"p0": 2}}).checkpoint_id
    ack_all(c, aborted)
    c.abort(aborted, CheckpointFailureReason.EXPIRED)  # a folder in GC's queue
    newcomer: list[int] = []
    if point == "control read":
        # right after GC's snapshot of the control record: its first outcome read
        at_point = lambda op, key: op == "get" and key.endswith("/outcome.json")  # noqa: E731
    else:
        at_point = lambda op, key: op == "list" and key == c.layout.data_prefix(aborted)  # noqa: E731
    hook = once(lambda: newcomer.append(complete(c)), at_point)
    gc = coordinator(HookStore(store, hook)).garbage_collector(grace=0)
    report = gc.collect()
    assert hook.fired and newcomer
    assert c.head.get().checkpoint_id == newcomer[0]
    assert intact(c, newcomer[0]), "GC deleted files of the checkpoint that completed"
    assert not set(report.deleted_files) & {h.path for h in files_of(c, newcomer[0])}
    assert not list(store.list(c.layout.data_prefix(aborted)))  # the discarded one went


# == 2: restore racing finalize and GC changes nothing when it loses ======================


def test_restore_losing_to_subsumption_and_gc_changes_nothing(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = coordinator(store, num_retained=1)
    target = complete(c)
    armed: list[bool] = []

    def subsume_and_collect() -> None:
        complete(c)  # subsumes the target
        c.garbage_collector(grace=0).collect()  # and deletes its files

    hook = once(
        subsume_and_collect, lambda op, key: bool(armed) and op == "get" and key == c.layout.head
    )
    restorer_side = coordinator(HookStore(store, hook), num_retained=1)
    real_examine = RestoreCandidates.examine

    def validated_then_arm(self: RestoreCandidates, cid: int, checksums: bool) -> Examination:
        examined = real_examine(self, cid, checksums)
        armed.append(True)  # the other actors go between validation and the CAS
        return examined

    monkeypatch.setattr(RestoreCandidates, "examine", validated_then_arm)
    with pytest.raises(RestoreRefused, match="left the retained set"):
        restore(restorer_side, target)
    assert hook.fired
    head = c.head.get()
    assert head.checkpoint_id == target + 1 and head.restore_generation == 0
    assert intact(c, target + 1)
    assert sink_epochs(c) == [target, target + 1]


def test_restore_target_keeps_its_files_against_gc(store: ObjectStore) -> None:
    """The winning order: once the restore's CAS holds, subsumption cannot drop the
    target (it is the head) and GC cannot delete it."""
    c = coordinator(store, num_retained=1)
    target = complete(c)
    complete(c)
    with pytest.raises(RestoreRefused, match="not retained"):
        restore(c, target)
    old = complete(c, CheckpointType.SAVEPOINT)
    complete(c)
    restore(c, old)
    complete(c)
    complete(c)
    c.garbage_collector(grace=0).collect()
    assert c.completed.is_retained(old) and intact(c, old)


# == 3: a savepoint restored from its folder keeps the append sink's history ==============


def test_savepoint_folder_restore_keeps_append_history(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=5)
    first, second = complete(c), complete(c)
    savepoint = complete(c, CheckpointType.SAVEPOINT)
    complete(c)
    expected = [f.path for f in visible_files(_manifest(c), savepoint)]
    folder = SavepointLocation(store, "savepoints/keep-history")
    c.savepoints.export(savepoint, folder)

    imported = c.savepoints.import_folder(folder)
    restore(c, imported.checkpoint_id)
    c.notify_checkpoint_complete(imported.checkpoint_id, SINKS)
    assert [f.path for f in visible_files(_manifest(c))] == expected
    assert sink_epochs(c)[:2] == [first, second]
    # and the next epoch appends to it
    after = complete(c)
    assert sink_epochs(c) == [first, second, imported.checkpoint_id, after]


def _manifest(c: CheckpointCoordinator) -> Any:
    manifest = SinkPublisher(c.store, c.layout).manifest("sink")
    assert manifest is not None
    return manifest


# == 4: a publish decided before a restore never takes effect after it ====================


def test_late_publish_after_restore_is_refused(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=5)
    good = complete(c)
    late = complete(c, publish=False)  # finalized; its publish comes late
    restore(c, good)
    report = c.notify_checkpoint_complete(late, SINKS)
    assert report.is_stale and report.published == []
    assert sink_epochs(c) == [good]
    stale = SinkPublisher(c.store, c.layout).publish(
        c.completed.get(late), "sink", "append", ["k"], generation=0
    )
    assert stale is PublishResult.STALE
    assert sink_epochs(c) == [good]


def test_publish_racing_a_restore_is_undone(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=5)
    good = complete(c)
    late = complete(c, publish=False)
    manifest_key = c.layout.sink_manifest("sink")
    hook = once(lambda: restore(c, good), lambda op, key: op == "get" and key == manifest_key)
    publisher_side = coordinator(HookStore(store, hook), num_retained=5)
    report = publisher_side.notify_checkpoint_complete(late, SINKS)
    assert hook.fired and report.is_stale
    assert _manifest(c).current == good and sink_epochs(c) == [good]


# == 5: quarantine holds on every restore path =============================================


def test_quarantined_checkpoint_is_never_restored(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=5)
    good, bad = complete(c), complete(c)
    complete(c)
    store.put(c.layout.quarantine(bad), b'{"kind": "quarantine"}')
    with pytest.raises(RestoreRefused, match="quarantined"):
        restore(c, bad)
    store.put(c.layout.quarantine(bad + 1), b'{"kind": "quarantine"}')
    result = restore(c)
    assert result.checkpoint_id == good
    assert [f.checkpoint_id for f in result.findings] == [bad + 1, bad]


# == 6: a flipped byte is caught at restore by default ====================================


def test_flipped_byte_makes_restore_fall_back(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=5)
    good, damaged = complete(c), complete(c)
    victim = files_of(c, damaged)[0]
    data = bytearray(store.get(victim.path).data)
    data[0] ^= 0xFF
    store.put(victim.path, bytes(data))  # same size: only a checksum sees it
    result = restore(c)
    assert result.checkpoint_id == good
    assert "sha256" in result.findings[0].problem
    with pytest.raises(RestoreRefused, match="sha256"):
        restore(c, damaged)  # quarantined by the fall-back, the finding as its reason
    # the opt-out, once the quarantine is released on purpose
    assert c.restorer.quarantine.release(damaged)
    assert restore(c, damaged, checksums=False).checkpoint_id == damaged


# == 7: unreadable records are findings, not blockers =====================================


@pytest.mark.parametrize("damage", [b"{not json", b'{"kind":"checkpoint-outcome","version":9}'])
def test_unreadable_outcome_is_skipped_and_reported(store: ObjectStore, damage: bytes) -> None:
    c = coordinator(store, num_retained=5)
    good, broken = complete(c), complete(c)
    store.put(c.layout.outcome(broken), damage)
    result = restore(c)
    assert result.checkpoint_id == good
    assert result.findings[0].checkpoint_id == broken
    assert c.layout.outcome(broken) in result.findings[0].problem
    # GC reports it; as it could hold references, nothing is deleted
    doomed = c.trigger({"src": {"p0": 9}}).checkpoint_id  # trigger is not blocked
    ack_all(c, doomed)
    c.abort(doomed, CheckpointFailureReason.EXPIRED)
    report = c.garbage_collector(grace=0).collect()
    assert any(c.layout.outcome(broken) in f.problem for f in report.findings)
    assert report.deleted_files == [] and list(store.list(c.layout.data_prefix(doomed)))
    assert intact(c, good)
    # a trigger whose base record is unreadable refuses, naming the record
    store.put(c.layout.outcome(good), damage)
    with pytest.raises(TriggerRefused, match="batchpoint repair") as refused:
        c.trigger({"src": {"p0": 9}})
    assert c.layout.outcome(good) in str(refused.value)


# == 8: a deleted control record is refused, never a restart from empty ==================


def test_missing_control_record_refuses_trigger_until_repair(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=2)
    complete(c)
    newest = complete(c)
    store.delete(c.layout.head)
    with pytest.raises(TriggerRefused, match="batchpoint repair"):
        c.trigger({"src": {"p0": 3}})
    assert c.pending_checkpoints() == []
    report = c.repair()
    assert report.head == newest and report.control.restore_generation == 1
    pending = c.trigger({"src": {"p0": 3}})
    assert pending.base_checkpoint_id == newest and pending.restore_generation == 1
    assert _manifest(c).generation == 1 and _manifest(c).current == newest


def test_unreadable_control_record_refuses_naming_it(store: ObjectStore) -> None:
    c = coordinator(store)
    complete(c)
    store.put(c.layout.head, b"garbage")
    with pytest.raises(TriggerRefused) as refused:
        c.trigger({"src": {"p0": 3}})
    assert c.layout.head in str(refused.value) and "batchpoint repair" in str(refused.value)


# == 9: two concurrent triggers never both pass max_concurrent ===========================


@pytest.mark.parametrize("point", ["before admission", "after admission"])
def test_racing_triggers_respect_max_concurrent(store: ObjectStore, point: str) -> None:
    c = coordinator(store, max_concurrent=1)
    complete(c)
    other: list[object] = []

    def trigger_b() -> None:
        try:
            other.append(c.trigger({"src": {"p0": 2}}))
        except TriggerRefused as exc:
            other.append(exc)

    if point == "before admission":  # B runs whole while A holds a fresh id
        when = lambda op, key: op in ("create", "replace") and key == c.layout.id_counter  # noqa: E731
    else:  # B runs after A's admission, before A's pending record exists
        when = lambda op, key: op == "create" and key.startswith(c.layout.active_prefix)  # noqa: E731
    hook = once(trigger_b, when)
    a_side = coordinator(HookStore(store, hook), max_concurrent=1)
    try:
        mine: object = a_side.trigger({"src": {"p0": 2}})
    except TriggerRefused as exc:
        mine = exc
    assert hook.fired
    results = [mine, *other]
    refused = [r for r in results if isinstance(r, TriggerRefused)]
    assert len(refused) == 1, results
    assert len(c.control.load().pending) == 1
    assert len(c.pending_checkpoints()) == 1


def test_trigger_that_died_after_admission_is_aborted_at_its_deadline(
    store: ObjectStore,
) -> None:
    clock = FakeClock()
    c = coordinator(store, clock)
    complete(c)

    def die(op: str, key: str) -> None:
        if op == "create" and key.startswith(c.layout.active_prefix):
            raise KeyboardInterrupt  # the trigger's process dies here

    with pytest.raises(KeyboardInterrupt):
        coordinator(HookStore(store, die), clock).trigger({"src": {"p0": 2}})
    [entry] = c.control.load().pending
    with pytest.raises(TriggerRefused, match="max_concurrent"):
        c.trigger({"src": {"p0": 2}})
    clock.now = entry.deadline + 1
    nxt = c.trigger({"src": {"p0": 2}})
    outcome = c.get_outcome(entry.checkpoint_id)
    assert outcome is not None and "trigger did not finish" in outcome.message
    assert nxt.checkpoint_id > entry.checkpoint_id


# == 10: savepoint paths are confined ====================================================


def test_savepoint_paths_are_confined(store: ObjectStore) -> None:
    c = coordinator(store)
    cid = complete(c, CheckpointType.SAVEPOINT)
    for outside in ["elsewhere/sp", "savepoints-old/sp", "savepoints/../pipelines/x"]:
        with pytest.raises(SavepointPathRefused):
            c.savepoints.export(cid, SavepointLocation(store, outside))
        assert not list(store.list(outside.split("/")[0] + "/"))
    c.savepoints.export(cid, SavepointLocation(store, "savepoints/ok"))
    for info in store.list("savepoints/ok/"):
        store.put("elsewhere/" + info.key[len("savepoints/ok/") :], store.get(info.key).data)
    with pytest.raises(SavepointPathRefused):
        c.savepoints.import_folder(SavepointLocation(store, "elsewhere"))
    imported = c.savepoints.import_folder(
        SavepointLocation(store, "elsewhere/"), roots=[store.child("")]
    )
    assert imported.checkpoint_id > cid


def test_confine_compares_whole_segments() -> None:
    roots = ["s3://b/root/savepoints/"]
    assert confine("s3://b/root/savepoints/a", roots)
    for bad in [
        "s3://b/root/savepoints-x/a",
        "s3://b/root/savepoints",
        "s3://b/other/a",
        "s3://b/root/savepoints/../a",
    ]:
        with pytest.raises(SavepointPathRefused):
            confine(bad, roots)


# == retention: discarded ids never return, disposal, manifest epochs, history ===========


def test_subsumed_checkpoint_never_returns_and_history_is_bounded(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=2, tolerable_failed_checkpoints=10)
    ids = [complete(c) for _ in range(4)]
    assert c.completed.retained_ids() == ids[-2:]
    c.try_finalize(ids[0])  # a late finalizer of a subsumed checkpoint
    assert ids[0] not in c.completed.retained_ids()
    aborted = []
    for _ in range(3):
        cid = c.trigger({"src": {"p0": 5}}).checkpoint_id
        ack_all(c, cid)
        c.abort(cid, CheckpointFailureReason.EXPIRED)
        aborted.append(cid)
    report = c.garbage_collector(grace=0).collect(history_limit=1)
    assert c.control.load().discarded == ()
    for cid in aborted:
        assert not list(store.list(c.layout.data_prefix(cid)))
    # the append sink still needs the subsumed epochs' files: their records stay
    assert set(report.pruned_checkpoints) == set(aborted[:2])
    for cid in aborted[:2]:
        assert c.get_outcome(cid) is None
    assert c.get_outcome(aborted[2]) is not None
    assert all(intact(c, cid) for cid in ids[-2:])
    assert sink_epochs(c) == ids


def test_snapshot_sink_keeps_only_reachable_epochs(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=2)
    snapshot = [("sink", "snapshot", ["k"])]
    ids = []
    for _ in range(4):
        cid = complete(c, publish=False)
        c.notify_checkpoint_complete(cid, snapshot)
        ids.append(cid)
    c.garbage_collector(grace=0).collect()
    c.garbage_collector(grace=0).collect()  # the re-queued epochs' files go
    assert sorted(_manifest(c).epochs) == ids[-2:]
    for cid in ids[:2]:
        assert not list(store.list(c.layout.data_prefix(cid)))


def test_grace_keeps_discarded_entries_for_late_writers(store: ObjectStore) -> None:
    clock = FakeClock()
    c = coordinator(store, clock, timeout=60, gc_grace=90)  # grace: BATCHPOINT_GC_GRACE
    complete(c)
    aborted = c.trigger({"src": {"p0": 2}}).checkpoint_id
    c.abort(aborted, CheckpointFailureReason.EXPIRED)
    c.garbage_collector().collect()
    assert c.control.load().is_discarded(aborted)  # within the grace period
    late = c.layout.task_data_prefix(aborted, TaskId("keyed", 0), "zombie") + "x"
    store.put(late, b"late write")
    clock.now += 61  # past the timeout, not the grace: the entry stays for late writers
    c.garbage_collector().collect()
    assert c.control.load().is_discarded(aborted)
    clock.now += 30
    c.garbage_collector().collect()
    assert not store.exists(late) and not c.control.load().is_discarded(aborted)


def test_dispose_savepoint_refused_while_it_is_the_head(store: ObjectStore) -> None:
    c = coordinator(store)
    savepoint = complete(c, CheckpointType.SAVEPOINT)
    with pytest.raises(Exception, match="head"):
        c.savepoints.dispose(savepoint)
    complete(c)
    c.savepoints.dispose(savepoint)
    assert not c.completed.is_retained(savepoint)
    assert c.control.load().is_discarded(savepoint)


# == migration from the head-pointer v1 layout ============================================


def test_old_head_pointer_and_markers_are_migrated(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=5)
    first, second = complete(c), complete(c)
    aborted = c.trigger({"src": {"p0": 3}}).checkpoint_id
    c.abort(aborted, CheckpointFailureReason.EXPIRED)
    # rewrite the pipeline in the old layout: a head pointer and one marker per retained
    store.put(c.layout.head, HeadPointer(second, 0, 1_000_000.0, HeadMoveCause.COMPLETED).encode())
    for cid, stamp in [(first, "2026-01-01T00:00:00.000Z"), (second, "2026-01-01T00:01:00.000Z")]:
        marker = {
            "kind": "retained-checkpoint",
            "version": 1,
            "checkpoint_id": cid,
            "type": "checkpoint",
            "completed_at": stamp,
            "retain_forever": False,
        }
        store.put(c.layout.retained(cid), json.dumps(marker).encode())
    assert c.head.get().checkpoint_id == second
    assert c.completed.retained_ids() == [first, second]
    assert c.control.load().is_discarded(aborted)  # old history enters GC's queue once
    nxt = complete(c)  # the next write migrates
    body = json.loads(store.get(c.layout.head).data)
    assert body["kind"] == "pipeline-control" and "migrated_from" not in body
    assert c.completed.retained_ids() == [first, second, nxt]
    assert not list(store.list(c.layout.retained_prefix))


def test_imported_savepoint_is_published_only_after_its_restore(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=5)
    first = complete(c)
    savepoint = complete(c, CheckpointType.SAVEPOINT)
    head = complete(c)
    folder = SavepointLocation(store, "savepoints/early")
    c.savepoints.export(savepoint, folder)
    imported = c.savepoints.import_folder(folder).checkpoint_id
    assert c.head.get().checkpoint_id == head  # completing the import moved nothing
    assert c.notify_checkpoint_complete(imported, SINKS).is_stale
    assert sink_epochs(c) == [first, savepoint, head]
    restore(c, imported)
    assert sink_epochs(c) == [first, imported]  # the import stands for the savepoint's epoch
    assert _manifest(c).epochs[imported].alias_of == savepoint


def test_repair_reports_what_it_skipped(store: ObjectStore) -> None:
    c = coordinator(store, num_retained=5)
    good, broken = complete(c), complete(c)
    store.put(c.layout.outcome(broken), b"{oops")
    store.delete(c.layout.head)
    report = c.repair()
    assert report.head == good
    assert [f.checkpoint_id for f in report.findings] == [broken]
    assert c.trigger({"src": {"p0": 4}}).base_checkpoint_id == good


def test_a_late_roll_forward_never_moves_the_sinks_back(store: ObjectStore) -> None:
    """Seed 686 of the model: an actor read an unfinished restore (generation 1, target 1),
    stalled, and its rewind landed after the restore finished and epoch 3 was published in
    generation 1."""
    c = coordinator(store, num_retained=5)
    first = complete(c)
    complete(c)
    restore(c, first)
    third = complete(c)
    assert _manifest(c).current == third
    SinkPublisher(c.store, c.layout).rewind("sink", first, generation=1)  # the stalled step
    assert _manifest(c).current == third and sink_epochs(c) == [first, third]
