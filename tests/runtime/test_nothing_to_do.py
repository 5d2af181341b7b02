"""Nothing to do costs nothing (issue 28): an epoch with no new input runs no Spark job
for an operator whose function then leaves its state as it was and outputs nothing
(payments' dedup). It acknowledges its base's state files by reference and empty
channel files written by the driver; that checkpoint restores to the same state, and
the next epoch (new input on top of it) counts every event exactly once. A sink with
nothing new (an append sink with a function, fed by dedup) stages the driver's empty
files too: its publication adds no rows, and it stays exactly-once across the idle
epoch, a restore to it and the next epoch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from batchpoint.ops.local_epoch import LocalEpochRunner
from batchpoint.protocol.checkpoint import SHARED_FROM_META, CheckpointStatus
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.sinks import read_sink_table
from batchpoint.runtime.incremental import base_state_files
from batchpoint.runtime.restore import restore_checkpoint
from batchpoint.spark import keyed_io
from batchpoint.storage import StoreRef
from demo.payments import SOURCE_ROOT, build_pipeline
from demo.payments_data import write_epoch_files
from demo.payments_reference import compute_reference
from support import fresh_sink
from support.clock import FakeClock
from support.payments import assert_sinks_match_reference

pytestmark = [pytest.mark.spark]


def seen_events(runner: LocalEpochRunner, ref: StoreRef, spark: Any, checkpoint: int) -> list:
    """dedup's state `seen` as a restore from `checkpoint` reads it."""
    completed = runner.driver.coordinator.get_outcome(checkpoint).completed
    files = base_state_files(completed, "dedup", "seen")
    return sorted(r.event_id for r in keyed_io.read_keyed(spark, ref, files).collect())


def checked_epoch(
    runner: LocalEpochRunner, store: Any, clock: FakeClock, new_input: int | None
) -> Any:
    """One epoch (with input epoch `new_input`, or none new), completed, its sinks equal to
    the pandas reference; the result and that reference."""
    if new_input is not None:
        write_epoch_files(store, SOURCE_ROOT, new_input, accounts=20, events_per_epoch=60)
    clock.advance(60)
    result = runner.run_epoch()
    assert result.outcome is not None and result.outcome.status is CheckpointStatus.COMPLETED
    expected = assert_sinks_match_reference(store, runner.driver.coordinator, result.checkpoint_id)
    return result, expected


def test_an_epoch_without_input_runs_no_spark_job_for_dedup_and_restores_alike(
    spark: Any, tmp_path: Path
) -> None:
    ref = StoreRef.of(tmp_path.as_uri())
    store = ref.open()
    clock = FakeClock()
    # Idle epochs run (they are skipped by default): this one is the case under test.
    config = CheckpointConfig(skip_idle=False)
    runner = LocalEpochRunner(build_pipeline(), ref, spark, config, clock=clock)

    def epoch(new_input: int | None) -> Any:
        return checked_epoch(runner, store, clock, new_input)[0]

    epoch(0)
    epoch(1)
    idle = epoch(None)
    acks = [a for a in idle.outcome.completed.acks if a.task.operator == "dedup"]
    assert {(a.metrics.spark_jobs, a.metrics.records_out) for a in acks} == {(0, 0)}
    states = [h for a in acks for h in a.handles if h.name == "state-seen"]
    assert states and all(h.meta.get(SHARED_FROM_META) for h in states)
    before = seen_events(runner, ref, spark, idle.checkpoint_id - 1)
    assert seen_events(runner, ref, spark, idle.checkpoint_id) == before
    assert len(before) > 0
    after = epoch(2)  # built on the idle checkpoint's state: exactly once still
    assert len(seen_events(runner, ref, spark, after.checkpoint_id)) > len(before)


def test_a_sink_with_nothing_new_runs_no_spark_job_and_publishes_no_rows(
    spark: Any, tmp_path: Path
) -> None:
    ref = StoreRef.of(tmp_path.as_uri())
    store = ref.open()
    clock = FakeClock()
    runner = LocalEpochRunner(
        fresh_sink.pipeline(), ref, spark, CheckpointConfig(skip_idle=False), clock=clock
    )
    coordinator = runner.driver.coordinator

    def epoch(new_input: int | None) -> Any:
        result, expected = checked_epoch(runner, store, clock, new_input)
        # every event dedup ever passed on, published once: nothing lost, nothing twice
        published = read_sink_table(store, "payments", "fresh").column("event_id").to_pylist()
        assert sorted(published) == sorted(expected.seen_events["event_id"])
        return result

    epoch(0)
    epoch(1)
    idle = epoch(None)
    acks = [a for a in idle.outcome.completed.acks if a.task.operator == "fresh"]
    assert {(a.metrics.spark_jobs, a.metrics.records_out) for a in acks} == {(0, 0)}
    staged = [h for a in acks for h in a.handles]
    assert staged and all(h.rows == 0 for h in staged)
    epoch(2)
    restore_checkpoint(runner.driver, idle.checkpoint_id)
    upto = coordinator.get_outcome(idle.checkpoint_id).pending.barrier["events"]
    seen = compute_reference(store, SOURCE_ROOT, upto=upto).seen_events["event_id"]
    restored = read_sink_table(store, "payments", "fresh").column("event_id").to_pylist()
    assert sorted(restored) == sorted(seen)
    epoch(3)  # on top of the idle checkpoint: epochs 2 and 3, once each
