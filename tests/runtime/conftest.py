"""Fixtures for end-to-end runtime tests: the payments pipeline on a real local Spark,
its input generated epoch by epoch, and the pandas reference to compare with."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from batchpoint.demo.payments import SOURCE_ROOT, build_pipeline
from batchpoint.demo.payments_data import write_epoch_files
from batchpoint.demo.payments_reference import compute_reference
from batchpoint.ops.epoch import EpochResult, LocalEpochRunner
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.sinks import read_sink_table
from batchpoint.storage import StoreRef
from batchpoint.storage.base import ObjectStore

DATA = {"accounts": 40, "events_per_epoch": 300}


class FakeClock:
    """Time that moves only when a test says so, so deadlines are deterministic."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class PaymentsRun:
    store_ref: StoreRef
    runner: LocalEpochRunner
    clock: FakeClock

    @property
    def store(self) -> ObjectStore:
        return self.store_ref.open()

    def add_input(self, epoch: int) -> None:
        write_epoch_files(self.store, SOURCE_ROOT, epoch, **DATA)

    def epoch(self, epoch: int) -> EpochResult:
        """Generate epoch `epoch`'s files, then run one checkpoint over them."""
        self.add_input(epoch)
        self.clock.advance(1)
        return self.runner.run_epoch()

    def assert_matches_reference(self) -> None:
        """State and published sinks equal the pandas reference over exactly the input
        the newest completed checkpoint has read: nothing lost, nothing twice."""
        coordinator = self.runner.driver.coordinator
        head = coordinator.head.get().checkpoint_id
        assert head is not None
        completed = coordinator.completed.get(head)
        expected = compute_reference(
            self.store, SOURCE_ROOT, upto=completed.pending.barrier["events"]
        )
        balances = _sorted(read_sink_table(self.store, "payments", "balances_table"))
        alerts = _sorted(read_sink_table(self.store, "payments", "alerts"))
        pd.testing.assert_frame_equal(
            balances[list(expected.balances.columns)], expected.balances, check_dtype=False
        )
        pd.testing.assert_frame_equal(
            alerts[list(expected.alerts.columns)], expected.alerts, check_dtype=False
        )
        seen = self.state_rows(head, "dedup", "state-seen")
        assert sorted(seen["event_id"]) == sorted(expected.seen_events["event_id"])
        state = self.state_rows(head, "balances", "state-balances")
        pd.testing.assert_frame_equal(
            _sorted_frame(state)[list(expected.balances.columns)],
            expected.balances,
            check_dtype=False,
        )

    def state_rows(self, checkpoint_id: int, operator: str, stream: str) -> pd.DataFrame:
        from batchpoint.spark import keyed_io

        completed = self.runner.driver.coordinator.completed.get(checkpoint_id)
        files = [
            h
            for ack in completed.acks
            if ack.task.startswith(f"{operator}#")
            for h in ack.handles
            if h.name == stream
        ]
        df = keyed_io.read_keyed(self.runner.spark, self.store_ref, files)
        return df.toPandas()


def _sorted(table: Any) -> pd.DataFrame:
    return _sorted_frame(table.to_pandas())


def _sorted_frame(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values("account_id", ignore_index=True)


@pytest.fixture
def make_run(spark: Any, tmp_path: Path) -> Callable[..., PaymentsRun]:
    def make(*, parallelism: int = 2, copy_from: Path | None = None, **config: Any) -> PaymentsRun:
        root = tmp_path / f"store-{len(list(tmp_path.iterdir()))}"
        if copy_from is not None:
            shutil.copytree(copy_from, root)
        ref = StoreRef.of(root.as_uri())
        clock = FakeClock()
        pipeline = build_pipeline(parallelism=parallelism)
        runner = LocalEpochRunner(pipeline, ref, spark, CheckpointConfig(**config), clock=clock)
        return PaymentsRun(ref, runner, clock)

    return make


@pytest.fixture(scope="module")
def after_first_epoch(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with one completed checkpoint of payments: each failure test copies it
    instead of paying for epoch 1 again."""
    root = tmp_path_factory.mktemp("first-epoch") / "store"
    ref = StoreRef.of(root.as_uri())
    clock = FakeClock()
    runner = LocalEpochRunner(build_pipeline(), ref, spark, CheckpointConfig(), clock=clock)
    write_epoch_files(ref.open(), SOURCE_ROOT, 0, **DATA)
    result = runner.run_epoch()
    assert result.outcome is not None and result.outcome.completed is not None
    return root
