"""What a task's ack records about its snapshot (`TaskMetrics`, as Flink's checkpoint
details), and the storage requests its attempt made (`StorageRequests`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from batchpoint import codec


@dataclass(frozen=True)
class StorageRequests(codec.Value):
    """Storage requests by kind, as `storage.request_count.CountingStore` counts them
    (one ObjectStore call one request; see there for what is approximate). Each kind is
    written only when nonzero; a kind a newer release adds is ignored by this one."""

    get: int = codec.field(default=0, omit=0)
    head: int = codec.field(default=0, omit=0)
    put: int = codec.field(default=0, omit=0)  # put, create, replace, upload_file
    list: int = codec.field(default=0, omit=0)
    delete: int = codec.field(default=0, omit=0)
    upload_part: int = codec.field(default=0, omit=0)  # a multipart upload's requests

    @classmethod
    def of(cls, counts: Mapping[str, int]) -> StorageRequests | None:
        """The counts of the kinds this release knows, or None when there are none."""
        known = {f.name: counts[f.name] for f in fields(cls) if counts.get(f.name)}
        return cls(**known) if known else None

    def by_kind(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name)}

    @property
    def total(self) -> int:
        return sum(self.by_kind().values())

    def __add__(self, other: StorageRequests) -> StorageRequests:
        names = [f.name for f in fields(self)]
        return StorageRequests(**{n: getattr(self, n) + getattr(other, n) for n in names})


@dataclass(frozen=True)
class TaskMetrics(codec.Value):
    """What a task's ack records about its snapshot, as Flink's checkpoint details do.

    - sync_ms: from the end of alignment until the operator's output and new state are
      defined (restoring state handles, running the user's function, planning);
    - async_ms: the Spark jobs that compute and write the state, channel and sink files
      (Spark evaluates lazily, so this is where the rows are processed);
    - records_in: rows that reached the task from upstream operators' channels (rows
      read straight from a source are not counted: that would take a Spark job);
    - records_out: rows the task wrote (state, channels, sink);
    - spark_jobs, spark_stages: the Spark jobs the operator's attempt ran and the stages
      they ran (skipped stages left out), counted by its job tag; 0 jobs when it acked
      without Spark (by reference), None when Spark could not say;
    - storage_requests: the requests the subtask's writes made (its Spark task's, or the
      driver's for a subtask written there), None when none were counted.

    The durations and the Spark counts are the operator's, the same for each of its
    subtasks: one Spark job set runs them all; the storage requests are the subtask's
    own, so they add up over the acks. Records without these fields (older acks) read
    as zeros, and without the counts as None (an ack without them is written without
    them, byte for byte as before).
    """

    sync_ms: float = 0.0
    async_ms: float = 0.0
    records_in: int = 0
    records_out: int = 0
    spark_jobs: int | None = codec.field(default=None, omit=None)
    spark_stages: int | None = codec.field(default=None, omit=None)
    storage_requests: StorageRequests | None = codec.field(default=None, omit=None)
