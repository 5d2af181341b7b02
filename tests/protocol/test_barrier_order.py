"""A checkpoint's barrier is never behind its base's (DESIGN.md invariant 3: no offset
read twice, none skipped), whatever trigger runs beside it. A savepoint run and a
scheduled run triggered at once, with input landing between their captures: the
scheduled one may be admitted on the pending savepoint, and then it must not start from
an older barrier than the savepoint ends at. Every interleaving of the savepoint's whole
trigger into the checkpoint's storage calls is run."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from tests.support.hooks import HookStore

from batchpoint.errors import TriggerRefused
from batchpoint.protocol.checkpoint import (
    CheckpointFailureReason,
    CheckpointStatus,
    CheckpointType,
    PendingCheckpoint,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline import simple_pipeline
from batchpoint.storage.base import ObjectStore
from support.clock import FakeClock
from support.protocol_steps import ack_all


class LandingSource:
    """A source that has more input at each capture: one offset, counting up."""

    def __init__(self) -> None:
        self._offsets = itertools.count(1)

    def capture(self) -> Mapping[str, Any]:
        return {"src": {"p0": next(self._offsets)}}


def _offset(barrier: Mapping[str, Any]) -> int:
    return int(barrier["src"]["p0"])


def _pipeline(store: ObjectStore, name: str, clock: FakeClock) -> CheckpointCoordinator:
    c = CheckpointCoordinator(store, name, CheckpointConfig(max_concurrent=2), clock)
    c.register(simple_pipeline(name, [("keyed", 2), ("sink", 1)]))
    return c


def _counting(count: list[int], at: int, action: Callable[[], None]) -> Callable[[str, str], None]:
    def hook(op: str, key: str) -> None:
        count[0] += 1
        if count[0] == at:
            action()

    return hook


def _savepoint_at(
    store: ObjectStore, clock: FakeClock, at: int
) -> tuple[PendingCheckpoint, PendingCheckpoint] | None:
    """A scheduled trigger with a savepoint's whole trigger run at its `at`-th storage
    call, both capturing one source: (the checkpoint, the savepoint), or None when the
    checkpoint was refused."""
    c = _pipeline(store, f"at{at}", clock)
    source = LandingSource()
    ack_all(c, c.trigger(source.capture).checkpoint_id)
    savepoints: list[PendingCheckpoint] = []

    def savepoint() -> None:
        savepoints.append(c.trigger(source.capture, checkpoint_type=CheckpointType.SAVEPOINT))

    count = [0]
    racing = CheckpointCoordinator(
        HookStore(store, _counting(count, at, savepoint)), c.pipeline, c.config, clock
    )
    try:
        scheduled = racing.trigger(source.capture)
    except TriggerRefused:
        return None
    assert savepoints, f"at call {at}: the savepoint never ran"
    return scheduled, savepoints[0]


def test_a_checkpoint_admitted_on_a_concurrent_savepoint_starts_where_it_ends(
    store: ObjectStore,
) -> None:
    clock = FakeClock()
    calls = [0]
    probe = _pipeline(HookStore(store, _counting(calls, 0, lambda: None)), "probe", clock)
    first = probe.trigger(LandingSource().capture).checkpoint_id
    ack_all(probe, first)
    calls[0] = 0
    probe.trigger(LandingSource().capture)
    steps = calls[0]  # the storage calls of one trigger on a completed base

    on_savepoint = 0
    for at in range(1, steps + 1):
        raced = _savepoint_at(store, clock, at)
        if raced is None:
            continue  # its base was admitted but had no record yet: refused, nothing read
        scheduled, savepoint = raced
        on_savepoint += scheduled.base_checkpoint_id == savepoint.checkpoint_id
        for pending in raced:
            if pending.base_checkpoint_id is not None:
                assert _offset(pending.barrier) >= _offset(pending.base_barrier), (
                    f"at call {at}: checkpoint {pending.checkpoint_id} on base "
                    f"{pending.base_checkpoint_id} starts behind it: "
                    f"{pending.barrier} < {pending.base_barrier}"
                )
    assert on_savepoint, "no interleaving admitted the checkpoint on the savepoint"


def test_a_barrier_that_cannot_be_captured_again_aborts_the_admitted_checkpoint(
    local_store: ObjectStore,
) -> None:
    """The second capture comes after the admission took an id: a source that fails it
    leaves no admitted checkpoint waiting for its deadline."""
    clock = FakeClock()
    c = _pipeline(local_store, "declined", clock)
    source = LandingSource()
    ack_all(c, c.trigger(source.capture).checkpoint_id)
    captures = [0]

    def failing() -> Mapping[str, Any]:
        captures[0] += 1
        if captures[0] == 1:
            # the savepoint is admitted between this capture and the checkpoint's admission
            c.trigger(source.capture, checkpoint_type=CheckpointType.SAVEPOINT)
            return source.capture()
        raise OSError("the source's listing failed")

    with pytest.raises(OSError, match="listing failed"):
        c.trigger(failing)

    declined = c.get_outcome(3)
    assert captures[0] == 2 and declined is not None
    assert declined.status is CheckpointStatus.ABORTED
    assert declined.reason is CheckpointFailureReason.TRIGGER_FAILED
    assert c.failures.state().failed_ids == ()  # not counted, as before the admission
    assert "barrier could not be captured" in declined.message
    assert [p.checkpoint_id for p in c.pending_checkpoints()] == [2]
