"""The checkpoint's records: what the trigger writes, what tasks acknowledge or decline,
and the one outcome that settles a checkpoint."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from batchpoint import codec
from batchpoint.protocol.layout import TASK_ID, TASK_IDS, TaskId
from batchpoint.protocol.metrics import TaskMetrics
from batchpoint.protocol.properties import CheckpointProperties
from batchpoint.protocol.topology import Topology, derived_topology


class CheckpointType(enum.StrEnum):
    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"


class CheckpointStatus(enum.StrEnum):
    PENDING = "PENDING"
    COMPLETED = "COMPLETED"
    ABORTED = "ABORTED"
    # Never stored: what statistics and listings show for a checkpoint whose records
    # cannot be read, so that damage is a row of the history and not an error page.
    UNREADABLE = "UNREADABLE"


class CheckpointFailureReason(enum.Enum):
    """Why a checkpoint was aborted or a trigger refused; each member carries its message
    and whether it counts against `tolerable_failed_checkpoints` (as in Flink)."""

    EXPIRED = ("expired", "the checkpoint expired before all tasks acknowledged it", True)
    DECLINED = ("declined", "a task declined the checkpoint", True)
    SUBSUMED = ("subsumed", "a newer checkpoint completed first", False)
    FINALIZE_FAILED = ("failed", "the checkpoint could not be finalized", True)
    BASE_ABORTED = ("base-aborted", "the checkpoint it builds on was aborted", False)
    RESTORED = ("restored", "a restore superseded the checkpoint", False)
    QUALITY_GATE = ("quality gate", "the state failed the quality gate", True)
    # an abort (a checkpoint a stop-with-savepoint abandoned) and a trigger refusal
    STOPPED = ("stopped", "the pipeline was stopped with a savepoint", False)
    # trigger refusals: never an outcome
    MINIMUM_PAUSE = (
        "min-pause",
        "the minimum pause since the last checkpoint has not passed",
        False,
    )
    TOO_MANY_CONCURRENT = ("max-concurrent", "too many checkpoints are pending", False)
    PIPELINE_FAILED = (
        "pipeline-failed",
        "the pipeline is FAILED: too many failed checkpoints",
        False,
    )
    NO_NEW_INPUT = (
        "no-new-input",
        "no source has new input since the base checkpoint",
        False,
    )
    NEEDS_REPAIR = (
        "needs-repair",
        "a record the decision needs is missing or unreadable",
        False,
    )
    CASCADE = (
        "cascade",
        "a cascade restore of the pipelines it reads from is under way",
        False,
    )
    # a refusal that also aborts the checkpoint its admission took: never counted
    INCOMPATIBLE_DEPLOY = (
        "incompatible-deploy",
        "the code would leave state of the base unrestored or cannot read it",
        False,
    )
    # the trigger failed after its admission (as Flink, a trigger-phase failure is not
    # counted: the same failure before the admission costs nothing either)
    TRIGGER_FAILED = (
        "trigger-failed",
        "the trigger failed after the checkpoint was admitted",
        False,
    )

    def __init__(self, code: str, message: str, counts_as_failure: bool | int) -> None:
        self.code = code
        self.message = message
        self.counts_as_failure = bool(counts_as_failure)


class TaskAcknowledgeResult(enum.StrEnum):
    """Flink's PendingCheckpoint.TaskAcknowledgeResult."""

    SUCCESS = "SUCCESS"
    DUPLICATE = "DUPLICATE"
    UNKNOWN = "UNKNOWN"
    DISCARDED = "DISCARDED"


class DeclineResult(enum.StrEnum):
    ABORTED = "ABORTED"  # this decline aborted the checkpoint
    ALREADY_ABORTED = "ALREADY_ABORTED"
    IGNORED_COMPLETED = "IGNORED_COMPLETED"  # the checkpoint had completed already
    IGNORED_ACKNOWLEDGED = "IGNORED_ACKNOWLEDGED"  # another attempt of the task acked
    UNKNOWN = "UNKNOWN"  # no such checkpoint or task


# The stored names of CheckpointProperties' flags (protocol/properties.py), for readers
# of the JSON. An audited checkpoint (write-audit-publish): once every task acknowledged
# it, only the audit's verdict may complete it (`try_finalize(..., audited=True)`). A
# property rather than a new field, so the record format stays version 1.
AUDIT_PROPERTY = "audit"
#: Set by a savepoint import on the checkpoint it creates.
IMPORTED_FROM_PROPERTY = "imported_from"
#: Set at trigger when the new checkpoint must not share its base's files (the base is
#: held outside the pipeline's retention: a savepoint, or restored without claim); the
#: value says why. Every state is then snapshotted in full.
INDEPENDENT_OF_BASE = "independent_of_base"
#: The changelog chain bound in force at trigger: every attempt of every task of the
#: checkpoint plans its snapshots with it, whatever its own settings say.
CHANGELOG_CHAIN_PROPERTY = "changelog_chain"
#: Handle metadata: the checkpoint that wrote a file an incremental checkpoint shares.
SHARED_FROM_META = "shared_from"
#: Handle metadata: the channel a sink staged by reference (written, and counted, by
#: the upstream operator's task).
ADOPTED_FROM_META = "adopted_from"


#: The stream names of channel files (`channel-<consumer>`): see durable_handles.
CHANNEL_PREFIX = "channel-"


@dataclass(frozen=True)
class FileHandle(codec.Value):
    """A file a checkpoint references: state of one subtask, a channel to a downstream
    operator, or a sink's staged output. `meta` keeps what the writer adds (schema
    fingerprint, subtask, parallelism, ...) so a reader gets it back unchanged."""

    path: str  # key relative to the storage root
    size: int
    sha256: str
    rows: int = 0
    key_group_range: tuple[int, int] | None = codec.field(default=None, omit=None)
    name: str = ""  # the stream: state-<name>, channel-<consumer> or sink
    meta: Mapping[str, Any] = codec.field(extra=True, default_factory=dict, compare=False)


@dataclass(frozen=True)
class PendingCheckpointV1(codec.Value):
    """Version 1: no topology; the barriers keyed by source name."""

    pipeline: str
    checkpoint_id: int
    type: CheckpointType
    base_checkpoint_id: int | None = codec.field(missing=None)
    restore_generation: int = codec.field()
    barrier: Mapping[str, Any] = codec.field()
    base_barrier: Mapping[str, Any] = codec.field()
    expected_tasks: tuple[TaskId, ...] = codec.field(adapter=TASK_IDS)
    trigger_time: float = codec.time()
    deadline: float = codec.time()
    properties: CheckpointProperties = field(default_factory=CheckpointProperties)


def _pending_from_v1(old: PendingCheckpointV1) -> PendingCheckpoint:
    # uids were names then: the barriers' keys are the sources' uids as they are
    return PendingCheckpoint(**{f: getattr(old, f) for f in old.__dataclass_fields__})


@dataclass(frozen=True)
class PendingCheckpoint(codec.Record):
    """What the trigger fixes for the whole life of a checkpoint. From version 2 the
    barriers are keyed by source uid and `topology` records every node by uid, with its
    states' declared schemas (None: a checkpoint of version 1, see `topology_of`)."""

    KIND = "pending-checkpoint"
    VERSION = 2
    READS = {1: codec.Upgrade(PendingCheckpointV1, _pending_from_v1)}

    pipeline: str
    checkpoint_id: int
    type: CheckpointType
    base_checkpoint_id: int | None = codec.field(missing=None)
    restore_generation: int = codec.field()
    barrier: Mapping[str, Any] = codec.field()  # per source: the offsets this epoch reads up to
    base_barrier: Mapping[str, Any] = codec.field()  # per source: the base checkpoint's offsets
    expected_tasks: tuple[TaskId, ...] = codec.field(adapter=TASK_IDS)
    trigger_time: float = codec.time()
    deadline: float = codec.time()
    properties: CheckpointProperties = field(default_factory=CheckpointProperties)
    topology: Topology | None = codec.field(default=None, omit=None)

    def __post_init__(self) -> None:
        if not isinstance(self.properties, CheckpointProperties):  # a flat mapping, given
            object.__setattr__(self, "properties", CheckpointProperties.of(self.properties))

    @property
    def is_savepoint(self) -> bool:
        return self.type is CheckpointType.SAVEPOINT

    def operator_uid(self, name: str) -> str:
        """The uid of the operator or sink called `name` in this checkpoint (its name
        when the checkpoint recorded no topology)."""
        nodes = self.topology.nodes if self.topology is not None else ()
        return next((n.uid for n in nodes if n.name == name and n.kind.value != "source"), name)

    @property
    def requires_audit(self) -> bool:
        """Whether only an audit may complete this checkpoint. An imported savepoint
        copies the properties of the checkpoint it was taken from, which completed (and
        passed its audit, if it had one) back then: importing it is no new audit."""
        return self.properties.audit is True and not self.properties.is_imported


@dataclass(frozen=True)
class AckRecordV1(codec.Value):
    """Version 1: the task's operator was known by its name only."""

    checkpoint_id: int
    task: TaskId = codec.field(adapter=TASK_ID)
    attempt: str
    handles: tuple[FileHandle, ...]
    metrics: TaskMetrics = codec.field(missing=TaskMetrics())
    acked_at: float = codec.time()


def _ack_from_v1(old: AckRecordV1) -> AckRecord:
    return AckRecord(
        old.checkpoint_id, old.task, old.attempt, old.handles, old.metrics, old.acked_at
    )


@dataclass(frozen=True)
class AckRecord(codec.Record):
    """A task's acknowledgement. `operator_uid` (version 2): the identity of the task's
    operator, by which a later checkpoint finds this state whatever the operator is
    called then (version 1: the operator's name)."""

    KIND = "ack"
    VERSION = 2
    READS = {1: codec.Upgrade(AckRecordV1, _ack_from_v1)}

    checkpoint_id: int
    task: TaskId = codec.field(adapter=TASK_ID)
    attempt: str
    handles: tuple[FileHandle, ...]
    metrics: TaskMetrics = codec.field(missing=TaskMetrics())  # acks before metrics: zeros
    acked_at: float = codec.time()
    operator_uid: str = codec.field(default="", required=True)

    def __post_init__(self) -> None:
        if not self.operator_uid:
            object.__setattr__(self, "operator_uid", self.task.operator)

    @property
    def state_size(self) -> int:
        """Bytes this task wrote (Flink's checkpointed data size): a file it references
        but another task wrote (a sink staging its input channel by reference, a base's
        state an incremental checkpoint shares) is counted once, by its writer."""
        return sum(h.size for h in self.written_handles)

    @property
    def full_state_size(self) -> int:
        """Bytes a restore of this task reads: its own files and the shared ones."""
        return sum(h.size for h in self.handles if not h.meta.get(ADOPTED_FROM_META))

    @property
    def written_handles(self) -> tuple[FileHandle, ...]:
        return tuple(
            h
            for h in self.handles
            if not h.meta.get(ADOPTED_FROM_META) and SHARED_FROM_META not in h.meta
        )

    @property
    def rows(self) -> int:
        return sum(h.rows for h in self.handles)


@dataclass(frozen=True)
class DeclineRecord(codec.Record):
    KIND = "decline"
    VERSION = 1

    checkpoint_id: int
    task: TaskId = codec.field(adapter=TASK_ID)
    attempt: str
    reason: str
    declined_at: float = codec.time()


@dataclass(frozen=True)
class CompletedCheckpoint:
    """Flink's CompletedCheckpoint and its `_metadata`: the pending checkpoint plus every
    task's acknowledged attempt and the files it references."""

    pending: PendingCheckpoint
    acks: tuple[AckRecord, ...]
    completed_at: float

    @property
    def checkpoint_id(self) -> int:
        return self.pending.checkpoint_id

    @property
    def handles(self) -> tuple[FileHandle, ...]:
        return tuple(h for ack in self.acks for h in ack.handles)

    @property
    def durable_handles(self) -> tuple[FileHandle, ...]:
        """The files that must outlive the epoch: state and staged sink output. Channel
        files carry rows between the epoch's operators and are garbage once every task
        acknowledged (GC deletes them); a channel file a sink staged by reference is
        durable through the sink's handle."""
        return tuple(h for h in self.handles if not h.name.startswith(CHANNEL_PREFIX))

    @property
    def state_size(self) -> int:
        return sum(ack.state_size for ack in self.acks)

    @property
    def full_state_size(self) -> int:
        return sum(ack.full_state_size for ack in self.acks)

    @property
    def rows(self) -> int:
        return sum(ack.rows for ack in self.acks)

    def ack_for(self, task: TaskId) -> AckRecord | None:
        return next((a for a in self.acks if a.task == task), None)

    @property
    def topology(self) -> Topology:
        """The recorded topology, or for a version-1 checkpoint what its records prove."""
        return topology_of(self.pending, self.acks)


def topology_of(pending: PendingCheckpoint, acks: tuple[AckRecord, ...]) -> Topology:
    if pending.topology is not None:
        return pending.topology
    return derived_topology(pending.barrier, acks, pending.expected_tasks)


def _completed(fields: Mapping[str, Any]) -> bool:
    return fields["status"] is CheckpointStatus.COMPLETED


def _aborted(fields: Mapping[str, Any]) -> bool:
    return fields["status"] is CheckpointStatus.ABORTED


def _a_reason(reason: CheckpointFailureReason | None) -> None:
    if reason is None:
        raise codec.Invalid("unknown failure reason None")


#: A completed checkpoint is stored as its acks: the rest is the outcome's own fields.
_AS_ACKS = codec.Adapter(
    stored=tuple[AckRecord, ...],
    dump=lambda completed: completed.acks,
    load=lambda acks, fields: CompletedCheckpoint(fields["pending"], acks, fields["decided_at"]),
)


@dataclass(frozen=True)
class CheckpointOutcomeV1(codec.Value):
    """Version 1: the pending record and the acks of version 1."""

    status: CheckpointStatus = codec.field(
        choices=(CheckpointStatus.COMPLETED, CheckpointStatus.ABORTED)
    )
    pending: PendingCheckpointV1 = codec.field(key="checkpoint")
    decided_at: float = codec.time()
    acks: tuple[AckRecordV1, ...] | None = codec.field(default=None, when=_completed, required=True)
    reason: CheckpointFailureReason | None = codec.field(
        default=None, by="code", when=_aborted, required=True, check=_a_reason
    )
    message: str = codec.field(default="", when=_aborted)


def _outcome_from_v1(old: CheckpointOutcomeV1) -> CheckpointOutcome:
    pending = _pending_from_v1(old.pending)
    completed = None
    if old.acks is not None:
        acks = tuple(_ack_from_v1(a) for a in old.acks)
        completed = CompletedCheckpoint(pending, acks, old.decided_at)
    return CheckpointOutcome(
        old.status, pending, old.decided_at, completed, old.reason, old.message
    )


@dataclass(frozen=True)
class CheckpointOutcome(codec.Record):
    """The single write-once record that settles a checkpoint: the acks when COMPLETED,
    the reason and message when ABORTED. Version 2 embeds the pending record and the
    acks of version 2."""

    KIND = "checkpoint-outcome"
    VERSION = 2
    READS = {1: codec.Upgrade(CheckpointOutcomeV1, _outcome_from_v1)}

    status: CheckpointStatus = codec.field(
        choices=(CheckpointStatus.COMPLETED, CheckpointStatus.ABORTED)
    )
    pending: PendingCheckpoint = codec.field(key="checkpoint")
    decided_at: float = codec.time()
    completed: CompletedCheckpoint | None = codec.field(
        default=None,
        key="acks",
        adapter=_AS_ACKS,
        when=_completed,
        required=True,
        doc="every task's ack, when the status is COMPLETED",
    )
    reason: CheckpointFailureReason | None = codec.field(
        default=None,
        by="code",
        when=_aborted,
        required=True,
        check=_a_reason,
        doc="why, when the status is ABORTED",
    )
    message: str = codec.field(default="", when=_aborted, doc="when the status is ABORTED")

    @property
    def checkpoint_id(self) -> int:
        return self.pending.checkpoint_id
