"""The records port (CheckpointRecords) and the files port (CheckpointFiles) alone: what
each write leaves in storage, and the storage operations it issues, in order (the
concurrency model's seeded schedules interleave collaborators at these operations, so a
port must issue exactly what its callers issued by hand before it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from batchpoint.errors import RecordError
from batchpoint.protocol.checkpoint import (
    AckRecord,
    CheckpointFailureReason,
    CheckpointOutcome,
    CheckpointStatus,
    DeclineRecord,
    TaskMetrics,
)
from batchpoint.protocol.checkpoint_files import CheckpointFiles
from batchpoint.protocol.checkpoint_records import CheckpointRecords
from batchpoint.protocol.control_store import ControlStore
from batchpoint.protocol.restores import RestoreRecord
from batchpoint.storage.base import ObjectStore
from support.clock import FakeClock
from support.collaborator_parts import (
    K0,
    K1,
    PIPELINE,
    Parts,
    write_ack,
    write_completed,
    write_pending,
)

Ops = list[tuple[str, str | None]]


class OrderedStore:
    """The real store, recording each operation and the key it names, in order."""

    def __init__(self, inner: ObjectStore) -> None:
        self._inner = inner
        self.ops: Ops = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def recorded(*args: Any, **kwargs: Any) -> Any:
            key = args[0] if args and isinstance(args[0], str) else None
            self.ops.append((name, key))
            return attr(*args, **kwargs)

        return recorded


@pytest.fixture
def parts(tmp_path: Path) -> Parts:
    return Parts.at(tmp_path)


def ports_over(parts: Parts) -> tuple[OrderedStore, CheckpointRecords, CheckpointFiles]:
    """The two ports over the same storage as `parts`, through a recording store."""
    store = OrderedStore(parts.store)
    inner = cast(ObjectStore, store)
    control = ControlStore(inner, parts.layout, FakeClock())
    records = CheckpointRecords(inner, parts.layout, control)
    return store, records, CheckpointFiles(inner, parts.layout)


def test_an_outcome_is_written_once_and_a_loser_reads_the_winner(parts: Parts) -> None:
    store, records, _ = ports_over(parts)
    pending = write_pending(parts, 1)
    key = parts.layout.outcome(1)
    expired, declined = CheckpointFailureReason.EXPIRED, CheckpointFailureReason.DECLINED
    first = CheckpointOutcome(CheckpointStatus.ABORTED, pending, 1.0, reason=expired)
    assert records.create_outcome(first) == (True, first)
    assert store.ops == [("create", key)]
    later = CheckpointOutcome(CheckpointStatus.ABORTED, pending, 2.0, reason=declined)
    assert records.create_outcome(later) == (False, first)
    assert store.ops[1:] == [("create", key), ("get", key)]


def test_an_ack_is_written_once_and_a_decline_stands_as_first_written(parts: Parts) -> None:
    store, records, _ = ports_over(parts)
    write_pending(parts, 1)
    mine = AckRecord(1, K0, "a1", (), TaskMetrics(), 1.0, "keyed")
    theirs = AckRecord(1, K0, "a2", (), TaskMetrics(), 2.0, "keyed")
    assert records.create_ack(mine) == (True, mine)
    assert records.create_ack(theirs) == (False, mine)
    assert records.has_ack(1, K0) and not records.has_ack(1, K1)
    key, other = parts.layout.ack(1, K0), parts.layout.ack(1, K1)
    created, lost = [("create", key)], [("create", key), ("get", key)]
    assert store.ops == [*created, *lost, ("exists", key), ("exists", other)]
    first = DeclineRecord(1, K1, "a1", "disk full", 3.0)
    records.create_decline(first)
    records.create_decline(DeclineRecord(1, K1, "a1", "again", 4.0))
    assert [d.reason for d in records.declines(1)] == ["disk full"]


def test_the_pending_record_is_created_checked_and_removed(parts: Parts) -> None:
    store, records, _ = ports_over(parts)
    pending = write_pending(parts, 1)
    parts.store.delete(parts.layout.active(1))
    store.ops.clear()
    records.create_pending(pending)
    assert records.has_pending(1) and records.get_pending(1) == pending
    records.delete_pending(1)
    assert not records.has_pending(1)
    key = parts.layout.active(1)
    assert [op for op in store.ops if op[0] != "get"] == [
        ("create", key),
        ("exists", key),
        ("delete", key),
        ("exists", key),
    ]


def test_pending_records_skip_without_reading_and_name_the_damaged(parts: Parts) -> None:
    store, records, _ = ports_over(parts)
    for checkpoint_id in (1, 2, 3):
        write_pending(parts, checkpoint_id)
    parts.store.put(parts.layout.active(3), b"{not json")
    store.ops.clear()
    found = list(records.pending_records(skip=lambda checkpoint_id: checkpoint_id == 2))
    assert [cid for cid, _ in found] == [1, 3]
    assert found[0][1] == records.get_pending(1)
    assert isinstance(found[1][1], RecordError)
    assert ("get", parts.layout.active(2)) not in store.ops
    assert [p.checkpoint_id for p in records.pending_checkpoints()] == [1, 2]


def test_a_restore_record_is_put_and_read_back_by_generation(parts: Parts) -> None:
    _, records, _ = ports_over(parts)
    records.put_restore(RestoreRecord(4, 1, 3, 5.0))
    records.put_restore(RestoreRecord(3, 2, 4, 6.0))
    parts.store.put(parts.layout.restore(2), b"damaged")
    read = dict(records.restore_records())
    assert read[1] == RestoreRecord(4, 1, 3, 5.0)
    assert isinstance(read[2], RecordError)
    assert records.storage_uri == parts.store.uri
    assert records.pipeline == PIPELINE


def test_files_delete_only_the_attempts_own_files(parts: Parts) -> None:
    _, _, files = ports_over(parts)
    write_pending(parts, 1)
    mine = write_ack(parts, 1, K0, "a2")
    other = write_ack(parts, 1, K1, "a1")  # another task's file the ack names too
    files.delete_attempt_files(
        AckRecord(1, K0, "a2", (*mine.handles, *other.handles), TaskMetrics(), 1.0)
    )
    assert not parts.store.exists(mine.handles[0].path)
    assert parts.store.exists(other.handles[0].path)


def test_files_check_list_and_prune_a_folder_its_outcome_last(parts: Parts) -> None:
    store, _, files = ports_over(parts)
    completed = write_completed(parts, 1)
    assert files.check(completed.handles, checksums=True) == []
    data = {i.key for i in files.data_files(1)}
    assert data == {h.path for h in completed.handles}
    found, in_data = files.folder(1)
    assert {i.key for i in in_data} == data and len(found) > len(in_data)
    store.ops.clear()
    files.prune(1, [i.key for i in found])
    assert store.ops == [("delete_many", None), ("delete", parts.layout.outcome(1))]
    assert list(parts.store.list(parts.layout.checkpoint(1))) == []
