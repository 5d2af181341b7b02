"""The payments demo pipeline as the Spark tests drive it: a `PaymentsRun` (store, epoch
runner and fake clock) that writes each epoch's input, runs a checkpoint over it and
compares state and sinks with the pandas reference; the constants the quality tests
share about its good epochs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from batchpoint.ops.local_epoch import EpochResult, LocalEpochRunner
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sinks import read_sink_table
from batchpoint.quality.suites import PipelineQuality, StateQuality
from batchpoint.runtime.faults import InjectedFaults
from batchpoint.storage import StoreRef
from batchpoint.storage.base import ObjectStore
from demo.payments import SOURCE_ROOT, build_pipeline
from demo.payments_data import write_epoch_files
from demo.payments_quality import SUITES_DIR
from demo.payments_reference import PaymentsReference, compute_reference
from support.clock import FakeClock

#: The size of each generated input epoch.
DATA = {"accounts": 40, "events_per_epoch": 300}


@dataclass
class PaymentsRun:
    store_ref: StoreRef
    runner: LocalEpochRunner
    clock: FakeClock

    @classmethod
    def on(
        cls,
        spark: Any,
        root: Path | StoreRef,
        *,
        parallelism: int = 2,
        balances_table: str | None = None,
        table_format: str = "iceberg",
        **config: Any,
    ) -> PaymentsRun:
        """The payments pipeline on the store in folder `root`, with a fresh clock (and
        its balances as an Iceberg table, its catalog under the root, if named)."""
        ref = root if isinstance(root, StoreRef) else StoreRef.of(root.as_uri())
        clock = FakeClock()
        pipeline = build_pipeline(
            parallelism=parallelism, balances_table=balances_table, table_format=table_format
        )
        # Faults named by BATCHPOINT_FAULT fire in its attempts (the production runner
        # has no hooks).
        runner = LocalEpochRunner(
            pipeline, ref, spark, CheckpointConfig(**config), clock=clock, hooks=InjectedFaults()
        )
        return cls(ref, runner, clock)

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
        expected = assert_sinks_match_reference(self.store, coordinator, head)
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
            if ack.task.operator == operator
            for h in ack.handles
            if h.name == stream
        ]
        df = keyed_io.read_keyed(self.runner.spark, self.store_ref, files)
        return df.toPandas()


def assert_sinks_match_reference(
    store: ObjectStore, coordinator: CheckpointCoordinator, checkpoint_id: int
) -> PaymentsReference:
    """Published sinks == the pandas reference over the input up to the checkpoint's
    barrier: every event counted once, none lost, none twice. Returns the reference."""
    outcome = coordinator.get_outcome(checkpoint_id)
    assert outcome is not None, f"checkpoint {checkpoint_id} has no outcome"
    expected = compute_reference(store, SOURCE_ROOT, upto=outcome.pending.barrier["events"])
    for sink, frame in (("balances_table", expected.balances), ("alerts", expected.alerts)):
        got = _sorted_frame(read_sink_table(store, "payments", sink).to_pandas())
        pd.testing.assert_frame_equal(got[list(frame.columns)], frame, check_dtype=False)
    return expected


def _sorted_frame(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values("account_id", ignore_index=True)


#: The `good_epochs` fixture's store: checkpoints 1 and 2, over input epochs 0 and 1.
GOOD_EPOCHS = 2
LAYOUT = PipelineLayout("payments")

#: Integrity only: no state is read, so no Spark job runs.
INTEGRITY_ONLY = PipelineQuality(count_rows=False)
#: The demo's two GX suites and nothing else (its sample recompute costs a minute).
SUITES_ONLY = PipelineQuality(
    states=(
        StateQuality("balances", "balances", suite="payments_balances"),
        StateQuality("dedup", "seen", suite="payments_seen"),
    ),
    suites_dir=SUITES_DIR,
    count_rows=False,
)
