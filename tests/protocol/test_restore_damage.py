"""Issue 24, reproductions 5 and 9 in the protocol: a restore falls back on a damaged
record exactly as on a damaged file, and quarantines every candidate whose records or
files prove it damaged, with the finding as the reason; never for a storage error.

Interleavings are forced with store wrappers (tests/support/hooks.py, faulty_store.py),
never with sleeps. Every test runs on the local store and on SeaweedFS.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from batchpoint.errors import RestoreRefused, StorageError
from batchpoint.protocol import records
from batchpoint.protocol.checkpoint import CheckpointStatus, FileHandle
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.protocol.quarantine import QuarantineCause, QuarantineRecord, QuarantineStore
from batchpoint.protocol.repair import RepairStatus
from batchpoint.protocol.restore_candidates import Examination, RestoreCandidates
from batchpoint.storage.base import ObjectStore
from support.clock import FakeClock
from support.faulty_store import Fault, FaultyStore
from support.hooks import HookStore, once
from support.restoring import restore

NAME = "damage"


def coordinator(store: Any, clock: FakeClock | None = None) -> CheckpointCoordinator:
    c = CheckpointCoordinator(store, NAME, CheckpointConfig(num_retained=5), clock or FakeClock())
    c.register(simple_pipeline(NAME, [("keyed", 2), ("sink", 1)]))
    return c


def complete(c: CheckpointCoordinator) -> int:
    cid = c.trigger({"src": {"p0": 1}}).checkpoint_id
    for task in c.get_checkpoint(cid).expected_tasks:
        key = c.layout.task_data_prefix(cid, task, "a1") + "part-0.parquet"
        data = f"{task} of {cid}".encode() * 8
        c.store.put(key, data)
        digest = hashlib.sha256(data).hexdigest()
        c.acknowledge(cid, task, "a1", (FileHandle(key, len(data), digest, rows=1, name="s"),))
    outcome = c.try_finalize(cid)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED, outcome
    return cid


def _rewritten(change: Callable[[dict], None]) -> Callable[[bytes], bytes]:
    def damage(data: bytes) -> bytes:
        document = json.loads(data)
        change(document)
        return json.dumps(document).encode()

    return damage


#: Ways an outcome record is garbled, and what the finding says of each.
GARBLED = {
    "truncated JSON": (lambda data: data[: len(data) // 2], "truncated JSON"),
    "bad field": (_rewritten(lambda d: d.update(acks="none")), "field 'acks' should be list"),
    "unknown version": (_rewritten(lambda d: d.update(version=9)), "of version 9"),
}


def garble(c: CheckpointCoordinator, cid: int, how: str) -> bytes:
    """Garble the checkpoint's outcome record; the original bytes (to mend it later)."""
    key = c.layout.outcome(cid)
    original = c.store.get(key).data
    c.store.put(key, GARBLED[how][0](original))
    return original


def quarantine(c: CheckpointCoordinator) -> QuarantineStore:
    return QuarantineStore(c.store, c.layout)


@pytest.mark.parametrize("how", sorted(GARBLED))
def test_a_garbled_head_record_makes_restore_fall_back_and_quarantines_it(
    store: ObjectStore, how: str
) -> None:
    c = coordinator(store)
    good, head = complete(c), complete(c)
    original = garble(c, head, how)

    result = restore(c)
    assert result.checkpoint_id == good and c.head.get().checkpoint_id == good
    finding = result.findings[0]
    assert finding.checkpoint_id == head and c.layout.outcome(head) in finding.problem
    assert GARBLED[how][1] in finding.problem and "quarantined" in finding.problem

    held = quarantine(c).get(head)
    assert held is not None and held.found_by is QuarantineCause.RESTORE
    assert c.layout.outcome(head) in held.reason and GARBLED[how][1] in held.reason
    assert "quarantined" not in held.reason  # the finding itself, not the restore's note

    # An explicit restore of it is refused, naming the quarantine and its reason.
    with pytest.raises(RestoreRefused, match=r"quarantined since .* by a restore: unreadable"):
        restore(c, head)
    # Released, it is a candidate again: still damaged, so refused (and held) again...
    assert quarantine(c).release(head)
    with pytest.raises(RestoreRefused, match="unreadable record"):
        restore(c, head)
    assert quarantine(c).is_quarantined(head)
    # ...and once mended and released, restored.
    store.put(c.layout.outcome(head), original)
    assert quarantine(c).release(head)
    assert restore(c, head).checkpoint_id == head


def test_damage_an_explicit_restore_finds_is_quarantined(store: ObjectStore) -> None:
    c = coordinator(store)
    good, damaged = complete(c), complete(c)
    lost = c.completed.get(damaged).handles[0].path
    store.delete(lost)

    with pytest.raises(RestoreRefused, match="missing") as refused:
        restore(c, damaged)
    assert "quarantined (release it with `batchpoint quarantine release 2`" in str(refused.value)
    held = quarantine(c).get(damaged)
    assert held is not None and f"{lost}: missing" in held.reason
    assert c.head.get().checkpoint_id == damaged  # the refusal moved nothing

    # `latest` then skips it without reading it again
    result = restore(c)
    assert result.checkpoint_id == good
    assert result.findings[0].problem.startswith("quarantined since")


@pytest.mark.parametrize(("op", "what"), [("get", "outcome"), ("head", "file")])
def test_a_storage_error_is_no_finding_and_quarantines_nothing(
    store: ObjectStore, op: str, what: str
) -> None:
    c = coordinator(store)
    complete(c)
    head = complete(c)
    faulty = FaultyStore(store)
    key = c.layout.outcome(head) if what == "outcome" else c.completed.get(head).handles[0].path
    faulty.arm(Fault.THROTTLE, op=op, key_contains=key)
    before = c.control.read()

    with pytest.raises(StorageError, match="SlowDown"):
        restore(coordinator(faulty))
    assert faulty.injected  # the fault was met, and proved nothing about the checkpoint
    assert quarantine(c).ids() == []
    assert c.control.read() == before  # the restore changed nothing
    assert restore(coordinator(faulty)).checkpoint_id == head  # the head is sound


def test_concurrent_restores_agree_on_the_first_quarantine_record(store: ObjectStore) -> None:
    c = coordinator(store, FakeClock(1_000_000.0))
    good, head = complete(c), complete(c)
    garble(c, head, "truncated JSON")
    other = coordinator(store, FakeClock(2_000_000.0))
    # The other restore runs whole between this one's finding and its quarantine write.
    hook = once(
        lambda: restore(other),
        lambda op, key: op == "create" and key == c.layout.quarantine(head),
    )
    mine = coordinator(HookStore(store, hook), FakeClock(3_000_000.0))

    result = restore(mine)
    assert hook.fired
    assert result.checkpoint_id == good and "quarantined" in result.findings[0].problem
    held = quarantine(c).get(head)
    assert held is not None and held.quarantined_at == 2_000_000.0  # the first write stands
    assert c.head.get().restore_generation == 2  # both restores moved the head to `good`


def test_a_candidate_that_left_the_retained_set_is_not_quarantined(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = coordinator(store)
    complete(c)
    damaged = complete(c)
    store.delete(c.completed.get(damaged).handles[0].path)
    armed: list[bool] = []

    def dispose() -> None:  # between the finding and the quarantine, it is disposed of
        restore(c, damaged - 1)  # (the head cannot be: it moves back first)
        assert c.completed.release(damaged)

    hook = once(dispose, lambda op, key: bool(armed) and op == "get" and key == c.layout.head)
    real_examine = RestoreCandidates.examine

    def examined_then_arm(self: RestoreCandidates, cid: int, checksums: bool) -> Examination:
        examined = real_examine(self, cid, checksums)
        armed.append(cid == damaged)
        return examined

    monkeypatch.setattr(RestoreCandidates, "examine", examined_then_arm)
    with pytest.raises(RestoreRefused, match="missing"):
        restore(coordinator(HookStore(store, hook)), damaged)
    assert hook.fired
    assert quarantine(c).ids() == []  # it left `retained`: GC may delete its files


def test_every_quarantine_record_version_reads(store: ObjectStore) -> None:
    c = coordinator(store)
    layout = c.layout
    # version 1, as the quality gate wrote it before restores quarantined
    report = {"pipeline": NAME, "checkpoint_id": 4, "passed": False, "findings": []}
    v1 = records.encode(
        "quarantine",
        1,
        {"checkpoint_id": 4, "quarantined_at": records.to_iso(1_000.0), "report": report},
    )
    store.put(layout.quarantine(4), v1)
    QuarantineStore(store, layout).mark_damaged(5, "1 file(s) not intact: x: missing", 2_000.0)
    store.put(layout.quarantine(6), b'{"kind": "quarantine"')  # cut short

    held = QuarantineStore(store, layout).records()
    assert [r.checkpoint_id for r in held] == [4, 5, 6]
    assert held[0] == QuarantineRecord(
        4, 1_000.0, QuarantineCause.QUALITY_GATE, "failed the quality gate", report
    )
    assert held[1] == QuarantineRecord(
        5, 2_000.0, QuarantineCause.RESTORE, "1 file(s) not intact: x: missing"
    )
    assert held[2].found_by is QuarantineCause.UNKNOWN  # unreadable, and held all the same
    assert "truncated JSON" in held[2].describe()
    assert json.loads(store.get(layout.quarantine(5)).data)["version"] == 2


# -- a mark while a restore or repair decides (invariant 11) ------------------------------


def _gated_to(c: CheckpointCoordinator, cid: int) -> Callable[[], None]:
    """The quality gate (or another restore) quarantining `cid`, on the real store."""

    def mark() -> None:
        record = QuarantineRecord(cid, 5.0, QuarantineCause.QUALITY_GATE, "failed the gate")
        assert quarantine(c).mark(record)

    return mark


def _intents(store: ObjectStore, c: CheckpointCoordinator) -> list[str]:
    return [o.key for o in store.list(c.layout.restore_intents_prefix)]


def _walked_after_a_restore(store: ObjectStore) -> tuple[Any, int, int, Any, list[str]]:
    """A pipeline restored to its first checkpoint, an ungated restore's walk that found
    its second sound, and the restore intents so far."""
    c = coordinator(store)
    good, target = complete(c), complete(c)
    restore(c, good)
    return c, good, target, c.restorer.choose(target), _intents(store, c)


def test_a_checkpoint_quarantined_after_the_walk_chose_it_is_not_restored(
    store: ObjectStore,
) -> None:
    c, good, target, chosen, intents = _walked_after_a_restore(store)
    before = c.control.load()
    _gated_to(c, target)()  # the gate fails it while that restore checks its files

    with pytest.raises(RestoreRefused, match=f"checkpoint {target} .*quarantined since"):
        c.restorer.restore(chosen.target)
    after = c.control.load()
    assert (after.head, after.restore_generation) == (good, before.restore_generation)
    assert after.quarantine_marks == before.quarantine_marks + 1
    assert _intents(store, c) == intents  # the restore's intent was withdrawn


def test_a_mark_between_the_restores_check_and_its_swap_makes_the_swap_lose(
    store: ObjectStore,
) -> None:
    c, good, target, chosen, intents = _walked_after_a_restore(store)
    # The whole mark lands after the swap's own quarantine check, before its write.
    hook = once(_gated_to(c, target), lambda op, key: op == "replace" and key == c.layout.head)
    mine = coordinator(HookStore(store, hook))

    with pytest.raises(RestoreRefused, match="quarantined since"):
        mine.restorer.restore(chosen.target)
    assert hook.fired
    assert c.control.load().head == good and _intents(store, c) == intents


def test_a_mark_while_a_forced_repair_reads_makes_its_swap_lose(store: ObjectStore) -> None:
    c = coordinator(store)
    complete(c)
    target = complete(c)
    # a control record that lost a retained entry: repair --force would put it back
    c.control.update(lambda cur: replace(cur, retained=cur.retained[1:]))
    hook = once(
        _gated_to(c, target),
        lambda op, key: op == "list" and key.startswith(c.layout.quarantine_prefix),
    )
    repairer = coordinator(HookStore(store, hook))

    report = repairer.repair(force=True)
    assert hook.fired and report.status is RepairStatus.LOST, report
    after = c.control.load()
    assert len(after.retained) == 1 and after.quarantine_marks == 1  # only the mark's bump
