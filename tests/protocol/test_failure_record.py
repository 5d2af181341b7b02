"""A corrupt failure record (failures.json: the count of consecutive failed checkpoints)
is named with the way out, `batchpoint reset`, which replaces it; repair, which judges
checkpoints by their records, names it and leaves it. The replacement is a compare-and-
swap on the corrupt bytes read, so a reset racing another never writes over a record
that became readable meanwhile, and a record of a newer version is never replaced."""

from __future__ import annotations

import pytest
from tests.support.hooks import HookStore, once

from batchpoint.errors import RESET_HINT, CorruptRecord, UnsupportedRecordVersion
from batchpoint.protocol.checkpoint import CheckpointFailureReason
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.failures import PipelineStatus
from batchpoint.storage.base import ObjectStore
from support.protocol_steps import complete, coordinator

CUT_SHORT = b'{"kind": "failure-state", "failed_'


def test_a_corrupt_failure_record_names_reset_which_replaces_it(store: ObjectStore) -> None:
    c = coordinator(store, tolerable_failed_checkpoints=0)
    head = complete(c)
    store.put(c.layout.failures, CUT_SHORT)

    with pytest.raises(CorruptRecord, match="batchpoint reset") as refused:
        c.trigger({"src": {"p0": 2}})
    assert RESET_HINT in str(refused.value) and "repair" not in str(refused.value)
    found = [str(f) for f in c.repair(dry_run=True).findings]
    assert [f for f in found if c.layout.failures in f and RESET_HINT in f], found
    assert store.get(c.layout.failures).data == CUT_SHORT  # repair leaves it

    c.reset_failures()
    state = c.failures.state()
    assert state.status is PipelineStatus.RUNNING and state.failed_ids == ()
    assert state.last_completed_id == head and "replaced" in state.reason
    # a late failure of a checkpoint the head subsumes does not count, a new one does
    c.failures.record_failure(head, CheckpointFailureReason.DECLINED, "late", 0.0)
    assert c.failures.state().status is PipelineStatus.RUNNING
    assert complete(c) == head + 1


def test_a_reset_racing_another_over_a_corrupt_record_replaces_it_once(
    store: ObjectStore,
) -> None:
    c = coordinator(store)
    complete(c)
    store.put(c.layout.failures, CUT_SHORT)
    other: list[bool] = []

    def failed_in_between() -> None:
        # the other reset wins, then a checkpoint fails: the record is readable again
        c.reset_failures()
        c.failures.record_failure(7, CheckpointFailureReason.DECLINED, "declined", 0.0)
        other.append(True)

    hook = once(failed_in_between, lambda op, key: op == "replace" and key == c.layout.failures)
    racing = CheckpointCoordinator(HookStore(store, hook), c.pipeline, c.config, c.clock)
    racing.reset_failures()

    assert hook.fired and other
    state = c.failures.state()
    # the first reset's replacement lost its compare-and-swap and cleared the readable
    # record as any reset does: the count is cleared, the record is not replaced again
    assert state.status is PipelineStatus.RUNNING and state.failed_ids == ()
    assert state.reason == "explicit reset"


def test_a_failure_record_of_a_newer_version_is_never_replaced(store: ObjectStore) -> None:
    c = coordinator(store)
    complete(c)
    newer = b'{"kind": "failure-state", "version": 99, "status": "FAILED"}'
    store.put(c.layout.failures, newer)
    with pytest.raises(UnsupportedRecordVersion):
        c.reset_failures()
    assert store.get(c.layout.failures).data == newer
    for dry_run in (True, False):  # repair names it and goes on with its own work
        report = c.repair(dry_run=dry_run)
        assert [f for f in report.findings if "upgrade batchpoint" in str(f)], report.findings
    assert store.get(c.layout.failures).data == newer


def test_a_failure_record_with_no_version_is_damage_reset_replaces(store: ObjectStore) -> None:
    c = coordinator(store)
    complete(c)
    store.put(c.layout.failures, b'{"kind": "failure-state", "status": "FAILED"}')
    c.reset_failures()
    assert c.failures.state().status is PipelineStatus.RUNNING
