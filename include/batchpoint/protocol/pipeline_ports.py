"""The ports the front ends (ops/, the runtime, the UI, the CLI) take instead of the
coordinator: each names what a use case may ask of a pipeline, and none exposes the
store, layout or control store beneath (protocol/coordinator.py, the composition root,
is the one implementation; a test may give a use case anything of the same shape).

- `PipelineHistory`: what a pipeline has checkpointed, and the parts that keep it (the
  retained set and head, the failure count, the quarantine, statistics, the stored
  reports, the savepoint folders and the sinks' manifests).
- `CheckpointDecisions`: a history that also acknowledges, declines and decides
  checkpoints (an epoch's tasks and its finalize).
- `PipelineMaintenance`: a history that also repairs, resets, resumes and collects
  (what an operator runs from a terminal or a maintenance DAG).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from batchpoint.protocol.checkpoint import (
        AckRecord,
        CheckpointFailureReason,
        CheckpointOutcome,
        DeclineRecord,
        DeclineResult,
        FileHandle,
        PendingCheckpoint,
        TaskAcknowledgeResult,
        TaskMetrics,
    )
    from batchpoint.protocol.completed_store import CompletedCheckpointStore
    from batchpoint.protocol.config import CheckpointConfig
    from batchpoint.protocol.control import CascadeFence, ControlRecord, Stopped
    from batchpoint.protocol.control_store import HeadStore
    from batchpoint.protocol.failures import CheckpointFailureManager
    from batchpoint.protocol.finalizer import AuditJudge
    from batchpoint.protocol.gc import GarbageCollector
    from batchpoint.protocol.ids import CheckpointIDCounter
    from batchpoint.protocol.layout import TaskId
    from batchpoint.protocol.pipeline import PipelineSpec
    from batchpoint.protocol.ports import Clock
    from batchpoint.protocol.quarantine import QuarantineStore
    from batchpoint.protocol.reads import AckProgress
    from batchpoint.protocol.repair import RepairReport
    from batchpoint.protocol.reports import StoredReports
    from batchpoint.protocol.savepoint_transfer import Savepoints
    from batchpoint.protocol.settlement import FinalizeWait
    from batchpoint.protocol.sink_tables import SinkTables
    from batchpoint.protocol.sinks import SinkPublisher
    from batchpoint.protocol.stats import CheckpointStatsTracker


class PipelineHistory(Protocol):
    config: CheckpointConfig
    clock: Clock
    ids: CheckpointIDCounter
    head: HeadStore
    completed: CompletedCheckpointStore
    failures: CheckpointFailureManager
    quarantine: QuarantineStore
    stats: CheckpointStatsTracker
    reports: StoredReports
    savepoints: Savepoints
    sinks: SinkPublisher

    @property
    def pipeline(self) -> str: ...

    def load_spec(self) -> PipelineSpec: ...

    def stored_spec(self) -> PipelineSpec | None: ...

    def control_record(self) -> ControlRecord | None: ...

    def lost_control(self) -> str | None: ...

    def stopped(self) -> Stopped | None: ...

    def pending_checkpoints(self) -> list[PendingCheckpoint]: ...

    def get_pending(self, checkpoint_id: int) -> PendingCheckpoint | None: ...

    def get_outcome(self, checkpoint_id: int) -> CheckpointOutcome | None: ...

    def has_outcome(self, checkpoint_id: int) -> bool: ...

    def get_checkpoint(self, checkpoint_id: int) -> PendingCheckpoint: ...

    def acks(self, checkpoint_id: int) -> dict[TaskId, AckRecord]: ...

    def declines(self, checkpoint_id: int) -> list[DeclineRecord]: ...

    def progress(self, checkpoint_id: int) -> AckProgress: ...

    def checkpoint_ids(self) -> list[int]: ...


class CheckpointDecisions(PipelineHistory, Protocol):
    def acknowledge(
        self,
        checkpoint_id: int,
        task: TaskId,
        attempt: str,
        handles: Iterable[FileHandle] = (),
        metrics: TaskMetrics | None = None,
    ) -> TaskAcknowledgeResult: ...

    def decline(
        self, checkpoint_id: int, task: TaskId, attempt: str, reason: str
    ) -> DeclineResult: ...

    def try_finalize(
        self, checkpoint_id: int, *, audited: bool = False
    ) -> CheckpointOutcome | None: ...

    def finalize(
        self, checkpoint_id: int, *, audited: bool = False
    ) -> CheckpointOutcome | FinalizeWait: ...

    def complete_audited(
        self, checkpoint_id: int, judge: AuditJudge
    ) -> CheckpointOutcome | FinalizeWait: ...

    def abort(
        self, checkpoint_id: int, reason: CheckpointFailureReason, message: str = ""
    ) -> CheckpointOutcome: ...

    def expire(
        self, checkpoint_id: int, missing: Iterable[TaskId] | None = None
    ) -> CheckpointOutcome: ...

    def settle(self) -> list[CheckpointOutcome]: ...

    def garbage_collector(
        self,
        extra_references: Callable[[], Iterable[str]] | None = None,
        *,
        grace: float | None = None,
        tables: SinkTables | None = None,
    ) -> GarbageCollector: ...


class PipelineMaintenance(CheckpointDecisions, Protocol):
    def reset_failures(self) -> None: ...

    def resume(self) -> Stopped: ...

    def repair(
        self, *, dry_run: bool = False, force: bool = False, head: int | None = None
    ) -> RepairReport: ...

    def hold_for_cascade(self, fence: CascadeFence) -> None: ...

    def release_cascade(self, cascade_id: str) -> None: ...
