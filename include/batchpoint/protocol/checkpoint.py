"""The checkpoint's records: what the trigger writes, what tasks acknowledge or decline,
and the one outcome that settles a checkpoint."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from batchpoint.errors import CorruptRecord
from batchpoint.protocol import records
from batchpoint.protocol.records import from_iso, to_iso


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

    def __init__(self, code: str, message: str, counts_as_failure: bool | int) -> None:
        self.code = code
        self.message = message
        self.counts_as_failure = bool(counts_as_failure)

    @classmethod
    def from_code(cls, key: str, code: Any) -> CheckpointFailureReason:
        for member in cls:
            if member.code == code:
                return member
        raise CorruptRecord(key, f"unknown failure reason {code!r}")


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


_HANDLE_FIELDS = ("path", "size", "sha256", "rows", "name", "key_group_range")

#: The pending record's property that marks an audited checkpoint (write-audit-publish):
#: once every task acknowledged it, only the audit's verdict may complete it
#: (`CheckpointCoordinator.try_finalize(..., audited=True)`). A property rather than a new
#: field, so that the record format (and every record already stored) stays version 1.
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
class FileHandle:
    """A file a checkpoint references: state of one subtask, a channel to a downstream
    operator, or a sink's staged output. `meta` keeps what the writer adds (schema
    fingerprint, subtask, parallelism, ...) so a reader gets it back unchanged."""

    path: str  # key relative to the storage root
    size: int
    sha256: str
    rows: int = 0
    key_group_range: tuple[int, int] | None = None
    name: str = ""  # the stream: state-<name>, channel-<consumer> or sink
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            **self.meta,
            "path": self.path,
            "size": self.size,
            "sha256": self.sha256,
            "rows": self.rows,
            "name": self.name,
        }
        if self.key_group_range is not None:
            out["key_group_range"] = list(self.key_group_range)
        return out

    @classmethod
    def from_json(cls, key: str, body: Mapping[str, Any]) -> FileHandle:
        kgr = body.get("key_group_range")
        if kgr is not None and (
            not isinstance(kgr, list) or len(kgr) != 2 or not all(isinstance(x, int) for x in kgr)
        ):
            raise CorruptRecord(key, f"bad key_group_range {kgr!r}")
        return cls(
            path=records.field(key, body, "path", str),
            size=records.field(key, body, "size", int),
            sha256=records.field(key, body, "sha256", str),
            rows=int(body.get("rows", 0)),
            key_group_range=(kgr[0], kgr[1]) if kgr else None,
            name=str(body.get("name", "")),
            meta={k: v for k, v in body.items() if k not in _HANDLE_FIELDS},
        )


@dataclass(frozen=True)
class TaskMetrics:
    """What a task's ack records about its snapshot, as Flink's checkpoint details do.

    - sync_ms: from the end of alignment until the operator's output and new state are
      defined (restoring state handles, running the user's function, planning);
    - async_ms: the Spark jobs that compute and write the state, channel and sink files
      (Spark evaluates lazily, so this is where the rows are processed);
    - records_in: rows that reached the task from upstream operators' channels (rows
      read straight from a source are not counted: that would take a Spark job);
    - records_out: rows the task wrote (state, channels, sink).

    Both durations are the operator's, the same for each of its subtasks: one Spark
    job set runs them all. Records without these fields (older acks) read as zeros.
    """

    sync_ms: float = 0.0
    async_ms: float = 0.0
    records_in: int = 0
    records_out: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "sync_ms": self.sync_ms,
            "async_ms": self.async_ms,
            "records_in": self.records_in,
            "records_out": self.records_out,
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any] | None) -> TaskMetrics:
        body = body or {}
        return cls(
            sync_ms=float(body.get("sync_ms", 0.0)),
            async_ms=float(body.get("async_ms", 0.0)),
            records_in=int(body.get("records_in", 0)),
            records_out=int(body.get("records_out", 0)),
        )


@dataclass(frozen=True)
class PendingCheckpoint(records.VersionedRecord):
    """What the trigger fixes for the whole life of a checkpoint."""

    KIND = "pending-checkpoint"
    VERSION = 1

    pipeline: str
    checkpoint_id: int
    type: CheckpointType
    base_checkpoint_id: int | None
    restore_generation: int
    barrier: Mapping[str, Any]  # per source: the offsets this epoch reads up to
    base_barrier: Mapping[str, Any]  # per source: the base checkpoint's offsets
    expected_tasks: tuple[str, ...]
    trigger_time: float
    deadline: float
    properties: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_savepoint(self) -> bool:
        return self.type is CheckpointType.SAVEPOINT

    @property
    def requires_audit(self) -> bool:
        """Whether only an audit may complete this checkpoint. An imported savepoint
        copies the properties of the checkpoint it was taken from, which completed (and
        passed its audit, if it had one) back then: importing it is no new audit."""
        return (
            self.properties.get(AUDIT_PROPERTY) is True
            and IMPORTED_FROM_PROPERTY not in self.properties
        )

    def to_body(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "checkpoint_id": self.checkpoint_id,
            "type": self.type.value,
            "base_checkpoint_id": self.base_checkpoint_id,
            "restore_generation": self.restore_generation,
            "barrier": dict(self.barrier),
            "base_barrier": dict(self.base_barrier),
            "expected_tasks": list(self.expected_tasks),
            "trigger_time": to_iso(self.trigger_time),
            "deadline": to_iso(self.deadline),
            "properties": dict(self.properties),
        }

    @classmethod
    def from_body(cls, key: str, body: Mapping[str, Any]) -> PendingCheckpoint:
        try:
            kind = CheckpointType(body.get("type"))
        except ValueError:
            raise CorruptRecord(key, f"unknown checkpoint type {body.get('type')!r}") from None
        base = body.get("base_checkpoint_id")
        if base is not None and not isinstance(base, int):
            raise CorruptRecord(key, f"bad base_checkpoint_id {base!r}")
        properties = body.get("properties") or {}
        if not isinstance(properties, dict):
            raise CorruptRecord(
                key, f"field 'properties' should be an object, found {properties!r}"
            )
        return cls(
            pipeline=records.field(key, body, "pipeline", str),
            checkpoint_id=records.field(key, body, "checkpoint_id", int),
            type=kind,
            base_checkpoint_id=base,
            restore_generation=records.field(key, body, "restore_generation", int),
            barrier=records.field(key, body, "barrier", dict),
            base_barrier=records.field(key, body, "base_barrier", dict),
            expected_tasks=tuple(records.field(key, body, "expected_tasks", list)),
            trigger_time=from_iso(key, body.get("trigger_time")),
            deadline=from_iso(key, body.get("deadline")),
            properties=properties,
        )


@dataclass(frozen=True)
class AckRecord(records.VersionedRecord):
    KIND = "ack"
    VERSION = 1

    checkpoint_id: int
    task: str
    attempt: str
    handles: tuple[FileHandle, ...]
    metrics: TaskMetrics
    acked_at: float

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

    def to_body(self) -> dict[str, Any]:
        return {
            "checkpoint_id": self.checkpoint_id,
            "task": self.task,
            "attempt": self.attempt,
            "handles": [h.to_json() for h in self.handles],
            "metrics": self.metrics.to_json(),
            "acked_at": to_iso(self.acked_at),
        }

    @classmethod
    def from_body(cls, key: str, body: Mapping[str, Any]) -> AckRecord:
        handles = records.field(key, body, "handles", list)
        return cls(
            checkpoint_id=records.field(key, body, "checkpoint_id", int),
            task=records.field(key, body, "task", str),
            attempt=records.field(key, body, "attempt", str),
            handles=tuple(FileHandle.from_json(key, h) for h in handles),
            metrics=TaskMetrics.from_json(body.get("metrics")),
            acked_at=from_iso(key, body.get("acked_at")),
        )


@dataclass(frozen=True)
class DeclineRecord(records.VersionedRecord):
    KIND = "decline"
    VERSION = 1

    checkpoint_id: int
    task: str
    attempt: str
    reason: str
    declined_at: float

    def to_body(self) -> dict[str, Any]:
        return {
            "checkpoint_id": self.checkpoint_id,
            "task": self.task,
            "attempt": self.attempt,
            "reason": self.reason,
            "declined_at": to_iso(self.declined_at),
        }

    @classmethod
    def from_body(cls, key: str, body: Mapping[str, Any]) -> DeclineRecord:
        return cls(
            checkpoint_id=records.field(key, body, "checkpoint_id", int),
            task=records.field(key, body, "task", str),
            attempt=records.field(key, body, "attempt", str),
            reason=records.field(key, body, "reason", str),
            declined_at=from_iso(key, body.get("declined_at")),
        )


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

    def ack_for(self, task: str) -> AckRecord | None:
        return next((a for a in self.acks if a.task == task), None)


@dataclass(frozen=True)
class CheckpointOutcome(records.VersionedRecord):
    """The single write-once record that settles a checkpoint."""

    KIND = "checkpoint-outcome"
    VERSION = 1

    status: CheckpointStatus  # COMPLETED or ABORTED
    pending: PendingCheckpoint
    decided_at: float
    completed: CompletedCheckpoint | None = None
    reason: CheckpointFailureReason | None = None
    message: str = ""

    @property
    def checkpoint_id(self) -> int:
        return self.pending.checkpoint_id

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "status": self.status.value,
            "checkpoint": self.pending.to_body(),
            "decided_at": to_iso(self.decided_at),
        }
        if self.completed is not None:
            body["acks"] = [a.to_body() for a in self.completed.acks]
        if self.reason is not None:
            body["reason"] = self.reason.code
            body["message"] = self.message
        return body

    @classmethod
    def from_body(cls, key: str, body: Mapping[str, Any]) -> CheckpointOutcome:
        status = body.get("status")
        if status not in (CheckpointStatus.COMPLETED, CheckpointStatus.ABORTED):
            raise CorruptRecord(key, f"bad status {status!r}")
        pending = PendingCheckpoint.from_body(key, records.field(key, body, "checkpoint", dict))
        decided_at = from_iso(key, body.get("decided_at"))
        if status == CheckpointStatus.COMPLETED:
            acks = tuple(
                AckRecord.from_body(key, a) for a in records.field(key, body, "acks", list)
            )
            return cls(
                CheckpointStatus.COMPLETED,
                pending,
                decided_at,
                completed=CompletedCheckpoint(pending, acks, decided_at),
            )
        return cls(
            CheckpointStatus.ABORTED,
            pending,
            decided_at,
            reason=CheckpointFailureReason.from_code(key, body.get("reason")),
            message=str(body.get("message", "")),
        )
