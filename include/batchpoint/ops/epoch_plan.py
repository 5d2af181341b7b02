"""One epoch, planned once: every task of it and the edges between them, as a value.

    trigger ─┬─> operators.<a> ─> operators.<b> ─> ...   (topological order)
             └─> wait_for_acks ─> [audit ─>] finalize [─> export_savepoint ─> stop_pipeline]
    cleanup (after trigger, the operators, wait_for_acks, audit and finalize, whatever
             happened to them)

`plan_epoch` builds it from the pipeline's spec and the deployment's settings; the
renderers only translate it: `airflow/epoch_dag.py` into Airflow tasks (one operator
class per task kind), `ops/epoch_executor.py` into calls in this process (one handler per
task kind). Neither decides which tasks an epoch has, in which order, after what, or with
how many retries: this module does (cosmos's DbtGraph -> TaskMetadata -> render).

Nothing here imports Spark or Airflow: a DAG file builds its plans at parse time.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from batchpoint.errors import ConfigError
from batchpoint.protocol.checkpoint import CheckpointType
from batchpoint.protocol.pipeline import PipelineSpec

#: The group the operator tasks are rendered in (Airflow: a TaskGroup; task ids
#: `operators.<name>`).
OPERATOR_GROUP = "operators"
#: Finalize is retried on its own: its writes are idempotent, and a storage hiccup
#: should not leave a fully acknowledged checkpoint to the cleanup.
FINALIZE_RETRIES = 2
FINALIZE_RETRY_DELAY = 5.0


class TaskKind(StrEnum):
    """What a task of the epoch does; each renderer maps every kind to one thing."""

    TRIGGER_CHECKPOINT = "trigger_checkpoint"
    TRIGGER_SAVEPOINT = "trigger_savepoint"
    OPERATOR = "operator"  # one pipeline operator, all its subtasks
    WAIT_FOR_ACKS = "wait_for_acks"
    AUDIT = "audit"  # write-audit-publish: the quality gate's verdict completes it
    FINALIZE = "finalize"
    EXPORT_SAVEPOINT = "export_savepoint"
    STOP_PIPELINE = "stop_pipeline"
    CLEANUP = "cleanup"


class RunsWhen(StrEnum):
    """When a task may run, by what became of its upstream tasks (Airflow's trigger
    rules of the same values)."""

    UPSTREAM_SUCCEEDED = "all_success"
    UPSTREAM_DONE = "all_done"  # whatever happened: the failure path


@dataclass(frozen=True, order=True)
class EpochTaskId:
    """A task's id in the plan: `trigger`, or `operators.balances` for a task in a group."""

    name: str
    group: str | None = None

    def __str__(self) -> str:
        return f"{self.group}.{self.name}" if self.group else self.name


TRIGGER = EpochTaskId("trigger")
WAIT_FOR_ACKS = EpochTaskId("wait_for_acks")
AUDIT = EpochTaskId("audit")
FINALIZE = EpochTaskId("finalize")
EXPORT_SAVEPOINT = EpochTaskId("export_savepoint")
STOP_PIPELINE = EpochTaskId("stop_pipeline")
CLEANUP = EpochTaskId("cleanup")


@dataclass(frozen=True)
class TaskSettings:
    """What a renderer needs to run one task; None: the renderer's default."""

    retries: int | None = None
    retry_delay: float | None = None  # seconds
    #: Seconds one try may take (the ack wait: how long it waits, grace included).
    timeout: float | None = None


@dataclass(frozen=True)
class EpochSettings:
    """The deployment's part of a plan: the checkpoint timeout, how operator tasks are
    retried, and how long a run may outlive its checkpoint (so its cleanup runs)."""

    timeout: float
    task_retries: int = 1
    retry_delay: float = 30.0
    cleanup_grace: float = 120.0


@dataclass(frozen=True)
class PlannedTask:
    id: EpochTaskId
    kind: TaskKind
    upstream: tuple[EpochTaskId, ...] = ()
    operator: str | None = None  # OPERATOR tasks: the pipeline operator they run
    settings: TaskSettings = TaskSettings()
    runs_when: RunsWhen = RunsWhen.UPSTREAM_SUCCEEDED


@dataclass(frozen=True)
class EpochPlan:
    """The whole epoch. `tasks` is in the order one process runs them (each after its
    upstream); `edges` are every (upstream, downstream) pair."""

    pipeline: str
    checkpoint_type: CheckpointType
    audited: bool
    tasks: tuple[PlannedTask, ...]

    @property
    def ids(self) -> tuple[EpochTaskId, ...]:
        return tuple(t.id for t in self.tasks)

    @property
    def edges(self) -> tuple[tuple[EpochTaskId, EpochTaskId], ...]:
        return tuple((up, t.id) for t in self.tasks for up in t.upstream)

    @property
    def operators(self) -> tuple[str, ...]:
        """The pipeline operators the epoch runs, in order."""
        return tuple(t.operator for t in self.tasks if t.operator is not None)

    def task(self, task_id: EpochTaskId) -> PlannedTask:
        return next(t for t in self.tasks if t.id == task_id)

    def of_kind(self, kind: TaskKind) -> tuple[PlannedTask, ...]:
        return tuple(t for t in self.tasks if t.kind is kind)


# -- the operator tasks ---------------------------------------------------------------


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


def operator_task_id(operator: str) -> EpochTaskId:
    return EpochTaskId(operator, OPERATOR_GROUP)


# -- the plan -------------------------------------------------------------------------


def plan_epoch(
    spec: PipelineSpec,
    settings: EpochSettings,
    checkpoint_type: CheckpointType = CheckpointType.CHECKPOINT,
    *,
    audit: bool = False,
    export: bool = False,
    stop: bool = False,
) -> EpochPlan:
    """The epoch of `spec`: a checkpoint (audited with `audit`) or a savepoint (exported
    with `export`, then the pipeline stopped with `stop`)."""
    savepoint = checkpoint_type is CheckpointType.SAVEPOINT
    if audit and savepoint:
        raise ConfigError("savepoints are not audited")
    if (export or stop) and not savepoint:
        raise ConfigError("only a savepoint is exported, or stops the pipeline")
    if stop and not export:
        raise ConfigError("stop-with-savepoint stops after the export")
    jobs = TaskSettings(settings.task_retries, settings.retry_delay, settings.timeout)
    retried = TaskSettings(settings.task_retries, settings.retry_delay)
    operators = tuple(
        PlannedTask(
            operator_task_id(task.operator),
            TaskKind.OPERATOR,
            tuple(map(operator_task_id, task.upstream)) or (TRIGGER,),
            task.operator,
            jobs,
        )
        for task in epoch_tasks(spec)
    )
    trigger_kind = TaskKind.TRIGGER_SAVEPOINT if savepoint else TaskKind.TRIGGER_CHECKPOINT
    wait = TaskSettings(timeout=settings.timeout + settings.cleanup_grace)
    outcome = [
        # retried as jobs are: a retried trigger finds the checkpoint its run triggered
        PlannedTask(TRIGGER, trigger_kind, settings=retried),
        *operators,
        PlannedTask(WAIT_FOR_ACKS, TaskKind.WAIT_FOR_ACKS, (TRIGGER,), settings=wait),
    ]
    if audit:
        outcome.append(PlannedTask(AUDIT, TaskKind.AUDIT, (WAIT_FOR_ACKS,), settings=jobs))
    finalize = TaskSettings(FINALIZE_RETRIES, FINALIZE_RETRY_DELAY)
    outcome.append(PlannedTask(FINALIZE, TaskKind.FINALIZE, (outcome[-1].id,), settings=finalize))
    after: list[PlannedTask] = []
    if export:
        after.append(PlannedTask(EXPORT_SAVEPOINT, TaskKind.EXPORT_SAVEPOINT, (FINALIZE,)))
    if stop:
        after.append(PlannedTask(STOP_PIPELINE, TaskKind.STOP_PIPELINE, (EXPORT_SAVEPOINT,)))
    # The cleanup settles the checkpoint: it follows every task up to its outcome, not
    # the export and stop that come after it.
    cleanup = PlannedTask(
        CLEANUP,
        TaskKind.CLEANUP,
        tuple(t.id for t in outcome),
        runs_when=RunsWhen.UPSTREAM_DONE,
    )
    return EpochPlan(spec.name, checkpoint_type, audit, (*outcome, *after, cleanup))
