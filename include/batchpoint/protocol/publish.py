"""notifyCheckpointComplete: publish a completed checkpoint's sink output, carrying the
restore generation it was decided in.

A publish is allowed only for a checkpoint on the current timeline: one admitted in the
current generation, or the head and its ancestors (so an imported savepoint is published
only once a restore made it the head). Each manifest write carries that
generation and a manifest already rewound into a newer one refuses it (STALE). If a
restore lands between our control read and our manifest write, we roll its rewind
forward for the sinks we touched, so the late publish never stays visible.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from batchpoint.errors import RecordError
from batchpoint.protocol.checkpoint import IMPORTED_FROM_PROPERTY, CompletedCheckpoint
from batchpoint.protocol.control import ControlRecord
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.restorer import CheckpointRestorer
from batchpoint.protocol.sinks import PublishResult, SinkPublisher

log = logging.getLogger(__name__)

SinkTarget = tuple[str, str, Sequence[str]]  # name, mode ("append"/"snapshot"), key columns


@dataclass
class PublishReport:
    published: list[str] = field(default_factory=list)  # "sink@id"
    stale: str = ""  # why nothing was published, when the checkpoint is stale

    @property
    def is_stale(self) -> bool:
        return bool(self.stale)


def on_timeline(c: CheckpointCoordinator, control: ControlRecord, checkpoint_id: int) -> bool:
    """Whether a completed checkpoint belongs to the current timeline."""
    outcome = c.get_outcome(checkpoint_id)
    if outcome is None or outcome.completed is None:
        return False
    imported = IMPORTED_FROM_PROPERTY in outcome.pending.properties
    if outcome.pending.restore_generation == control.restore_generation and not imported:
        return True  # every checkpoint admitted in this generation builds on its head
    cid = control.head
    while cid is not None and cid > checkpoint_id:
        try:
            found = c.get_outcome(cid)
        except RecordError:
            return False
        cid = found.pending.base_checkpoint_id if found else None
    return cid == checkpoint_id


def notify_checkpoint_complete(
    c: CheckpointCoordinator, checkpoint_id: int, sinks: Iterable[SinkTarget]
) -> PublishReport:
    """Publish every sink's staged output of a completed checkpoint and of any
    unpublished completed checkpoint it builds on. Idempotent."""
    sinks = list(sinks)
    report = PublishReport()
    c.finish_restore()
    control = c.control.load()
    if not on_timeline(c, control, checkpoint_id):
        report.stale = (
            f"checkpoint {checkpoint_id} is not on the current timeline (restore generation "
            f"{control.restore_generation}, head {control.head}): not published"
        )
        log.warning("pipeline '%s': %s", c.pipeline, report.stale)
        return report
    publisher = SinkPublisher(c.store, c.layout)
    chain: list[CompletedCheckpoint] = []
    cid: int | None = checkpoint_id
    while cid is not None:
        outcome = c.get_outcome(cid)
        if outcome is None or outcome.completed is None:
            break
        chain.append(outcome.completed)
        cid = outcome.pending.base_checkpoint_id
        if all(
            (m := publisher.manifest(name)) is not None and cid in m.epochs for name, _, _ in sinks
        ):
            break
    generation = control.restore_generation
    for completed in reversed(chain):
        for name, mode, keys in sinks:
            result = publisher.publish(completed, name, mode, keys, generation=generation)
            if result is PublishResult.PUBLISHED:
                report.published.append(f"{name}@{completed.checkpoint_id}")
            elif result is PublishResult.STALE:
                report.stale = f"sink {name} moved to a newer restore generation"
    after = c.control.load()
    if after.restore_generation != generation and after.restore is not None:
        # A restore won meanwhile: re-apply its rewind over what we just wrote.
        alias = CheckpointRestorer(c).alias_of(after.restore.target)
        for name, _, _ in sinks:
            publisher.rewind(name, after.restore.target, after.restore.generation, alias)
        report.stale = report.stale or "a restore happened while publishing"
    return report
