"""Flink's CheckpointCoordinator over a shared store: the facade the front ends call,
and the composition root that builds every collaborator from the parts it needs.

It keeps no state of its own: every decision is a conditional write to storage, so any
process (an Airflow task, a Spark executor, the CLI) may play any part and crash at any
point; re-running an operation finishes whatever a crash left behind.

Lifecycle of checkpoint N, and who owns each step:
  trigger   allocate N, admit it, write the pending record        trigger.py, decider.py
  ack       each expected task writes one ack record (create-once)  ack_accounting.py
  decline   a task's refusal: the checkpoint is aborted at once     ack_accounting.py
  finalize  every ack present and every file intact -> COMPLETED    finalizer.py
  expire    past the deadline -> ABORTED (expired)                  finalizer.py, settlement.py
  settle    after an outcome: retain/subsume, move the head, count  finalizer.py,
            the failure, and finally remove the active marker       completed_store.py
  publish   the sinks commit what a completed checkpoint staged     publish.py, sinks.py
  restore   move the head in one CAS, then rewind the sinks         restorer.py
  stop      a savepoint that stops: one CAS each to admit, stop      stopping.py, decider.py,
            and resume (restores resume too)                        completed_store.py
  collect   delete what nothing references any more                 gc.py

No collaborator holds the coordinator: each gets the ports it uses: the records port
(`CheckpointRecords`: reads, and the create-once writes of a checkpoint's records) or its
read side alone, the files port (`CheckpointFiles`: data files checked, listed, deleted),
the control store, a clock, and for what it must ask of another the small ports of
protocol/ports.py. Only savepoints, which copy between storages, get the store and layout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from batchpoint.errors import SPEC_HINT, CheckpointNotFound, CorruptRecord, ObjectNotFound
from batchpoint.protocol import cascade, stopping
from batchpoint.protocol.ack_accounting import AckAccounting
from batchpoint.protocol.checkpoint import (
    AckRecord,
    CheckpointFailureReason,
    CheckpointOutcome,
    CheckpointStatus,
    CheckpointType,
    DeclineRecord,
    DeclineResult,
    FileHandle,
    PendingCheckpoint,
    TaskAcknowledgeResult,
    TaskMetrics,
)
from batchpoint.protocol.checkpoint_files import CheckpointFiles
from batchpoint.protocol.checkpoint_records import CheckpointRecords
from batchpoint.protocol.completed_store import CompletedCheckpointStore
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.control import CascadeFence, ControlRecord, ControlUnreadable, Stopped
from batchpoint.protocol.control_store import ControlStore, HeadStore
from batchpoint.protocol.decider import CheckpointRequestDecider, control_lost
from batchpoint.protocol.failures import CheckpointFailureManager
from batchpoint.protocol.finalizer import AuditJudge, CheckpointFinalizer, ReadsCheck
from batchpoint.protocol.gc import GarbageCollector
from batchpoint.protocol.history_status import Standing
from batchpoint.protocol.ids import CheckpointIDCounter, first_unused_id
from batchpoint.protocol.layout import PipelineLayout, TaskId
from batchpoint.protocol.pipeline import PipelineSpec
from batchpoint.protocol.ports import Clock
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.protocol.publish import CompletionNotifier, PublishReport, SinkTarget
from batchpoint.protocol.quarantine import QuarantineStore
from batchpoint.protocol.reads import AckProgress
from batchpoint.protocol.repair import Repairer, RepairReport
from batchpoint.protocol.reports import StoredReports
from batchpoint.protocol.restorer import CheckpointRestorer
from batchpoint.protocol.savepoint_transfer import ImportSteps, Savepoints
from batchpoint.protocol.settlement import FinalizeWait
from batchpoint.protocol.sink_tables import SinkTables
from batchpoint.protocol.sinks import SinkPublisher
from batchpoint.protocol.stats import CheckpointStatsTracker
from batchpoint.protocol.topology import Topology
from batchpoint.protocol.trigger import CaptureBarrier, CheckBase, CheckpointTrigger, DeployBase
from batchpoint.storage.base import ObjectStore

__all__ = ["AckProgress", "CheckpointCoordinator", "Clock"]


class CheckpointCoordinator:
    """Every command of one pipeline's protocol, and its reads (delegated to the
    records port, `CheckpointRecords`). Its `store`, `layout` and `control` are the composition
    root's own: front ends get the ports (protocol/pipeline_ports.py), never these."""

    def __init__(
        self,
        store: ObjectStore,
        pipeline: PipelineSpec | str,
        config: CheckpointConfig | None = None,
        clock: Clock = time.time,
        check_reads: ReadsCheck | None = None,  # the runtime's, for pipelines that read others
    ) -> None:
        name = pipeline.name if isinstance(pipeline, PipelineSpec) else pipeline
        layout = PipelineLayout(name)
        self.store = store
        self.layout = layout
        self.control = ControlStore(store, layout, clock)
        self.records = CheckpointRecords(store, layout, self.control)
        self.files = CheckpointFiles(store, layout)
        self.spec = pipeline if isinstance(pipeline, PipelineSpec) else None
        self.config = config or CheckpointConfig()
        self.clock = clock
        self.ids = CheckpointIDCounter(
            store, layout, lambda: first_unused_id(self.records, self.control)
        )
        self.head = HeadStore(store, layout, self.control)
        self.completed = CompletedCheckpointStore(store, layout, self.control)
        self.decider = CheckpointRequestDecider(name, self.config, self.control.key)
        self.failures = CheckpointFailureManager(
            store, layout, self.config.tolerable_failed_checkpoints
        )
        self.quarantine = QuarantineStore(store, layout)
        self.sinks = SinkPublisher(store, layout)
        self._build_collaborators(check_reads)

    def _build_collaborators(self, check_reads: ReadsCheck | None) -> None:
        """Each collaborator gets only its parts; none gets the coordinator."""
        records, files = self.records, self.files
        self.finalizer = CheckpointFinalizer(
            records=records,
            files=files,
            control=self.control,
            failures=self.failures,
            config=self.config,
            clock=self.clock,
            check_reads=check_reads,
        )
        self.ack_accounting = AckAccounting(
            records=records, files=files, clock=self.clock, decide_abort=self.finalizer.decide_abort
        )
        self.checkpoint_trigger = CheckpointTrigger(
            records=records,
            control=self.control,
            ids=self.ids,
            decider=self.decider,
            failures=self.failures,
            config=self.config,
            clock=self.clock,
            abort=self.finalizer.abort,
        )
        self.restorer = CheckpointRestorer(
            records=records,
            control=self.control,
            completed=self.completed,
            quarantine=self.quarantine,
            sinks=self.sinks,
            failures=self.failures,
            clock=self.clock,
            abort=self.finalizer.abort,
            verify_checksums=self.config.restore_verify_checksums,
        )
        self.notifier = CompletionNotifier(
            reads=records,
            control=self.control,
            sinks=self.sinks,
            roll_forward=self.restorer.finish,
            alias_of=self.restorer.alias_of,
            base_of=self.restorer.base_of,
        )
        self.savepoints = Savepoints(
            store=self.store,
            layout=self.layout,
            completed=self.completed,
            control=self.control,
            clock=self.clock,
            roll_forward=self.restorer.finish,
            steps=ImportSteps(
                admit=self.checkpoint_trigger.admit_import,
                write_pending=records.create_pending,
                acknowledge=self.ack_accounting.acknowledge,
                finalize=self.finalizer.try_finalize,
            ),
        )
        self.stats = CheckpointStatsTracker(records, self.ids, self.standing)
        self.reports = StoredReports(self.store, self.layout)

    # == the reads (protocol/reads.py) ===================================================

    @property
    def pipeline(self) -> str:
        return self.layout.pipeline

    def pending_checkpoints(self) -> list[PendingCheckpoint]:
        return self.records.pending_checkpoints()

    def get_pending(self, checkpoint_id: int) -> PendingCheckpoint | None:
        return self.records.get_pending(checkpoint_id)

    def pending_or_admitted(self, checkpoint_id: int) -> PendingCheckpoint | None:
        return self.records.pending_or_admitted(checkpoint_id)

    def get_outcome(self, checkpoint_id: int) -> CheckpointOutcome | None:
        return self.records.get_outcome(checkpoint_id)

    def has_outcome(self, checkpoint_id: int) -> bool:
        return self.records.has_outcome(checkpoint_id)

    def get_checkpoint(self, checkpoint_id: int) -> PendingCheckpoint:
        return self.records.get_checkpoint(checkpoint_id)

    def status(self, checkpoint_id: int) -> CheckpointStatus | None:
        return self.records.status(checkpoint_id)

    def acks(self, checkpoint_id: int) -> dict[TaskId, AckRecord]:
        return self.records.acks(checkpoint_id)

    def declines(self, checkpoint_id: int) -> list[DeclineRecord]:
        return self.records.declines(checkpoint_id)

    def progress(self, checkpoint_id: int) -> AckProgress:
        return self.records.progress(checkpoint_id)

    def checkpoint_ids(self) -> list[int]:
        return self.records.checkpoint_ids()

    # == the pipeline's graph ============================================================

    def register(self, spec: PipelineSpec) -> None:
        """Store the pipeline spec, so other processes can find the expected tasks."""
        if spec.name != self.pipeline:
            raise ValueError(f"spec of '{spec.name}' given to coordinator of '{self.pipeline}'")
        self.spec = spec
        self.store.put(self.layout.spec, spec.encode())

    def load_spec(self) -> PipelineSpec:
        if self.spec is None:
            self.spec = self.stored_spec()
            if self.spec is None:
                raise CheckpointNotFound(
                    f"pipeline '{self.pipeline}' is not registered in {self.store.uri}"
                )
        return self.spec

    def stored_spec(self) -> PipelineSpec | None:
        """The spec last registered (read afresh), or None when there is none."""
        try:
            data = self.store.get(self.layout.spec).data
        except ObjectNotFound:
            return None
        try:
            return PipelineSpec.decode(self.layout.spec, data)
        except CorruptRecord as exc:  # no evidence repair judges by: the code registers it
            raise CorruptRecord(exc.key, exc.problem, SPEC_HINT) from None

    def control_record(self) -> ControlRecord | None:
        """The control record as stored (None: none yet). Raises ControlUnreadable."""
        found = self.control.read()
        return found[0] if found else None

    def standing(self) -> Standing:
        """The head, the retained and the quarantined, as the history shows them."""
        quarantined = self.quarantine.ids()
        try:
            control = self.control_record()
        except ControlUnreadable:
            return Standing.unknown(quarantined)
        if control is None and self.lost_control():
            return Standing.unknown(quarantined)
        return Standing.of(control, quarantined)

    def lost_control(self) -> str | None:
        """Why the history cannot be read: checkpoints were taken, the record is gone."""
        if self.ids.peek() <= 1 or self.control.exists():
            return None
        return control_lost(self.pipeline, self.control.key)

    # == trigger, acknowledge, decline ===================================================

    def trigger(
        self,
        barrier: Mapping[str, Any] | CaptureBarrier,
        *,
        checkpoint_type: CheckpointType = CheckpointType.CHECKPOINT,
        properties: CheckpointProperties | None = None,
        timeout: float | None = None,
        spec: PipelineSpec | None = None,
        topology: Topology | None = None,
        check_base: CheckBase | None = None,
    ) -> PendingCheckpoint:
        """Start a checkpoint, or raise TriggerRefused with the reason (see
        protocol/trigger.py). Settles what is due and rolls a restore forward first.
        A `spec` given is registered only once `check_base` accepted the deploy."""
        self.settle()
        self.finish_restore()

        def checked(base: DeployBase) -> list[str]:
            problems = check_base(base) if check_base is not None else []
            if not problems and spec is not None:
                self.register(spec)
            return problems

        return self.checkpoint_trigger.trigger(
            spec or self.load_spec(),
            barrier,
            checkpoint_type=checkpoint_type,
            properties=properties,
            timeout=timeout,
            topology=topology,
            check_base=checked,
        )

    def acknowledge(
        self,
        checkpoint_id: int,
        task: TaskId,
        attempt: str,
        handles: Iterable[FileHandle] = (),
        metrics: TaskMetrics | None = None,
    ) -> TaskAcknowledgeResult:
        """Flink's PendingCheckpoint.acknowledgeTask (protocol/ack_accounting.py)."""
        return self.ack_accounting.acknowledge(checkpoint_id, task, attempt, handles, metrics)

    def decline(self, checkpoint_id: int, task: TaskId, attempt: str, reason: str) -> DeclineResult:
        """Flink's declineCheckpoint: the checkpoint aborts at once."""
        return self.ack_accounting.decline(checkpoint_id, task, attempt, reason)

    # == finalize, abort, expire, settle (protocol/finalizer.py) =========================

    def try_finalize(
        self, checkpoint_id: int, *, audited: bool = False
    ) -> CheckpointOutcome | None:
        """Complete the checkpoint if every expected task acknowledged; None while it
        waits (`finalize` says for what). `audited` is for its audit alone."""
        return self.finalizer.try_finalize(checkpoint_id, audited=audited)

    def finalize(
        self, checkpoint_id: int, *, audited: bool = False
    ) -> CheckpointOutcome | FinalizeWait:
        """`try_finalize`, saying what an undecided checkpoint waits for."""
        return self.finalizer.finalize(checkpoint_id, audited=audited)

    def complete_audited(
        self, checkpoint_id: int, judge: AuditJudge
    ) -> CheckpointOutcome | FinalizeWait:
        """The audit's finalize: `judge` the checkpoint as it would complete, then
        complete it or abort it (QUALITY_GATE)."""
        return self.finalizer.complete_audited(checkpoint_id, judge)

    def abort(
        self, checkpoint_id: int, reason: CheckpointFailureReason, message: str = ""
    ) -> CheckpointOutcome:
        """Abort a pending checkpoint; returns the outcome that holds."""
        return self.finalizer.abort(checkpoint_id, reason, message)

    def expire(
        self, checkpoint_id: int, missing: Iterable[TaskId] | None = None
    ) -> CheckpointOutcome:
        """Abort as EXPIRED, naming the tasks that did not acknowledge it in time."""
        return self.finalizer.expire(checkpoint_id, missing)

    def settle(self) -> list[CheckpointOutcome]:
        """Expire overdue checkpoints, finalize complete ones, finish half-done settles."""
        return self.finalizer.settle()

    def expire_overdue(self) -> list[CheckpointOutcome]:
        return [o for o in self.settle() if o.reason is CheckpointFailureReason.EXPIRED]

    # == publish, restore, reset, repair =================================================

    def notify_checkpoint_complete(
        self, checkpoint_id: int, sinks: Iterable[SinkTarget]
    ) -> PublishReport:
        """Publish the sinks' staged output of a completed checkpoint of the current
        timeline (protocol/publish.py). Idempotent."""
        return self.notifier.notify_checkpoint_complete(checkpoint_id, sinks)

    def finish_restore(self) -> None:
        """Roll a restore that has not rewound its sinks forward (any actor may)."""
        self.restorer.finish()

    def stopped(self) -> Stopped | None:
        """The savepoint that stopped the pipeline, or None (as the control record says)."""
        return self.control.load().stopped

    def resume(self) -> Stopped:
        """Clear a stop-with-savepoint's `stopped` in one CAS: triggers start again from
        the head (the stop's savepoint). Returns what was cleared; NotStopped when the
        pipeline is not stopped (protocol/stopping.py)."""
        cleared: list[Stopped] = []

        def resume(current: ControlRecord | None) -> ControlRecord:
            resumed = stopping.resumed(current, self.pipeline)  # raises unless stopped
            assert current is not None and current.stopped is not None
            cleared[:] = [current.stopped]
            return resumed

        self.control.update(resume)
        return cleared[0]

    def reset_failures(self) -> None:
        try:
            head = self.head.get().checkpoint_id or 0
        except ControlUnreadable:
            head = 0  # the counter is cleared all the same; repair rebuilds the record
        self.failures.reset(self.clock(), reason="explicit reset", completed_up_to=head)

    def hold_for_cascade(self, fence: CascadeFence) -> None:
        """Fence the pipeline for a cascade restore: its triggers refuse (CASCADE) until
        `release_cascade` (protocol/cascade.py). CascadeBusy if another one holds it."""
        self.control.update(lambda c: cascade.fenced(c, fence, self.pipeline))

    def release_cascade(self, cascade_id: str) -> None:
        """Lift that cascade's fence (nothing when it holds none)."""
        self.control.update(lambda c: cascade.unfenced(c, cascade_id))

    def repair(
        self, *, dry_run: bool = False, force: bool = False, head: int | None = None
    ) -> RepairReport:
        """Rebuild a missing or unreadable control record (protocol/repair.py)."""
        repairer = Repairer(
            reads=self.records,
            files=self.files,
            control=self.control,
            quarantine=self.quarantine,
            sinks=self.sinks,
            failures=self.failures,
            clock=self.clock,
            num_retained=self.config.num_retained,
            roll_forward=self.restorer.finish,
            active_fence=lambda: cascade.active_fence(
                cascade.CascadeStore(self.store), self.pipeline
            ),
        )
        return repairer.repair(dry_run=dry_run, force=force, head=head)

    def garbage_collector(
        self,
        extra_references: Callable[[], Iterable[str]] | None = None,
        *,
        grace: float | None = None,
        tables: SinkTables | None = None,
    ) -> GarbageCollector:
        """GC of this pipeline (protocol/gc.py); `tables`: its table sinks, whose
        snapshots are references. `grace` defaults to the checkpoint timeout or more."""
        return GarbageCollector(
            reads=self.records,
            files=self.files,
            control=self.control,
            sinks=self.sinks,
            clock=self.clock,
            grace=max(self.config.gc_grace, self.config.timeout) if grace is None else grace,
            roll_forward=self.restorer.finish,
            extra_references=extra_references,
            tables=tables,
        )
