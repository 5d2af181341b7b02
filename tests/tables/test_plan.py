"""What a table sync commits, from the table's position and the manifest (no Iceberg)."""

from __future__ import annotations

from batchpoint.protocol.checkpoint import FileHandle
from batchpoint.protocol.sink_manifest import SinkMode
from batchpoint.protocol.sinks import PublishedEpoch, SinkManifest
from batchpoint.tables.plan import Operation, TablePosition, plan_sync


def _file(name: str, rows: int = 1) -> FileHandle:
    return FileHandle(name, 10, "0" * 64, rows)


def _manifest(current: int | None, generation: int = 0, mode: str = "append") -> SinkManifest:
    # 1 <- 2 <- 3, and 4 on 2 (the branch after a restore to 2)
    epochs = {
        1: PublishedEpoch(1, None, (_file("a"), _file("empty", rows=0))),
        2: PublishedEpoch(2, 1, (_file("b"),)),
        3: PublishedEpoch(3, 2, (_file("c"),)),
        4: PublishedEpoch(4, 2, (_file("d"),)),
    }
    return SinkManifest("s", SinkMode(mode), ("k",), current, epochs, generation)


def _paths(step) -> list[str]:
    return [f.path for f in step.files]


def test_a_new_table_gets_every_epoch_of_the_chain_one_commit_each() -> None:
    plan = plan_sync(None, _manifest(3))
    assert [(s.operation, s.checkpoint_id) for s in plan.steps] == [
        (Operation.PUBLISH, 1),
        (Operation.PUBLISH, 2),
        (Operation.PUBLISH, 3),
    ]
    assert _paths(plan.steps[0]) == ["a"]  # the empty file adds nothing to a table
    assert not any(s.replace for s in plan.steps)


def test_snapshot_mode_replaces_the_content_each_commit() -> None:
    plan = plan_sync(TablePosition(1, 0), _manifest(3, mode="snapshot"))
    assert [(s.checkpoint_id, s.replace, _paths(s)) for s in plan.steps] == [
        (2, True, ["b"]),
        (3, True, ["c"]),
    ]


def test_a_table_at_the_current_checkpoint_needs_nothing() -> None:
    plan = plan_sync(TablePosition(3, 0), _manifest(3))
    assert plan.steps == () and not plan.stale


def test_a_lagging_table_catches_up_from_where_it_is() -> None:
    plan = plan_sync(TablePosition(2, 0), _manifest(3))
    assert [s.checkpoint_id for s in plan.steps] == [3]


def test_after_a_restore_the_table_gets_one_commit_of_the_restored_content() -> None:
    # table at 3 (generation 0); the manifest was rewound to 2, then 4 published on it
    plan = plan_sync(TablePosition(3, 0), _manifest(4, generation=1))
    assert len(plan.steps) == 1
    step = plan.steps[0]
    assert (step.operation, step.checkpoint_id, step.replace) == (Operation.REWIND, 4, True)
    assert _paths(step) == ["a", "b", "d"]  # append mode: the whole chain of 4


def test_a_restore_to_the_tables_own_checkpoint_still_stamps_the_new_generation() -> None:
    # Without the stamp, a sync that read the manifest before the restore could still
    # commit an epoch of the abandoned timeline on top (it checks the generation).
    plan = plan_sync(TablePosition(2, 0), _manifest(2, generation=1))
    assert [(s.operation, s.checkpoint_id, s.replace) for s in plan.steps] == [
        (Operation.REWIND, 2, True)
    ]


def test_a_restore_that_keeps_the_table_on_its_chain_publishes_the_rest() -> None:
    plan = plan_sync(TablePosition(1, 0), _manifest(4, generation=1))
    assert [(s.operation, s.checkpoint_id) for s in plan.steps] == [
        (Operation.PUBLISH, 2),
        (Operation.PUBLISH, 4),
    ]


def test_a_manifest_read_older_than_the_table_is_stale() -> None:
    newer_generation = plan_sync(TablePosition(4, 1), _manifest(3, generation=0))
    assert newer_generation.stale and newer_generation.steps == ()
    ahead = plan_sync(TablePosition(3, 0), _manifest(2, generation=0))
    assert ahead.stale and ahead.steps == ()


def test_rewound_to_nothing_published_empties_the_table() -> None:
    plan = plan_sync(TablePosition(3, 0), _manifest(None, generation=1))
    assert [(s.operation, s.checkpoint_id, s.files) for s in plan.steps] == [
        (Operation.REWIND, None, ())
    ]
