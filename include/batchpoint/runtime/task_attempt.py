"""One attempt of one operator (all its subtasks) in one checkpoint, as every phase of
the runner sees it: `TaskAttempt` (what runs: the checkpoint, the node, its tasks, the
attempt id, the report it fills in) over `TaskEnvironment` (where it runs: the pipeline,
the coordinator, the Spark session and the store)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from batchpoint.errors import BatchpointError, CheckpointError
from batchpoint.protocol.checkpoint import PendingCheckpoint, TaskAcknowledgeResult
from batchpoint.protocol.layout import PipelineLayout, TaskId
from batchpoint.protocol.pipeline_ports import CheckpointDecisions
from batchpoint.runtime.api import OperatorDef, Pipeline, SinkDef
from batchpoint.runtime.task_hooks import AttemptHooks, AttemptPoint
from batchpoint.storage import ObjectStore, StoreRef
from batchpoint.storage.request_count import RequestLedger

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Log = Callable[[str], None]


class OperatorFailed(BatchpointError):
    """The operator could not process the epoch; its subtasks declined."""


class CheckpointAlreadySettled(CheckpointError):
    pass


class AttemptInterrupted(BatchpointError):
    """The attempt was interrupted from outside (Airflow's kill, a timeout): it declines
    nothing, so that a retry may still complete the checkpoint."""


@dataclass
class OperatorRunReport:
    checkpoint_id: int
    operator: str
    attempt: str
    results: dict[str, TaskAcknowledgeResult] = field(default_factory=dict)
    skipped: str = ""  # why nothing ran, when nothing did
    seconds: float = 0.0
    sync_ms: float = 0.0
    async_ms: float = 0.0
    records_in: dict[int, int] = field(default_factory=dict)  # subtask -> channel rows
    spark_jobs: int | None = None  # what the attempt ran under its job tag (job_count)
    spark_stages: int | None = None
    # each subtask's storage requests, as its writes' Spark tasks reported them
    requests: RequestLedger = field(default_factory=RequestLedger)

    def timed_sync(self, aligned: float) -> float:
        """The sync part ends (the writes start) now; returns now."""
        now = time.monotonic()
        self.sync_ms = (now - aligned) * 1000.0
        return now

    def timed_async(self, writing: float) -> None:
        self.async_ms = (time.monotonic() - writing) * 1000.0


@dataclass(frozen=True)
class TaskEnvironment:
    """What every attempt of one runner shares (Flink's task Environment). `spark` is
    None only where no phase needs it (the phases' own tests); `store_ref` is what Spark
    tasks open (over Connect, pinned for the server's workers); `interrupted` is set by
    OperatorRunner.interrupt from another thread or a signal handler; `hooks` is None on
    the production path (see task_hooks)."""

    pipeline: Pipeline
    coordinator: CheckpointDecisions
    store: ObjectStore  # the storage root the coordinator's pipeline lives in
    spark: SparkSession | None
    store_ref: StoreRef
    log: Log = print
    remote: bool = False
    hooks: AttemptHooks | None = None
    align_timeout: float = 600.0
    poll_interval: float = 0.5
    interrupted: threading.Event = field(default_factory=threading.Event)

    @property
    def layout(self) -> PipelineLayout:
        return PipelineLayout(self.pipeline.name)

    @property
    def session(self) -> SparkSession:
        if self.spark is None:
            raise CheckpointError("this phase needs a Spark session and the runner has none")
        return self.spark


@dataclass(frozen=True)
class TaskAttempt:
    """Attempt `attempt` of operator `node` (its subtasks `tasks`) in `checkpoint`. The
    report is the one mutable part: each phase records what it measured there."""

    env: TaskEnvironment
    checkpoint: PendingCheckpoint
    node: OperatorDef | SinkDef
    tasks: tuple[TaskId, ...]
    attempt: str
    report: OperatorRunReport

    @property
    def checkpoint_id(self) -> int:
        return self.checkpoint.checkpoint_id

    @property
    def operator(self) -> str:
        return self.node.name

    @property
    def parallelism(self) -> int:
        return len(self.tasks)

    @property
    def job_tag(self) -> str | None:
        """The Spark job tag of this attempt (what interrupt_attempt stops), or None on a
        session without job tags."""
        if self.env.spark is None or not hasattr(self.env.spark, "addTag"):
            return None
        from batchpoint.spark.remote import attempt_tag

        return attempt_tag(self.env.pipeline.name, self.checkpoint_id, self.operator, self.attempt)

    def log(self, line: str) -> None:
        self.env.log(line)

    def at(self, point: AttemptPoint) -> None:
        """Tell the hooks (if any: never in production) the attempt reached `point`."""
        if self.env.hooks is not None:
            self.env.hooks.at(point, self.operator, self.checkpoint_id)
