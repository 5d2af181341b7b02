"""Finalize-and-publish and expire: what completing (or timing out) an epoch's
checkpoint means, for every front end.

The epoch's shape is planned in `epoch_plan.py` (its operator tasks, `epoch_tasks`, are
re-exported here); the Airflow DAGs render the plan and `epoch_executor.py` runs it in
one process (`LocalEpochRunner`, `batchpoint savepoint`), and both settle the checkpoint
with `finalize`, so they never disagree on what completing it means."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from batchpoint.errors import BatchpointError
from batchpoint.ops.epoch_plan import EpochTask, epoch_tasks
from batchpoint.protocol.checkpoint import (
    CheckpointOutcome,
    CheckpointStatus,
)
from batchpoint.protocol.pipeline_ports import CheckpointDecisions
from batchpoint.protocol.settlement import FinalizeWait
from batchpoint.protocol.sink_keys import SinkRef
from batchpoint.runtime.driver import PipelineDriver

__all__ = [
    "EpochTask",
    "Finalized",
    "PublishedSink",
    "epoch_tasks",
    "expire",
    "finalize",
    "published_sinks",
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


@dataclass(frozen=True)
class PublishedSink:
    """A sink that a completed checkpoint published: its uid (its identity) and name."""

    uid: str
    name: str


def published_sinks(driver: PipelineDriver, checkpoint_id: int) -> list[PublishedSink]:
    """The pipeline's sinks whose manifest holds `checkpoint_id`'s epoch: what that
    checkpoint published, whichever call published it (a retried finalize, the cleanup),
    and nothing when a restore overtook it before it was published."""
    out = []
    for sink in driver.pipeline.sinks.values():
        manifest = driver.sinks.manifest(SinkRef(sink.uid, sink.name))
        if manifest is not None and checkpoint_id in manifest.epochs:
            out.append(PublishedSink(sink.uid, sink.name))
    return out


def _retained(coordinator: CheckpointDecisions) -> list[int] | None:
    """The retained ids, for the log of what a completion subsumed: a read that fails
    only leaves that out, it never fails the finalize."""
    try:
        return coordinator.completed.retained_ids()
    except BatchpointError:
        return None


def expire(
    coordinator: CheckpointDecisions, checkpoint_id: int, missing: Iterable[str] | None = None
) -> CheckpointOutcome:
    """Abort the checkpoint as EXPIRED, naming the tasks that did not acknowledge it in
    time (those still missing when `missing` is None), in the coordinator's own words.
    A checkpoint already settled keeps its outcome."""
    return coordinator.expire(checkpoint_id, missing)
