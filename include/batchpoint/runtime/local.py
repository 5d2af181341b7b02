"""Run whole epochs in one process: trigger, every operator in topological order,
finalize, publish. What the tests, the bench scripts and the scheduler-free demo use;
the Airflow DAG runs the same steps as separate tasks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from batchpoint.protocol.checkpoint import CheckpointOutcome, CheckpointType, PendingCheckpoint
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import Clock
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.runner import OperatorRunner, OperatorRunReport
from batchpoint.storage import StoreRef

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

import time


@dataclass
class EpochResult:
    pending: PendingCheckpoint
    outcome: CheckpointOutcome | None
    reports: list[OperatorRunReport] = field(default_factory=list)
    published: list[str] = field(default_factory=list)

    @property
    def checkpoint_id(self) -> int:
        return self.pending.checkpoint_id


class LocalEpochRunner:
    def __init__(
        self,
        pipeline: Pipeline,
        store_ref: StoreRef,
        spark: SparkSession,
        config: CheckpointConfig | None = None,
        clock: Clock = time.time,
        log: Callable[[str], None] = lambda _line: None,
    ) -> None:
        self.pipeline = pipeline
        self.store_ref = store_ref
        self.spark = spark
        self.config = config or CheckpointConfig()
        self.driver = PipelineDriver(pipeline, store_ref, self.config, clock)
        self.log = log

    def operator_runner(self, attempt: str | None = None) -> OperatorRunner:
        return OperatorRunner(
            self.pipeline,
            self.store_ref,
            self.spark,
            config=self.config,
            attempt=attempt,
            align_timeout=5.0,
            log=self.log,
        )

    def task_order(self) -> list[str]:
        spec = self.driver.current_spec()
        return [op.name for op in spec.topological_order() if op.has_tasks]

    def run_operators(
        self, checkpoint_id: int, attempt: str | None = None
    ) -> list[OperatorRunReport]:
        runner = self.operator_runner(attempt)
        return [runner.run(checkpoint_id, name) for name in self.task_order()]

    def complete(self, checkpoint_id: int) -> tuple[CheckpointOutcome | None, list[str]]:
        outcome = self.driver.coordinator.try_finalize(checkpoint_id)
        if outcome is None or outcome.completed is None:
            return outcome, []
        return outcome, self.driver.notify_complete(checkpoint_id)

    def run_epoch(self, checkpoint_type: CheckpointType = CheckpointType.CHECKPOINT) -> EpochResult:
        pending = self.driver.trigger(checkpoint_type)
        result = EpochResult(pending, None)
        result.reports = self.run_operators(pending.checkpoint_id)
        result.outcome, result.published = self.complete(pending.checkpoint_id)
        return result
