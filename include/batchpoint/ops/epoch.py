"""One epoch: its shape (the operator tasks, in order), finalize-and-publish, expire,
and running a whole epoch in one process.

The Airflow checkpoint and savepoint DAGs, `LocalEpochRunner` (tests, bench, the
scheduler-free demo) and `batchpoint savepoint` all build their epoch from
`epoch_tasks` and settle it with `finalize`, so the three never disagree on which tasks
an epoch has or on what completing it means."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from batchpoint.errors import BatchpointError
from batchpoint.protocol.checkpoint import (
    CheckpointOutcome,
    CheckpointStatus,
    CheckpointType,
    PendingCheckpoint,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.coordinator import CheckpointCoordinator, Clock
from batchpoint.protocol.pipeline import PipelineSpec
from batchpoint.protocol.settlement import FinalizeWait
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.runner import OperatorRunner, OperatorRunReport
from batchpoint.runtime.task_hooks import AttemptHooks
from batchpoint.storage import StoreRef

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Progress = Callable[[str], None]


def _quiet(_line: str) -> None:
    pass


# -- the epoch's shape ----------------------------------------------------------------


@dataclass(frozen=True)
class EpochTask:
    """One operator task of an epoch: an operator with subtasks, and the operator tasks
    it reads from (sources have no task: their barrier is captured at trigger)."""

    operator: str
    upstream: tuple[str, ...]


def epoch_tasks(spec: PipelineSpec) -> list[EpochTask]:
    """The epoch's operator tasks in topological order."""
    with_tasks = {op.name for op in spec.operators if op.has_tasks}
    return [
        EpochTask(op.name, tuple(i for i in op.inputs if i in with_tasks))
        for op in spec.topological_order()
        if op.has_tasks
    ]


# -- finalize, expire -----------------------------------------------------------------


@dataclass
class Finalized:
    """What `finalize` did. `outcome` None: nothing decided yet, `waiting` says why."""

    checkpoint_id: int
    outcome: CheckpointOutcome | None
    published: list[str] = field(default_factory=list)
    waiting: FinalizeWait | None = None  # when outcome is None
    retained: list[int] = field(default_factory=list)  # after this call, when it decided
    #: Retained before this call and not after: subsumed by this checkpoint (or, with
    #: another actor in between, by theirs), queued for GC.
    subsumed: list[int] = field(default_factory=list)

    @property
    def completed(self) -> bool:
        return self.outcome is not None and self.outcome.status is CheckpointStatus.COMPLETED

    @property
    def message(self) -> str:
        cid = self.checkpoint_id
        if self.outcome is None:
            return {
                FinalizeWait.ACKS: f"checkpoint {cid} still misses acks",
                FinalizeWait.AUDIT: f"checkpoint {cid} is audited: only its audit task may "
                "complete it, and it gave no verdict",
                FinalizeWait.BASE: f"checkpoint {cid} waits for its base checkpoint to settle",
            }.get(self.waiting, f"checkpoint {cid} not decided")
        if self.completed:
            return f"checkpoint {cid} completed"
        reason = self.outcome.reason.code if self.outcome.reason else "-"
        return f"checkpoint {cid} aborted ({reason}): {self.outcome.message}"


def finalize(driver: PipelineDriver, checkpoint_id: int, *, audited: bool = False) -> Finalized:
    """Complete the checkpoint if every ack is in (after checking every referenced file),
    then publish its sinks' staged output (notifyCheckpointComplete). Idempotent: a
    settled checkpoint is only finished off (published if it completed). `audited` is
    for the audit alone, once the state passed the gate."""
    coordinator = driver.coordinator
    before = _retained(coordinator)
    outcome = coordinator.finalize(checkpoint_id, audited=audited)
    if isinstance(outcome, FinalizeWait):
        return Finalized(checkpoint_id, None, waiting=outcome)
    published = driver.notify_complete(checkpoint_id) if outcome.completed is not None else []
    after = _retained(coordinator)
    subsumed = sorted(set(before) - set(after)) if before is not None and after is not None else []
    return Finalized(checkpoint_id, outcome, published, retained=after or [], subsumed=subsumed)


def _retained(coordinator: CheckpointCoordinator) -> list[int] | None:
    """The retained ids, for the log of what a completion subsumed: a read that fails
    only leaves that out, it never fails the finalize."""
    try:
        return coordinator.completed.retained_ids()
    except BatchpointError:
        return None


def expire(
    coordinator: CheckpointCoordinator, checkpoint_id: int, missing: Iterable[str] | None = None
) -> CheckpointOutcome:
    """Abort the checkpoint as EXPIRED, naming the tasks that did not acknowledge it in
    time (those still missing when `missing` is None), in the coordinator's own words.
    A checkpoint already settled keeps its outcome."""
    return coordinator.expire(checkpoint_id, missing)


# -- an epoch in one process --------------------------------------------------------------


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
    """Whole epochs in one process on one Spark session: trigger, every operator task in
    the epoch's order, finalize and publish. `hooks` go to every operator attempt (tests
    inject faults there; none by default)."""

    def __init__(
        self,
        pipeline: Pipeline,
        store_ref: StoreRef,
        spark: SparkSession,
        config: CheckpointConfig | None = None,
        clock: Clock = time.time,
        log: Progress = _quiet,
        hooks: AttemptHooks | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.store_ref = store_ref
        self.spark = spark
        self.config = config or CheckpointConfig()
        self.driver = PipelineDriver(pipeline, store_ref, self.config, clock)
        self.log = log
        self.hooks = hooks

    def operator_runner(
        self, attempt: str | None = None, hooks: AttemptHooks | None = None
    ) -> OperatorRunner:
        """A runner of this epoch's operators (with `hooks`, else this runner's)."""
        return OperatorRunner(
            self.pipeline,
            self.store_ref,
            self.spark,
            config=self.config,
            attempt=attempt,
            align_timeout=5.0,
            log=self.log,
            hooks=hooks or self.hooks,
        )

    def task_order(self) -> list[str]:
        return [t.operator for t in epoch_tasks(self.driver.current_spec())]

    def run_operators(
        self, checkpoint_id: int, attempt: str | None = None, progress: Progress = _quiet
    ) -> list[OperatorRunReport]:
        """Every operator task of the checkpoint; OperatorFailed when one fails (its
        subtasks declined the checkpoint)."""
        runner = self.operator_runner(attempt)
        order = self.task_order()
        reports = []
        for number, name in enumerate(order, 1):
            started = time.monotonic()
            progress(f"[{number}/{len(order)}] {name} ...")
            report = runner.run(checkpoint_id, name)
            progress(f"[{number}/{len(order)}] {name} done in {time.monotonic() - started:.1f}s")
            if report.skipped:
                progress(f"  ({report.skipped})")
            reports.append(report)
        return reports

    def complete(self, checkpoint_id: int) -> tuple[CheckpointOutcome | None, list[str]]:
        done = finalize(self.driver, checkpoint_id)
        return done.outcome, done.published

    def run_epoch(
        self,
        checkpoint_type: CheckpointType = CheckpointType.CHECKPOINT,
        properties: Mapping[str, Any] | None = None,
        progress: Progress = _quiet,
    ) -> EpochResult:
        pending = self.driver.trigger(checkpoint_type, properties=properties)
        result = EpochResult(pending, None)
        result.reports = self.run_operators(pending.checkpoint_id, progress=progress)
        result.outcome, result.published = self.complete(pending.checkpoint_id)
        return result
