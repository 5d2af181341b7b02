"""Invariant 10: a publish decided before a restore never takes effect after it, in
the two interleavings a review found (docs/design/concurrency.md, invariant 10):

- a publish whose control read sees a restore committed but not rewound yet decides in
  that restore's generation: it must first roll the rewind forward, or its manifest
  write (stamped with the new generation, `current` only moving forward) makes the
  rewind skip the manifest and readers keep the epoch the restore took back;
- a sink's first publish creates its manifest after a restore listed the manifests to
  rewind: it creates the manifest empty and reads the control record again before
  publishing into it, so a publisher that dies before its post-check leaves nothing
  visible.

Each actor runs whole at a chosen storage call of the publisher (HookStore, no sleeps),
on a real local store; "the publisher dies" is a BaseException raised by the wrapper.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from batchpoint.errors import BatchpointError, CheckpointError
from batchpoint.ops.dataframes import sink_files
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.pipeline import OperatorKind, simple_pipeline
from batchpoint.protocol.sinks import SinkManifest, SinkPublisher, rewound
from batchpoint.protocol.topology import NodeTopology, Topology
from batchpoint.storage.base import ObjectStore
from support.hooks import HookStore
from support.protocol_steps import NAME, SINKS, ack_all, coordinator, sink_epochs

LATE = ("late", "append", ["k"])
WITH_LATE = [("keyed", 2), ("sink", 1), ("late", 1)]


class PublisherKilled(BaseException):
    """An Airflow worker killed mid-publish: nothing after it runs."""


def _done(c: CheckpointCoordinator, *sinks: str, publish: bool = True) -> int:
    nodes = [
        NodeTopology("src", "src", OperatorKind.SOURCE),
        NodeTopology("keyed", "keyed", OperatorKind.OPERATOR, 2),
        *(NodeTopology(s, s, OperatorKind.SINK) for s in sinks or ("sink",)),
    ]
    cid = c.trigger({"src": {"p0": 1}}, topology=Topology(tuple(nodes))).checkpoint_id
    ack_all(c, cid)
    assert c.try_finalize(cid).status is CheckpointStatus.COMPLETED
    if publish:
        c.notify_checkpoint_complete(cid, SINKS)
    return cid


def _manifest(store: ObjectStore, c: CheckpointCoordinator, sink: str) -> SinkManifest | None:
    return SinkPublisher(store, c.layout).manifest(sink)


# == a publish deciding in a restore's generation before its rewind =====================


def test_a_publish_reading_an_unrewound_restore_rolls_it_forward_first(
    local_store: ObjectStore,
) -> None:
    """1 published, 2 completed (its publish died); restored to 1, 3 published on it;
    then a restore to 2 commits (not rewound) between the retried publish of 2's
    roll-forward and its control read. Readers must see [1, 2], as without the race."""
    c = coordinator(local_store)
    one = _done(c)
    two = _done(c, publish=False)
    c.restorer.restore(c.restorer.choose(one).target)
    c.notify_checkpoint_complete(one, SINKS)
    _done(c)
    assert sink_epochs(c) == [one, 3]
    other = coordinator(local_store)
    control_key = other.control.key

    def restore_cas_only() -> None:
        real, other.restorer.finish = other.restorer.finish, lambda: None
        try:
            other.restorer.restore(other.restorer.choose(two).target)
        finally:
            other.restorer.finish = real

    seen = [0]

    def hook(op: str, key: str) -> None:
        if op == "get" and key.endswith(control_key):
            seen[0] += 1
            if seen[0] == 2:  # after the publisher's roll-forward, before its control read
                restore_cas_only()

    report = coordinator(HookStore(local_store, hook)).notify_checkpoint_complete(two, SINKS)
    assert seen[0] >= 2 and report.published == [f"sink@{two}"]
    other.finish_restore()
    coordinator(local_store).notify_checkpoint_complete(two, SINKS)  # the restore's own
    control = coordinator(local_store).control.load()
    assert control.head == two and control.restore.sinks_rewound
    found = _manifest(local_store, c, "sink")
    assert found is not None and found.generation == control.restore_generation
    assert sink_epochs(c) == [one, two]
    view = rewound(found, control.restore.target, control.restore.generation) or found
    assert [e.checkpoint_id for e in view.chain()] == [one, two]  # a downstream reader's


# == a sink's first publish racing a restore ============================================


def _late_setup(store: ObjectStore) -> tuple[CheckpointCoordinator, int, int]:
    """1 and 2 published to "sink"; a deploy adds "late" and checkpoint 3 completes
    with it, unpublished. Returns (coordinator, 2, 3)."""
    c = coordinator(store)
    _done(c)
    two = _done(c)
    c.register(simple_pipeline(NAME, WITH_LATE))
    three = _done(c, "sink", "late", publish=False)
    return c, two, three


def _restore_to(store: ObjectStore, target: int) -> None:
    """`batchpoint restore` run to its end by another actor (the pipeline without
    "late", as deployed before checkpoint 3)."""
    r = coordinator(store)
    r.restorer.restore(r.restorer.choose(target).target)


def _publisher(store: ObjectStore, hook: Callable[[str, str], None]) -> CheckpointCoordinator:
    p = coordinator(HookStore(store, hook))
    p.register(simple_pipeline(NAME, WITH_LATE))
    return p


def test_a_first_publish_after_a_restore_listed_the_sinks_never_shows(
    local_store: ObjectStore,
) -> None:
    """The restore to 2 runs whole just before the publish of 3 creates "late"'s
    manifest; the publisher is killed at its next control read. Its retry is refused
    as stale, so only the manifest's creation tells: it must show nothing."""
    c, two, three = _late_setup(local_store)
    late_key = c.layout.sink_manifest("late")
    control_key = c.control.key
    state = {"created": False}

    def hook(op: str, key: str) -> None:
        if op == "create" and key.endswith(late_key) and not state["created"]:
            _restore_to(local_store, two)
            state["created"] = True
        elif state["created"] and op == "get" and key.endswith(control_key):
            raise PublisherKilled("killed after its manifest write, before its control read")

    with pytest.raises(PublisherKilled):
        _publisher(local_store, hook).notify_checkpoint_complete(three, [*SINKS, LATE])
    retry = _publisher(local_store, lambda op, key: None)
    assert retry.notify_checkpoint_complete(three, [*SINKS, LATE]).is_stale
    retry.finish_restore()
    assert retry.control.load().head == two
    late = _manifest(local_store, c, "late")
    assert late is not None and late.current is None and not late.epochs
    assert sink_epochs(c) == [1, two]
    with pytest.raises(CheckpointError, match="published nothing"):
        SinkPublisher(local_store, c.layout).read_table("late")


def test_a_first_publish_that_sees_the_restore_is_refused(local_store: ObjectStore) -> None:
    """As above, the publisher alive: its control read after the creation sees the
    restore's generation and publishes nothing into the new manifest."""
    c, two, three = _late_setup(local_store)
    late_key = c.layout.sink_manifest("late")
    fired: list[bool] = []

    def hook(op: str, key: str) -> None:
        if op == "create" and key.endswith(late_key) and not fired:
            fired.append(True)
            _restore_to(local_store, two)

    report = _publisher(local_store, hook).notify_checkpoint_complete(three, [*SINKS, LATE])
    assert fired and report.is_stale and f"late@{three}" not in report.published
    late = _manifest(local_store, c, "late")
    assert late is not None and late.current is None and not late.epochs
    assert sink_epochs(c) == [1, two]
    # a reader of the sink hears what holds: nothing published (not "no schema")
    with pytest.raises(BatchpointError, match=r"sink 'late' of '\w+' has published nothing"):
        sink_files(c, "late", "latest")


def test_a_restore_after_the_first_publish_confirmed_rewinds_the_new_manifest(
    local_store: ObjectStore,
) -> None:
    """The restore runs whole after the publisher's control read that follows the
    creation (before its epoch write), and the publisher is killed before its
    post-check: the restore listed the new manifest, so "late" shows nothing."""
    c, two, three = _late_setup(local_store)
    late_key = c.layout.sink_manifest("late")
    control_key = c.control.key
    state: dict[str, Any] = {"created": False, "restored": False}

    def hook(op: str, key: str) -> None:
        if op == "create" and key.endswith(late_key):
            state["created"] = True
        elif state["created"] and op == "get" and key.endswith(late_key):
            if not state["restored"]:  # the epoch write's read, after the confirmation
                state["restored"] = True
                _restore_to(local_store, two)
        elif state["restored"] and op == "get" and key.endswith(control_key):
            raise PublisherKilled("killed before its post-check")

    with pytest.raises(PublisherKilled):
        _publisher(local_store, hook).notify_checkpoint_complete(three, [*SINKS, LATE])
    assert state["restored"]
    late = _manifest(local_store, c, "late")
    assert late is not None and late.current is None and three not in late.epochs
    assert sink_epochs(c) == [1, two]


def test_a_first_publish_without_a_restore_publishes(local_store: ObjectStore) -> None:
    """No race: the new sink's first publish creates its manifest and publishes into it,
    and a second notify changes nothing."""
    c, _, three = _late_setup(local_store)
    p = _publisher(local_store, lambda op, key: None)
    report = p.notify_checkpoint_complete(three, [*SINKS, LATE])
    assert not report.is_stale and f"late@{three}" in report.published
    late = _manifest(local_store, c, "late")
    assert late is not None and late.current == three and list(late.epochs) == [three]
    again = p.notify_checkpoint_complete(three, [*SINKS, LATE])
    assert not again.is_stale and again.published == []


def test_a_manifest_another_publisher_created_empty_is_confirmed_too(
    local_store: ObjectStore,
) -> None:
    """The publisher decides; the restore to 2 runs whole; then another publisher of 3
    (decided before the restore) creates "late"'s manifest empty and is killed before
    its confirmation. The publisher finds the manifest there but empty: it confirms
    too (a manifest created after the restore's listing is no proof) and is refused;
    had it written an epoch, it would be killed before its post-check."""
    c, two, three = _late_setup(local_store)
    late_key = c.layout.sink_manifest("late")
    control_key = c.control.key
    completed = c.get_outcome(three).completed
    state = {"created": False}

    def killed() -> bool:
        raise PublisherKilled("the other publisher, killed before its confirmation")

    def other_publisher_dies() -> None:
        _restore_to(local_store, two)
        with pytest.raises(PublisherKilled):
            SinkPublisher(local_store, c.layout).publish(
                completed, "late", "append", ["k"], generation=0, confirm=killed
            )
        state["created"] = True

    def hook(op: str, key: str) -> None:
        if op == "get" and key.endswith(late_key) and not state["created"]:
            other_publisher_dies()
        elif state["created"] and op == "get" and key.endswith(control_key):
            found = _manifest(local_store, c, "late")
            if found is not None and found.epochs:  # it wrote an epoch: its post-check
                raise PublisherKilled("killed before its post-check")

    with contextlib.suppress(PublisherKilled):
        report = _publisher(local_store, hook).notify_checkpoint_complete(three, [*SINKS, LATE])
        assert report.is_stale and f"late@{three}" not in report.published
    late = _manifest(local_store, c, "late")
    assert late is not None and late.current is None and not late.epochs
    assert sink_epochs(c) == [1, two]
