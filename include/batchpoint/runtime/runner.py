"""Runs one operator (all its subtasks) of one checkpoint as a PySpark micro-job, in
phases over one `TaskAttempt` (task_attempt.py), each a module of its own:

    align     wait until every upstream task of this epoch acknowledged, and the base
              checkpoint completed (its state is what this epoch starts from)  task_align
    restore   this epoch's inputs, and the base checkpoint's state of this operator,
              rescaled by key group                                           task_restore
    process   call the operator function on this epoch's input               task_process
    snapshot  write new state, and output for each consumer, per subtask,
              from executors (a sink may stage its input by reference)       task_snapshot
    ack       one ack per subtask; a later attempt learns DUPLICATE and
              cleans up                                                       task_ack

Any error before the acks declines the subtasks that have not acknowledged, so the
checkpoint aborts at once and nothing of it is ever published. The runner takes hooks
(task_hooks) only where tests ask for them; it never injects a fault of its own.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

from batchpoint.errors import CheckpointError
from batchpoint.protocol.checkpoint import (
    CheckpointStatus,
    PendingCheckpoint,
    TaskAcknowledgeResult,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.runtime.api import Pipeline, SourceDef
from batchpoint.runtime.task_ack import acknowledge, fail
from batchpoint.runtime.task_align import align
from batchpoint.runtime.task_attempt import (
    AttemptInterrupted,
    CheckpointAlreadySettled,
    Log,
    OperatorFailed,
    OperatorRunReport,
    TaskAttempt,
    TaskEnvironment,
)
from batchpoint.runtime.task_hooks import AttemptHooks, AttemptPoint
from batchpoint.runtime.task_process import process
from batchpoint.runtime.task_restore import restore, upstream_channels
from batchpoint.runtime.task_snapshot import adopted_sink, snapshot
from batchpoint.runtime.task_writes import PROGRESS_EVERY, Handles
from batchpoint.runtime.upstream_reads import reads_check
from batchpoint.storage import StoreRef

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "PROGRESS_EVERY",
    "AttemptInterrupted",
    "CheckpointAlreadySettled",
    "OperatorFailed",
    "OperatorRunReport",
    "OperatorRunner",
]


class OperatorRunner:
    def __init__(
        self,
        pipeline: Pipeline,
        store_ref: StoreRef,
        spark: SparkSession,
        *,
        config: CheckpointConfig | None = None,
        attempt: str | None = None,
        align_timeout: float = 600.0,
        poll_interval: float = 0.5,
        log: Log = print,
        hooks: AttemptHooks | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.store = store_ref.open()
        self.spark = spark
        # Over Connect (no JVM here) pyspark's Connect classes live in their own package.
        self.remote = type(spark).__module__.startswith("pyspark.sql.connect")
        if self.remote:
            from batchpoint.spark.remote import prepare_remote

            # Over Connect the tasks run in the server's environment: ship explicit
            # settings and credentials, and check its workers' version once.
            store_ref = prepare_remote(spark, store_ref)
        self.store_ref = store_ref
        self.coordinator = CheckpointCoordinator(
            self.store, pipeline.name, config, check_reads=reads_check(pipeline, self.store)
        )
        self.attempt = attempt or f"a{uuid.uuid4().hex[:12]}"
        self.log = log
        self.env = TaskEnvironment(
            pipeline,
            self.coordinator,
            self.store,
            spark,
            store_ref,
            log=log,
            remote=self.remote,
            hooks=hooks,
            align_timeout=align_timeout,
            poll_interval=poll_interval,
        )

    @property
    def hooks(self) -> AttemptHooks | None:
        return self.env.hooks

    # -- entry point ----------------------------------------------------------------------

    def tag(self, checkpoint_id: int, name: str) -> str:
        """The Spark job tag of this attempt of operator `name` in `checkpoint_id`: what
        interrupt_attempt (an Airflow on_kill, a SIGTERM) interrupts."""
        from batchpoint.spark.remote import attempt_tag

        return attempt_tag(self.pipeline.name, checkpoint_id, name, self.attempt)

    def interrupt(self, checkpoint_id: int, name: str) -> list[str]:
        """Stop this attempt's Spark work on the server, from another thread or a signal
        handler: the attempt then ends with AttemptInterrupted and declines nothing."""
        self.env.interrupted.set()
        stop = getattr(self.spark, "interruptTag", None)
        return list(stop(self.tag(checkpoint_id, name))) if stop is not None else []

    def run(self, checkpoint_id: int, name: str) -> OperatorRunReport:
        from batchpoint.spark.job_count import tagged

        # Every Spark job of the attempt carries the tag (what interrupt() stops and the
        # ack's job count counts). Acks are written here, after the jobs returned, so a
        # server-side job whose client died can never ack.
        with tagged(self.spark, self.tag(checkpoint_id, name)):
            return self._run(checkpoint_id, name)

    def _run(self, checkpoint_id: int, name: str) -> OperatorRunReport:
        started = time.monotonic()
        report = OperatorRunReport(checkpoint_id, name, self.attempt)
        attempt = self.open_attempt(checkpoint_id, name, report)
        if attempt is None:
            return report
        try:
            handles = run_phases(attempt)
        except Exception as exc:
            if self.env.interrupted.is_set():
                raise AttemptInterrupted(
                    f"{name} was interrupted in checkpoint {checkpoint_id} (attempt {self.attempt})"
                ) from exc
            fail(attempt, exc)
        attempt.at(AttemptPoint.AFTER_SNAPSHOT)
        count_spark_work(attempt)
        if self.env.interrupted.is_set():  # the kill came between the last job and the ack
            raise AttemptInterrupted(f"{name} was interrupted in checkpoint {checkpoint_id}")
        report.results = acknowledge(attempt, handles)
        attempt.at(AttemptPoint.AFTER_ACK)
        report.seconds = time.monotonic() - started
        return report

    def open_attempt(
        self, checkpoint_id: int, name: str, report: OperatorRunReport
    ) -> TaskAttempt | None:
        """This runner's attempt of operator `name` in the checkpoint; None, with the
        reason in `report.skipped`, when there is nothing to run (the checkpoint
        completed, or every subtask acknowledged already: a retry after the ack)."""
        node = self.pipeline.node(name)
        if isinstance(node, SourceDef):
            raise CheckpointError(f"'{name}' is a source: sources run no task")
        pending = self._pending_or_skip(checkpoint_id, report)
        if pending is None:
            return None
        tasks = tuple(t for t in pending.expected_tasks if t.operator == name)
        if not tasks:
            raise CheckpointError(f"checkpoint {checkpoint_id} expects no task of '{name}'")
        acked = self.coordinator.acks(checkpoint_id)
        if all(t in acked for t in tasks):
            report.skipped = "every subtask acknowledged already (a retry after the ack)"
            report.results = {str(t): TaskAcknowledgeResult.DUPLICATE for t in tasks}
            return None
        return TaskAttempt(self.env, pending, node, tasks, self.attempt, report)

    def _pending_or_skip(
        self, checkpoint_id: int, report: OperatorRunReport
    ) -> PendingCheckpoint | None:
        pending = self.coordinator.get_pending(checkpoint_id)
        if pending is not None:
            return pending
        outcome = self.coordinator.get_outcome(checkpoint_id)
        if outcome is None:
            raise CheckpointError(
                f"pipeline '{self.pipeline.name}' has no checkpoint {checkpoint_id}"
            )
        if outcome.status is CheckpointStatus.COMPLETED:
            report.skipped = "the checkpoint completed already"
            return None
        raise CheckpointAlreadySettled(
            f"checkpoint {checkpoint_id} was aborted ({outcome.message}); nothing to run"
        )


def count_spark_work(attempt: TaskAttempt) -> None:
    """Record in the report the Spark jobs and stages the attempt ran (its acks carry
    them); nothing when the session has no job tags or cannot say."""
    tag = attempt.job_tag
    if tag is None:
        return
    from batchpoint.spark.job_count import spark_work

    work = spark_work(attempt.env.session, tag)
    if work is not None:
        attempt.report.spark_jobs, attempt.report.spark_stages = work


def run_phases(attempt: TaskAttempt) -> Handles:
    """Align, restore, process and snapshot: the files each subtask will acknowledge."""
    base = align(attempt)
    aligned = time.monotonic()
    channels = upstream_channels(attempt)
    adopted = adopted_sink(attempt, channels, aligned)
    if adopted is not None:
        return adopted
    restored = restore(attempt, base, channels)
    processed = process(attempt, restored)
    attempt.at(AttemptPoint.BEFORE_SNAPSHOT)
    return snapshot(attempt, processed, restored, aligned)
