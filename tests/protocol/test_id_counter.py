"""Checkpoint ids are never reused (invariant 5), also when the counter is lost: a
reviewer deleted `ids.json` after two checkpoints, and the next trigger took id 1
again, admitted beside the retained 1, finalized into 1's old outcome (its barrier, not
the one captured) and left the control record retaining 1 twice. With the control
record lost too, the pipeline restarted from empty, the head going back from 2 to 1.
A counter put back from an older copy of the store did the same: the admission now
refuses any id the control record names, or one below the newest settled id it names
(GC prunes collected ids from the record), and the counter moves past them."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchpoint.errors import CorruptRecord, TriggerRefused
from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointStatus
from batchpoint.storage.local import LocalObjectStore
from support.protocol_steps import ack_all, complete, coordinator


@pytest.mark.parametrize("gc_first", [False, True], ids=["kept", "collected"])
def test_a_lost_counter_continues_past_every_checkpoint_stored(
    tmp_path: Path, gc_first: bool
) -> None:
    store = LocalObjectStore(tmp_path)
    c = coordinator(store, num_retained=1, gc_grace=0)
    ids = [complete(c) for _ in range(3)]
    if gc_first:  # 1 and 2 collected, their records pruned: the control record says so
        c.garbage_collector(grace=0).collect(history_limit=0)
    store.delete(c.layout.id_counter)

    pending = c.trigger({"src": {"p0": 5}})
    assert pending.checkpoint_id == max(ids) + 1
    ack_all(c, pending.checkpoint_id)
    outcome = c.try_finalize(pending.checkpoint_id)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    assert outcome.pending.barrier == {"src": {"p0": 5}}
    assert c.control.load().retained_ids() == [pending.checkpoint_id]


def test_history_pruned_to_nothing_still_remembers_the_newest_id(tmp_path: Path) -> None:
    """`gc --history-limit 0` pruned every collected id; when the newest ones were
    aborted, nothing stored named them, and a lost counter handed the newest out again
    (found by a reviewer)."""
    store = LocalObjectStore(tmp_path)
    c = coordinator(store, num_retained=1, gc_grace=0)
    complete(c)
    used = c.trigger({"src": {"p0": 2}}).checkpoint_id
    c.abort(used, CheckpointFailureReason.DECLINED, "task failed")
    report = c.garbage_collector(grace=0).collect(history_limit=0)
    assert report.pruned_checkpoints == [used]  # its records and folder are gone
    again = c.garbage_collector(grace=0).collect(history_limit=0)
    assert again.pruned_checkpoints == []  # kept named, not pruned again by every pass
    store.delete(c.layout.id_counter)

    assert c.trigger({"src": {"p0": 3}}).checkpoint_id == used + 1


def test_with_the_control_record_lost_too_the_trigger_still_refuses(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    c = coordinator(store)
    complete(c), complete(c)
    store.delete(c.layout.id_counter)
    store.delete(c.control.key)
    with pytest.raises(TriggerRefused) as refused:
        c.trigger({"src": {"p0": 5}})
    assert refused.value.reason is CheckpointFailureReason.NEEDS_REPAIR


def test_a_damaged_counter_says_to_delete_it_and_then_continues(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    c = coordinator(store)
    last = max(complete(c), complete(c))
    store.put(c.layout.id_counter, b'{"kind": "checkpoint-id-counter", "next_')
    with pytest.raises(CorruptRecord, match="delete it: the next trigger continues past"):
        c.trigger({"src": {"p0": 5}})
    store.delete(c.layout.id_counter)  # as the error says
    assert c.trigger({"src": {"p0": 5}}).checkpoint_id == last + 1


@pytest.mark.parametrize("gc_first", [False, True], ids=["kept", "collected"])
def test_a_counter_put_back_from_an_older_copy_never_hands_out_a_used_id(
    tmp_path: Path, gc_first: bool
) -> None:
    store = LocalObjectStore(tmp_path)
    c = coordinator(store, num_retained=1, gc_grace=0)
    complete(c)
    old_copy = store.get(c.layout.id_counter).data
    ids = [complete(c) for _ in range(3)]
    if gc_first:
        c.garbage_collector(grace=0).collect(history_limit=0)
    store.put(c.layout.id_counter, old_copy)  # says the next id is 2

    pending = c.trigger({"src": {"p0": 5}})
    assert pending.checkpoint_id == max(ids) + 1
    ack_all(c, pending.checkpoint_id)
    outcome = c.try_finalize(pending.checkpoint_id)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    assert outcome.pending.barrier == {"src": {"p0": 5}}
    assert c.control.load().retained_ids() == [pending.checkpoint_id]
    assert c.trigger({"src": {"p0": 6}}).checkpoint_id == pending.checkpoint_id + 1


def test_an_import_past_a_counter_that_is_behind_takes_a_new_id(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    c = coordinator(store)
    complete(c)
    old_copy = store.get(c.layout.id_counter).data
    last = max(complete(c), complete(c))
    store.put(c.layout.id_counter, old_copy)

    entry = c.checkpoint_trigger.admit_import(now=1.0)
    assert entry.checkpoint_id == last + 1 and entry.imported
    assert sorted(p.checkpoint_id for p in c.control.load().pending) == [last + 1]


def test_racing_triggers_admit_their_ids_out_of_order(tmp_path: Path) -> None:
    """A trigger that took its id first may admit it after another took and admitted a
    newer one (catch-up runs, a savepoint beside a scheduled run): that id is not used,
    and is admitted as it is (a reviewer saw the first rule, "no id below the newest",
    fail it as a counter behind and end in NEEDS_REPAIR)."""
    store = LocalObjectStore(tmp_path)
    first = coordinator(store, max_concurrent=10)
    other = coordinator(store, max_concurrent=10)  # another process, the same pipeline
    complete(first)
    counter = first.checkpoint_trigger._ids
    take = counter.get_and_increment
    admitted_meanwhile = []

    def taken_then_overtaken() -> int:
        taken = take()
        admitted_meanwhile.append(other.trigger({"src": {"p0": 9}}).checkpoint_id)
        return taken

    counter.get_and_increment = taken_then_overtaken  # type: ignore[method-assign]
    pending = first.trigger({"src": {"p0": 5}})
    assert admitted_meanwhile == [pending.checkpoint_id + 1]
    assert sorted(p.checkpoint_id for p in first.control.load().pending) == [
        pending.checkpoint_id,
        pending.checkpoint_id + 1,
    ]
