"""What a steady-state epoch costs Spark, per operator: the jobs (and stages) each ack
records, counted by the attempt's job tag on a real local session. A regression guard
on the plan's shape, not a timing: a change that adds a job (a count, a schema
collected, a second pass over the output) fails here. Issue 28; the jobs that remain and
why are in docs/benchmarks.md ("Spark jobs per epoch").

Steady state is the third epoch: the first has no base, the second is the first
changelog on it (it may still write in full for churn), the third is a changelog on a
changelog, as every later one is until the chain compacts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from batchpoint.ops.local_epoch import LocalEpochRunner
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.storage import StoreRef
from demo.payments import SOURCE_ROOT, build_pipeline
from demo.payments_data import write_epoch_files
from support.clock import FakeClock
from support.payments import assert_sinks_match_reference

pytestmark = [pytest.mark.spark]

BENCH = Path(__file__).resolve().parents[2] / "bench"

#: operator -> (Spark jobs, stages that ran) of its steady-state epoch.
#: The bench's totals: its events merged into its state in one aggregation (one shuffle:
#: its map and reduce stages), its state written in full under the deployed changelog
#: floor. (This test once wrote the bench's files beside its source's partition folder,
#: so its epochs read nothing and ran one stage: a source now refuses such a root.)
BENCH_OPERATOR = {"totals": (2, 2)}
#: dedup and balances write a state and a channel in one pass (spark/stream_writer):
#: 13 and 8 jobs when each stream was an action of its own.
PAYMENTS = {
    "dedup": (8, 8),
    "balances": (6, 6),
    "balances_table": (0, 0),  # stages balances' channel by reference: no Spark job
    "alerts": (2, 2),
}


def spark_work(result: Any) -> dict[str, tuple[int | None, int | None]]:
    """Each operator's count as its acks recorded it (every subtask's ack says the
    same: one attempt ran them all)."""
    assert result.outcome is not None and result.outcome.status is CheckpointStatus.COMPLETED
    counts: dict[str, set[tuple[int | None, int | None]]] = {}
    for ack in result.outcome.completed.acks:
        metrics = ack.metrics
        counts.setdefault(ack.task.operator, set()).add((metrics.spark_jobs, metrics.spark_stages))
    assert all(len(c) == 1 for c in counts.values()), counts
    return {name: c.pop() for name, c in counts.items()}


def test_the_bench_operators_steady_epoch_runs_its_counted_jobs(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    from peer_data import Size, write_epoch
    from peer_engines import SOURCE_ROOT as EVENTS_ROOT
    from peer_engines import build_pipeline as bench_pipeline
    from peer_engines import checkpoint_config

    size = Size(keys=300, events=2_000, files=2)
    source = tmp_path / EVENTS_ROOT / "p0"  # a partition, as bench_peer writes it
    source.mkdir(parents=True)
    ref = StoreRef.of(tmp_path.as_uri())
    runner = LocalEpochRunner(bench_pipeline(), ref, spark, checkpoint_config())
    counts = []
    for epoch in range(3):
        write_epoch(source, size, epoch)
        counts.append(spark_work(runner.run_epoch()))
    print(f"bench operator, epochs 1-3: {counts}")
    assert counts[-1] == BENCH_OPERATOR


def test_each_payments_operators_steady_epoch_runs_its_counted_jobs(
    spark: Any, tmp_path: Path
) -> None:
    store = StoreRef.of(tmp_path.as_uri()).open()
    clock = FakeClock()
    runner = LocalEpochRunner(build_pipeline(), StoreRef.of(tmp_path.as_uri()), spark, clock=clock)
    counts = []
    for epoch in range(3):
        write_epoch_files(store, SOURCE_ROOT, epoch, accounts=20, events_per_epoch=60)
        clock.advance(60)
        result = runner.run_epoch()
        counts.append(spark_work(result))
        assert_sinks_match_reference(store, runner.driver.coordinator, result.checkpoint_id)
    print(f"payments operators, epochs 1-3: {counts}")
    assert counts[-1] == PAYMENTS
