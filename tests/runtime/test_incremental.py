"""Incremental checkpoints through the runtime: each epoch of the payments pipeline
writes only the changelog of its states on top of its base's files, restores read the
whole chain, and every case that must not share (savepoints, a restore without claim,
a rescale, the chain bound) writes in full. The exactly-once and restore tests in this
folder run with incremental checkpoints on as well: it is the default."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from batchpoint.ops.maintenance import gc
from batchpoint.ops.overview import checkpoint_page
from batchpoint.protocol.checkpoint import (
    INDEPENDENT_OF_BASE,
    SHARED_FROM_META,
    CheckpointType,
    CompletedCheckpoint,
    FileHandle,
)
from batchpoint.protocol.savepoints import (
    SavepointLocation,
    check_savepoint,
)
from batchpoint.protocol.verify import check_handles
from batchpoint.runtime.incremental import CHURN_META, CHURN_PROBE_EVERY, CHURN_STREAK_META
from batchpoint.runtime.restore import restore_checkpoint
from support.payments import PaymentsRun

pytestmark = [pytest.mark.spark, pytest.mark.slow]

STATES = ("state-seen", "state-balances")


def _state_files(completed: CompletedCheckpoint) -> list[FileHandle]:
    return [h for h in completed.handles if h.name in STATES]


def _layers(completed: CompletedCheckpoint, state: str | None = None) -> set[int]:
    files = [h for h in _state_files(completed) if state is None or h.name == f"state-{state}"]
    return {int(h.meta.get("layer", 0)) for h in files}


def _shared(completed: CompletedCheckpoint) -> set[str]:
    return {h.path for h in _state_files(completed) if SHARED_FROM_META in h.meta}


def _completed(run: PaymentsRun, cid: int) -> CompletedCheckpoint:
    return run.runner.driver.coordinator.completed.get(cid)


def _epoch(run: PaymentsRun, n: int, **kw) -> CompletedCheckpoint:
    result = run.epoch(n) if not kw else _typed_epoch(run, n, **kw)
    assert result.outcome is not None and result.outcome.completed is not None, result.message
    return result.outcome.completed


def _typed_epoch(run: PaymentsRun, n: int, checkpoint_type: CheckpointType):
    run.add_input(n)
    run.clock.advance(1)
    return run.runner.run_epoch(checkpoint_type)


def test_epochs_share_their_base_and_a_restore_reads_back_through_the_chain(
    make_run: Callable[..., PaymentsRun], after_first_epoch: Path
) -> None:
    run = make_run(copy_from=after_first_epoch, num_retained=2)
    first = _completed(run, 1)
    assert _layers(first) == {0} and not _shared(first)
    chain = [_epoch(run, n) for n in (1, 2, 3)]  # checkpoints 2, 3, 4
    for depth, completed in enumerate(chain, start=1):
        # `seen` grows by an epoch's events: a changelog on its base each time, sharing
        # every file of the base's, wherever it was written.
        assert _layers(completed, "seen") == set(range(depth + 1))
        base = _completed(run, completed.checkpoint_id - 1)
        base_seen = {h.path for h in _state_files(base) if h.name == "state-seen"}
        assert base_seen <= _shared(completed)
        assert completed.state_size < completed.full_state_size
    # Every account's balance changes each epoch: after one changelog that changed all
    # of them, `balances` is written in full (no join with the base), counting the run.
    assert [_layers(c, "balances") for c in chain] == [{0, 1}, {0}, {0}]
    assert [
        {
            (h.meta.get(CHURN_META), h.meta.get(CHURN_STREAK_META))
            for h in _state_files(c)
            if h.name == "state-balances"
        }
        for c in chain[1:]
    ] == [{(1, CHURN_PROBE_EVERY)}, {(2, CHURN_PROBE_EVERY)}]
    run.assert_matches_reference()

    # The drill-down tells written files from shared ones, and both sizes apart.
    last = chain[-1]
    page = checkpoint_page(run.runner.driver.coordinator, last.checkpoint_id).to_json()
    assert (page["state_size"], page["full_state_size"]) == (
        last.state_size,
        last.full_state_size,
    )
    origins = {f["path"]: f["origin"] for f in page["files"]}
    for h in _state_files(last):
        if SHARED_FROM_META in h.meta:
            assert origins[h.path] == f"shared from checkpoint {h.meta[SHARED_FROM_META]}"
        else:
            layer = int(h.meta.get("layer", 0))
            assert origins[h.path] == (f"written (changelog layer {layer})" if layer else "written")
    assert "written (changelog layer 3)" in origins.values()

    # Retention keeps 3 and 4; GC takes 1's and 2's own files but not what 3 still shares.
    c = run.runner.driver.coordinator
    gc(c, c.store)
    assert c.control.load().retained_ids() == [3, 4]
    three = _completed(run, 3)
    assert any(h.path.startswith(c.layout.data_prefix(1)) for h in _state_files(three))
    assert not check_handles(run.store, list(three.durable_handles), checksums=True)

    # Restore 3: its state reaches back through 2's and 1's files, and the epochs after
    # it are counted exactly once.
    restore_checkpoint(run.runner.driver, 3)
    five = _epoch(run, 4)
    assert _layers(five, "seen") == {0, 1, 2, 3}
    run.assert_matches_reference()

    # Exported, the chain is a self-contained savepoint: imported (every layer copied into
    # the import's own folder, nothing shared) and restored, it goes on exactly once, and
    # the next checkpoint does not build on it.
    target = SavepointLocation(run.store, "savepoints/chain")
    report = c.savepoints.export(five.checkpoint_id, target)
    assert report.files == len(five.durable_handles) and check_savepoint(target) == []
    imported = c.savepoints.import_folder(target)
    assert not _shared(imported) and _layers(imported, "seen") == {0, 1, 2, 3}
    own = c.layout.data_prefix(imported.checkpoint_id)
    assert all(h.path.startswith(own) for h in imported.durable_handles)
    restore_checkpoint(run.runner.driver, imported.checkpoint_id)
    after = _epoch(run, 5)
    assert _layers(after) == {0} and INDEPENDENT_OF_BASE in after.pending.properties
    run.assert_matches_reference()


def test_full_snapshots_start_a_chain_where_sharing_must_not_happen(
    make_run: Callable[..., PaymentsRun], after_first_epoch: Path
) -> None:
    run = make_run(copy_from=after_first_epoch, changelog_chain=2)
    assert _layers(_epoch(run, 1), "seen") == {0, 1}
    assert _layers(_epoch(run, 2), "seen") == {0, 1, 2}
    compacted = _epoch(run, 3)  # the chain bound: a full snapshot, sharing nothing
    assert _layers(compacted) == {0} and not _shared(compacted)
    # A savepoint is self-contained, and the checkpoint after it may not build on it.
    savepoint = _epoch(run, 4, checkpoint_type=CheckpointType.SAVEPOINT)
    assert _layers(savepoint) == {0} and not _shared(savepoint)
    after = _epoch(run, 5)
    assert INDEPENDENT_OF_BASE in after.pending.properties
    assert _layers(after) == {0} and not _shared(after)
    assert _layers(_epoch(run, 6)) == {0, 1}
    # A rescale restore writes in full at the new parallelism.
    head = run.runner.driver.coordinator.head.get().checkpoint_id
    restore_checkpoint(run.runner.driver, head, {"balances": 3})
    rescaled = _epoch(run, 7)
    assert {
        int(h.meta.get("layer", 0)) for h in _state_files(rescaled) if "balances" in h.name
    } == {0}
    run.assert_matches_reference()


def test_a_state_under_the_changelog_floor_is_written_in_full(
    make_run: Callable[..., PaymentsRun], after_first_epoch: Path
) -> None:
    """With the floor between the two states' sizes, the smaller state is rewritten in
    full and the larger one still writes a changelog, in the same checkpoint."""
    base = _completed(make_run(copy_from=after_first_epoch), 1)
    sizes = {
        state: sum(h.size for h in _state_files(base) if h.name == f"state-{state}")
        for state in ("seen", "balances")
    }
    small, large = sorted(sizes, key=sizes.__getitem__)
    assert sizes[small] < sizes[large], sizes
    run = make_run(copy_from=after_first_epoch, changelog_min_bytes=sizes[large])
    completed = _epoch(run, 1)
    assert completed.pending.properties.changelog_min_bytes == sizes[large]
    assert _layers(completed, small) == {0} and _layers(completed, large) == {0, 1}
    assert not {h.path for h in _state_files(completed) if h.name == f"state-{small}"} & (
        _shared(completed)
    )
    run.assert_matches_reference()


def test_incremental_checkpoints_can_be_turned_off(
    make_run: Callable[..., PaymentsRun], after_first_epoch: Path
) -> None:
    run = make_run(copy_from=after_first_epoch, changelog_chain=0)
    completed = _epoch(run, 1)
    assert _layers(completed) == {0} and not _shared(completed)
    assert completed.state_size == completed.full_state_size
    run.assert_matches_reference()
