"""A pipeline's very first trigger hit by one storage fault at any of its writes (a 503
that outlasted the client's retries, a lost reply, a killed process): the retry, by
Airflow or the next schedule, is admitted. Found by a reviewer: the first id was taken
before the control record existed, so a failed admission left "ids used, no control
record", which reads as a lost record and refuses every trigger until a repair."""

from __future__ import annotations

import tempfile

import pytest

from batchpoint.storage.local import LocalObjectStore
from support import protocol_steps as steps
from support.faulty_store import Crash, Fault, FaultyStore, InjectedStorageError

#: (fault, op, key, how many matching calls pass first): every write of a first
#: trigger that, failing, leaves no pending checkpoint behind (one that lands, the
#: admission's, leaves one that is refused as pending until its deadline, by design)
CASES = [
    (fault, op, key, skip)
    for fault in (Fault.TRANSIENT, Fault.CRASH_BEFORE)
    for op, key, skip in (
        ("create", "ids", 0),  # the first id
        ("create", "head.json", 0),  # the control record, created empty
        ("replace", "head.json", 0),  # the admission
    )
] + [
    (fault, "create", "head.json", 0)  # the empty record lands, its reply does not
    for fault in (Fault.LOST_REPLY, Fault.CRASH_AFTER)
]


@pytest.mark.parametrize(("fault", "op", "key", "skip"), CASES)
def test_the_first_trigger_retried_after_a_fault_is_admitted(
    fault: Fault, op: str, key: str, skip: int
) -> None:
    inner = LocalObjectStore(tempfile.mkdtemp())
    store = FaultyStore(inner)
    store.arm(fault, op=op, key_contains=key, skip=skip)
    with pytest.raises((InjectedStorageError, Crash)):
        steps.coordinator(store).trigger({"src": {"p0": 1}})
    assert store.injected, "the fault never fired"

    retry = steps.coordinator(inner)  # a new process: the task's retry
    assert retry.lost_control() is None
    first = steps.complete(retry)
    assert retry.head.get().checkpoint_id == first
    assert retry.trigger({"src": {"p0": 2}}).base_checkpoint_id == first
