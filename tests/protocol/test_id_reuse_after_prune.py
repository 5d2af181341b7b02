"""Ids are never reused (invariant 5), also once GC pruned them from the control record
(found by a reviewer): a counter put back from an older copy of the store handed out an
id whose checkpoint was aborted, collected and pruned, because the admission refused
only ids the record still names. It now also refuses an id below the newest settled id
the record names (GC keeps the newest one ever used named): `decider.admissible`."""

from __future__ import annotations

from pathlib import Path

from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointStatus
from batchpoint.protocol.decider import admissible
from batchpoint.storage.local import LocalObjectStore
from support.protocol_steps import ack_all, complete, coordinator


def test_a_counter_put_back_never_hands_out_an_id_gc_pruned(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    c = coordinator(store, num_retained=1, gc_grace=0)
    complete(c)
    old_copy = store.get(c.layout.id_counter).data  # says the next id is 2
    aborted = []
    for offset in (2, 3, 4):
        cid = c.trigger({"src": {"p0": offset}}).checkpoint_id
        c.abort(cid, CheckpointFailureReason.DECLINED, "task failed")
        aborted.append(cid)
    head = complete(c)
    pruned = c.garbage_collector(grace=0).collect(history_limit=0).pruned_checkpoints
    assert pruned == aborted  # their records are gone, and the record no longer names them
    assert not set(aborted) & c.control.load().known_ids()
    store.put(c.layout.id_counter, old_copy)

    pending = c.trigger({"src": {"p0": 9}})
    assert pending.checkpoint_id == head + 1
    ack_all(c, pending.checkpoint_id)
    outcome = c.try_finalize(pending.checkpoint_id)
    assert outcome is not None and outcome.status is CheckpointStatus.COMPLETED
    assert c.control.load().head == pending.checkpoint_id


def test_a_trigger_overtaken_by_a_newer_completed_checkpoint_takes_a_higher_id(
    tmp_path: Path,
) -> None:
    """The lower id of two racing triggers, admitted after the newer one completed, is
    refused like a counter behind: the trigger takes the next id, never a refusal."""
    store = LocalObjectStore(tmp_path)
    first = coordinator(store, max_concurrent=10)
    other = coordinator(store, max_concurrent=10)  # another process, the same pipeline
    complete(first)
    counter = first.checkpoint_trigger._ids
    take = counter.get_and_increment
    taken: list[int] = []
    overtaken: list[int] = []

    def taken_then_overtaken() -> int:
        taken.append(take())
        if not overtaken:
            overtaken.append(complete(other))  # admitted, acked, completed: the head
        return taken[-1]

    counter.get_and_increment = taken_then_overtaken  # type: ignore[method-assign]
    pending = first.trigger({"src": {"p0": 5}})
    assert taken == [2, 4] and overtaken == [3]  # 2 refused once 3 settled
    assert pending.checkpoint_id == 4
    assert [p.checkpoint_id for p in first.control.load().pending] == [4]
    assert first.get_outcome(2) is None  # never admitted: nothing to settle


def test_only_settled_ids_bound_what_is_admissible(tmp_path: Path) -> None:
    """A newer id still pending does not refuse an older one (racing triggers admit out
    of order, tests/protocol/test_id_counter.py); a newer settled one does."""
    store = LocalObjectStore(tmp_path)
    c = coordinator(store, max_concurrent=10)
    head = complete(c)
    held = c.checkpoint_trigger._ids.get_and_increment()  # a trigger not yet admitted
    newer = c.trigger({"src": {"p0": 2}}).checkpoint_id
    assert head < held < newer
    control = c.control.load()
    assert not admissible(control, head) and not admissible(control, newer)  # named
    assert admissible(control, held)  # below a pending id only

    ack_all(c, newer)
    assert c.try_finalize(newer) is not None
    assert not admissible(c.control.load(), held)  # below the head now
