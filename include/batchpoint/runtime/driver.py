"""The coordinator's side of an epoch, outside any scheduler: the graph in force (and
rescaling it), trigger (capturing every source's barrier), publish and the table sinks'
sync. A restore is planned and applied by runtime/restore.py (`RestorePlanner`,
`restore_checkpoint`): the one restore path. The use cases built on it
(finalize-and-publish, settle a run, gc, ...) are in `batchpoint.ops`."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from batchpoint.errors import (
    CheckpointError,
    CheckpointNotFound,
    CorruptRecord,
    DeployRefused,
    RestoreRefused,
)
from batchpoint.protocol.checkpoint import (
    CheckpointType,
    CompletedCheckpoint,
    PendingCheckpoint,
)
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.control import ControlUnreadable
from batchpoint.protocol.coordinator import CheckpointCoordinator, Clock
from batchpoint.protocol.decider import base_of
from batchpoint.protocol.deploy_plan import DeployPlan
from batchpoint.protocol.pipeline import OperatorKind, OperatorSpec, PipelineSpec
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.protocol.publish import SinkTarget
from batchpoint.protocol.restore_candidates import cannot_restore
from batchpoint.runtime.api import OperatorDef, Pipeline, SinkDef
from batchpoint.runtime.deploy import BaseCheck, code_topology, completed_checkpoint, plan_on
from batchpoint.runtime.upstream_reads import reads_check
from batchpoint.storage import ObjectStore, StoreRef

if TYPE_CHECKING:
    from batchpoint.tables.sync import SyncReport


_log = logging.getLogger(__name__)


def in_force(stored: PipelineSpec | None, pipeline: Pipeline) -> dict[str, int]:
    """Per operator and sink of `pipeline` that `stored` knows: the parallelism in force
    (see PipelineDriver.current_spec), keyed by the code's names."""
    out = {}
    for op in stored.operators if stored is not None else ():
        node = _code_node(pipeline, op)
        if node is None:
            continue
        recorded = op.code_parallelism if op.code_parallelism is not None else op.parallelism
        out[node.name] = node.parallelism if node.parallelism != recorded else op.parallelism
    return out


def _code_node(pipeline: Pipeline, op: OperatorSpec) -> OperatorDef | SinkDef | None:
    """The operator or sink of the code that a stored spec's entry is: the one of its
    kind with its uid. A spec registered before uids were recorded names its nodes: by
    name, else the one renamed with its uid kept (a uid defaulted to the name the node
    had when it was recorded)."""
    table: Mapping[str, OperatorDef | SinkDef]
    if op.kind is OperatorKind.OPERATOR:
        table = pipeline.operators
    elif op.kind is OperatorKind.SINK:
        table = pipeline.sinks
    else:
        return None
    if op.uid is not None:
        return next((n for n in table.values() if n.uid == op.uid), None)
    if op.name in table:
        return table[op.name]
    return next((n for n in table.values() if n.uid == op.name), None)


class PipelineDriver:
    def __init__(
        self,
        pipeline: Pipeline,
        store_ref: StoreRef,
        config: CheckpointConfig | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.pipeline = pipeline
        self.store_ref = store_ref
        self.store = store_ref.open()
        self.config = config or CheckpointConfig()
        self.coordinator = CheckpointCoordinator(
            self.store, pipeline.name, self.config, clock, reads_check(pipeline, self.store)
        )
        self.sinks = self.coordinator.sinks
        self.last_plan: DeployPlan | None = None  # the deploy plan of the last trigger

    # -- the graph in force ---------------------------------------------------------------

    def current_spec(self) -> PipelineSpec:
        """The pipeline from code, at the parallelism in force: per operator and sink,
        the code's when it differs from the code's value recorded at the last
        registration (a deploy changed it: the next checkpoint rescales by key group),
        else the effective one recorded (a rescaling restore's, kept until the code
        changes). A spec registered before the code's value was recorded counts its
        effective parallelism as the code's. A corrupt one counts as none (the code's
        parallelism, a rescale by key group, never a loss of state): the next trigger
        registers it again, so the pipeline mends itself; a warning names it."""
        try:
            stored = self.coordinator.stored_spec()
        except CorruptRecord as exc:
            _log.warning(
                "%s; the code's parallelism is in force and the next checkpoint registers "
                "the spec again",
                exc.summary,
            )
            stored = None
        return self.pipeline.spec(in_force(stored, self.pipeline))

    def rescale(self, parallelism: Mapping[str, int]) -> PipelineSpec:
        current = {op.name: op.parallelism for op in self.current_spec().operators if op.has_tasks}
        spec = self.pipeline.spec({**current, **parallelism})
        self.coordinator.register(spec)
        return spec

    # -- trigger --------------------------------------------------------------------------

    def capture_barrier(self) -> dict[str, Any]:
        barrier = {}
        for source in self.pipeline.sources.values():
            # keyed by uid: a source renamed with its uid kept goes on from its offsets
            barrier[source.uid] = source.files(self.store).capture_barrier().to_json()
        return barrier

    def trigger(
        self,
        checkpoint_type: CheckpointType = CheckpointType.CHECKPOINT,
        properties: CheckpointProperties | None = None,
        timeout: float | None = None,
        *,
        allow_non_restored_state: bool = False,
    ) -> PendingCheckpoint:
        """Admit a checkpoint of the code in force. The deploy is judged against the
        base the admission chose (`BaseCheck`, protocol/deploy_plan.py): a refused one
        aborts the admitted checkpoint, registers nothing and runs no Spark job
        (TriggerRefused INCOMPATIBLE_DEPLOY). The plan made is `last_plan`."""
        spec = self.current_spec()
        check = self._base_check(spec, allow_non_restored_state)
        try:
            return self.coordinator.trigger(
                self.capture_barrier,
                checkpoint_type=checkpoint_type,
                properties=properties,
                timeout=timeout,
                spec=spec,
                topology=code_topology(self.pipeline, spec),
                check_base=check,
            )
        finally:
            self.last_plan = check.plan

    def _base_check(self, spec: PipelineSpec, allow_non_restored_state: bool) -> BaseCheck:
        """The trigger's deploy check, allowing what it allows: a restore that allowed
        non-restored state allows it on its target, the base of its first trigger."""
        allow: dict[int, bool] | bool = allow_non_restored_state
        if not allow_non_restored_state and (target := self._restored_allowing()) is not None:
            allow = {target: True}
        return BaseCheck(self.store, self.pipeline, spec, allow_non_restored_state=allow)

    def _restored_allowing(self) -> int | None:
        """The target of the last restore when it allowed non-restored state."""
        try:
            control = self.coordinator.control_record()
        except ControlUnreadable:
            return None  # the trigger refuses it itself (NEEDS_REPAIR), naming the damage
        restore = control.restore if control is not None else None
        if restore is not None and restore.allow_non_restored_state:
            return restore.target
        return None

    def plan(
        self, checkpoint_id: int | None = None, *, allow_non_restored_state: bool = False
    ) -> DeployPlan:
        """The deploy plan of the code on checkpoint `checkpoint_id`, default the base
        the next trigger builds on (`_next_plan`: the trigger's own decision). A named
        checkpoint is a restore's plan: read as the restore reads its candidates (a
        quarantined or unrestorable one is refused with the restore's reason,
        RestoreRefused), and only `allow_non_restored_state` allows."""
        if checkpoint_id is None:
            return self._next_plan(allow_non_restored_state)
        return plan_on(
            self.pipeline,
            self.store,
            self._restorable(checkpoint_id),
            self.current_spec(),
            allow_non_restored_state=allow_non_restored_state,
        )

    def _next_plan(self, allow_non_restored_state: bool) -> DeployPlan:
        """The plan the next trigger makes: on the base its admission would choose
        (`base_of`: the newest checkpoint still pending, else the head), read and judged
        by the trigger's own functions, so that the plan and the trigger never disagree
        (invariant 18). Nothing is settled first, as the trigger does: a plan only reads."""
        control = self.coordinator.control_record()
        if control is None and (lost := self.coordinator.lost_control()):
            raise CheckpointError(lost)  # not "nothing stored": every state would start empty
        check = self._base_check(self.current_spec(), allow_non_restored_state)
        # the trigger's reading of its base (completed, pending or unreadable)
        base = self.coordinator.checkpoint_trigger.deploy_base(
            base_of(control) if control is not None else None
        )
        problems = check(base)
        if check.plan is None and problems:  # its record cannot be read: damage, not a plan
            raise CheckpointError(f"pipeline '{self.pipeline.name}': {'; '.join(problems)}")
        pending = base.checkpoint_id is not None and base.completed is None
        # None: a pending base that recorded no topology (an older release's), which
        # the trigger lets through as its own trigger judged the code
        plan = check.plan or DeployPlan((), base.checkpoint_id, recorded=False)
        return replace(plan, pending=pending)

    def _restorable(self, checkpoint_id: int) -> CompletedCheckpoint:
        """A named checkpoint as a restore reads it (protocol/restore_candidates.py):
        retained, not quarantined, its outcome readable; else the restore's refusal.
        One never completed is a mistake in the name (CheckpointNotFound)."""
        candidates = self.coordinator.restorer.candidates
        try:
            candidates.ids(checkpoint_id)
        except RestoreRefused:
            if completed_checkpoint(self.coordinator, checkpoint_id) is None:
                raise CheckpointNotFound(
                    f"pipeline '{self.pipeline.name}' has no completed checkpoint {checkpoint_id}"
                ) from None
            raise
        examined = candidates.read(checkpoint_id)
        if examined.completed is None or not examined.restorable:
            raise cannot_restore(self.pipeline.name, checkpoint_id, examined.problem)
        return examined.completed

    # -- publish ---------------------------------------------------------------

    def notify_complete(self, checkpoint_id: int) -> list[str]:
        """Publish every sink's staged output of a completed checkpoint and of any
        unpublished completed checkpoint it builds on. Idempotent; a checkpoint a
        restore abandoned is not published (logged)."""
        sinks = [
            SinkTarget(s.uid, s.mode, s.key_columns, s.name) for s in self.pipeline.sinks.values()
        ]
        published = self.coordinator.notify_checkpoint_complete(checkpoint_id, sinks).published
        self.sync_tables()
        return published

    def sync_tables(self) -> list[SyncReport]:
        """Bring the table sinks' tables to their manifests (after a publish, which a
        restore ends with; idempotent): one table commit per published checkpoint."""
        if not any(s.table for s in self.pipeline.sinks.values()):
            return []
        from batchpoint.tables.service import sync_tables, table_refs

        sinks = [(s.uid, s.name, s.table) for s in self.pipeline.sinks.values()]
        return sync_tables(self.store_ref, self.pipeline.name, table_refs(sinks))

    # -- a restore's deploy check ---------------------------------------------------

    def check_deploy(
        self,
        completed: CompletedCheckpoint,
        parallelism: Mapping[str, int] | None = None,
        allow_non_restored_state: bool = False,
        store: ObjectStore | None = None,
    ) -> DeployPlan:
        """The plan of the code on `completed` (a checkpoint or a savepoint's, whose
        files are in `store`: default the pipeline's), or DeployRefused naming each
        problem and how to allow it: what a restore (`RestorePlanner.apply`) checks
        before it imports or moves anything."""
        checkpoint_id = completed.checkpoint_id
        spec = self.current_spec()
        if parallelism:
            spec = spec.with_parallelism(parallelism)
        plan = plan_on(
            self.pipeline,
            store or self.store,
            completed,
            spec,
            allow_non_restored_state=allow_non_restored_state,
            tables=self.store,
        )
        self.last_plan = plan
        if not plan.deployable:
            raise DeployRefused(
                f"pipeline '{self.pipeline.name}': restoring checkpoint {checkpoint_id} into "
                f"this code is refused: {'; '.join(plan.problems)}",
                plan,
            )
        return plan
