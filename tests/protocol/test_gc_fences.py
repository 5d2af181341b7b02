"""GC decides on what it read, so each decision must hold against what happened since:
history pruning takes only ids its own references were built for, and a lost control
record (which reads as nothing retained) prunes no sink and deletes nothing. Both
found by review and reproduced first; every test runs on the local store and on
SeaweedFS, the other actors' steps run from a hook at a chosen call, never a sleep."""

from __future__ import annotations

from tests.support.hooks import HookStore, once

from batchpoint.protocol.checkpoint import CheckpointType
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.sinks import staged_output
from batchpoint.storage.base import ObjectStore
from support.clock import FakeClock
from support.protocol_steps import complete, coordinator, manifest
from support.restoring import restore

SNAPSHOT = [("sink", "snapshot", ["k"])]


def _missing_files(c: CheckpointCoordinator) -> list[str]:
    """Files of the append sink's current chain that are gone from storage."""
    return [f.path for e in manifest(c).chain() for f in e.files if not c.store.exists(f.path)]


def test_history_pruning_skips_an_id_collected_after_its_references_were_read(
    store: ObjectStore,
) -> None:
    """Pass P1 reads the record and the references, then pauses. Meanwhile Y completes
    and is published to the append sink, Z subsumes it (Z's chain still reads Y's
    epoch), the grace passes and pass P2 moves Y to `collected`. P1's history pruning
    read `collected` afresh and deleted Y's published file by references that never
    saw it."""
    clock = FakeClock()
    c = coordinator(store, clock, num_retained=1)
    first = complete(c)
    later: dict[str, int] = {}

    def others() -> None:
        later["y"], later["z"] = complete(c), complete(c)
        clock.advance(10_000)
        assert later["y"] in c.garbage_collector().collect().dequeued  # P2

    hook = once(others, lambda op, key: op == "list" and key == c.layout.data_prefix(first))
    p1 = coordinator(HookStore(store, hook), clock, num_retained=1).garbage_collector()
    report = p1.collect(history_limit=0)
    assert hook.fired
    assert later["y"] not in report.pruned_checkpoints
    assert later["y"] in [e.checkpoint_id for e in manifest(c).chain()]
    assert _missing_files(c) == []
    # A pass that read the references after Y was collected keeps its published file.
    again = c.garbage_collector().collect(history_limit=0)
    assert _missing_files(c) == [] and later["y"] not in again.pruned_checkpoints


def test_gc_on_a_lost_control_record_prunes_no_sink_and_reports_it(store: ObjectStore) -> None:
    """A and B published to a snapshot sink (two retained), then the record is lost and
    `gc` runs before `repair`. The pass read the missing record as nothing retained and
    dropped A's epoch, so the repair found A retained but a restore to it rewound the
    sink to nothing."""
    c = coordinator(store, FakeClock(), num_retained=2)
    a = complete(c, publish=False)
    c.notify_checkpoint_complete(a, SNAPSHOT)
    b = complete(c, publish=False)
    c.notify_checkpoint_complete(b, SNAPSHOT)
    store.delete(c.layout.head)
    for dry_run in (True, False):
        report = c.garbage_collector().collect(dry_run=dry_run, history_limit=0)
        assert report.dropped_epochs == [] and report.deleted_files == []
        assert [f.subject for f in report.findings] == [c.layout.head]
        assert "batchpoint repair" in report.findings[0].problem
    assert sorted(manifest(c).epochs) == [a, b]
    assert c.repair().head == b
    restore(c, a)
    assert manifest(c).current == a
    assert all(store.exists(f.path) for f in staged_output(c.completed.get(a), "sink"))


def test_gc_on_a_pipeline_that_never_ran_finds_nothing(store: ObjectStore) -> None:
    c = coordinator(store, FakeClock())
    report = c.garbage_collector().collect(history_limit=0)
    assert report.findings == [] and report.deleted_files == []
    # One savepoint later the record exists and the pass runs as usual.
    kept = complete(c, CheckpointType.SAVEPOINT)
    assert c.garbage_collector().collect().kept_checkpoints == [kept]
