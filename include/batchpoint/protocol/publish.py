"""notifyCheckpointComplete: publish a completed checkpoint's sink output, carrying the
restore generation it was decided in.

A publish is allowed only for a checkpoint on the current timeline: one admitted in the
current generation and still pending or retained (not one a stop-with-savepoint
abandoned), or the head and its ancestors (so an imported savepoint is published
only once a restore made it the head). Each manifest write carries that
generation and a manifest already rewound into a newer one refuses it (STALE). If a
restore lands between our control read and our manifest write, we roll its rewind
forward for the sinks we touched, so the late publish never stays visible.

Two rules keep that true when the publisher dies before that roll-forward (invariant
10): it decides only on a control record whose restore, if any, has rewound the sinks
(it rolls one forward and reads again), so it never stamps a manifest with a restore's
generation before that restore rewound it; and a sink's first publish creates its
manifest empty, then reads the control record again before it publishes into it
(`SinkPublisher.publish`'s `confirm`), so a restore that listed the manifests before
the creation refuses the publish, and one after lists the new manifest.

Sinks are published by uid (invariant 17): each target names its uid and its name (a
label); the names the checkpoint and its base recorded for that uid tell where a
release before issue 36 may have kept its manifest (protocol/sink_keys.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from attrs import define

from batchpoint.errors import CheckpointError, RecordError
from batchpoint.protocol.checkpoint import CompletedCheckpoint
from batchpoint.protocol.control import ControlRecord
from batchpoint.protocol.control_store import ControlStore
from batchpoint.protocol.pipeline import OperatorKind
from batchpoint.protocol.ports import RollForward
from batchpoint.protocol.reads import CheckpointReads
from batchpoint.protocol.sink_keys import SinkRef, sink_refs
from batchpoint.protocol.sink_manifest import SinkMode
from batchpoint.protocol.sinks import PublishResult, SinkPublisher
from batchpoint.protocol.timeline import is_stale, on_timeline

log = logging.getLogger(__name__)

#: Restores rolled forward before a publish decides: each round finishes the restore it
#: read, so only restores committing as fast as they are rolled forward exhaust it.
_ROLL_FORWARDS = 8


@dataclass(frozen=True)
class SinkTarget:
    """A sink to publish: its uid, mode, key columns, and name (a label; default: the
    uid)."""

    uid: str
    mode: SinkMode
    key_columns: tuple[str, ...]
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", SinkMode(self.mode))  # "append" reads as APPEND
        object.__setattr__(self, "key_columns", tuple(self.key_columns))


#: For a checkpoint imported from a savepoint of this storage: the id it was taken from
#: (`CheckpointRestorer.alias_of`), whose sink epochs a rewind to it keeps.
AliasOf = Callable[[int], int | None]


@dataclass
class PublishReport:
    published: list[str] = field(default_factory=list)  # "sink@id"
    stale: str = ""  # why nothing was published, when the checkpoint is stale

    @property
    def is_stale(self) -> bool:
        return bool(self.stale)


@define(kw_only=True, slots=False, eq=False)
class CompletionNotifier:
    """notifyCheckpointComplete for one pipeline: its sinks publish what a completed
    checkpoint of the current timeline staged."""

    _reads: CheckpointReads
    _control: ControlStore
    _sinks: SinkPublisher
    _roll_forward: RollForward
    _alias_of: AliasOf
    #: the epoch a checkpoint's output follows: a rewind to a target never published
    #: leaves readers at its nearest published ancestor (`sinks.rewound`)
    _base_of: AliasOf

    def on_timeline(self, control: ControlRecord, checkpoint_id: int) -> bool:
        """Whether a completed checkpoint belongs to the current timeline: admitted in
        this generation and still pending or retained, else an ancestor of the head. A
        checkpoint a stop-with-savepoint abandoned is neither (its COMPLETED, if it won
        the race with the stop's abort, is never published)."""
        outcome = self._reads.get_outcome(checkpoint_id)
        if outcome is None or outcome.completed is None:
            return False
        imported = outcome.pending.properties.is_imported
        kept = control.pending_entry(checkpoint_id) or control.retained_entry(checkpoint_id)
        if (
            on_timeline(outcome.pending.restore_generation, control.restore_generation)
            and not imported
            and kept is not None
        ):
            return True  # every checkpoint admitted in this generation builds on its head
        cid = control.head
        while cid is not None and cid > checkpoint_id:
            try:
                found = self._reads.get_outcome(cid)
            except RecordError:
                return False
            cid = found.pending.base_checkpoint_id if found else None
        return cid == checkpoint_id

    def notify_checkpoint_complete(
        self, checkpoint_id: int, sinks: Iterable[SinkTarget | tuple[str, str, Sequence[str]]]
    ) -> PublishReport:
        """Publish every sink's staged output of a completed checkpoint and of any
        unpublished completed checkpoint it builds on. Idempotent."""
        targets = [t if isinstance(t, SinkTarget) else SinkTarget(*t) for t in sinks]
        report = PublishReport()
        control = self._settled_control()
        if not self.on_timeline(control, checkpoint_id):
            report.stale = (
                f"checkpoint {checkpoint_id} is not on the current timeline (restore "
                f"generation {control.restore_generation}, head {control.head}): not published"
            )
            log.warning("pipeline '%s': %s", self._reads.pipeline, report.stale)
            return report
        generation = control.restore_generation
        refs, chain = self._chain(checkpoint_id, targets)

        def confirm(decided: int = generation) -> bool:  # no restore since the decision
            return not is_stale(decided, self._control.load().restore_generation)

        for at, completed in reversed(list(enumerate(chain))):
            # Oldest first; what the chain says builds on it lets a sink that has a
            # descendant already (GC dropped this one) refuse it.
            newer = [c.checkpoint_id for c in chain[:at]]
            for ref, target in zip(refs, targets, strict=True):
                result = self._sinks.publish(
                    completed, ref, target.mode, target.key_columns,
                    generation=generation, descendants=newer, confirm=confirm,
                )  # fmt: skip
                if result is PublishResult.PUBLISHED:
                    report.published.append(f"{ref.label}@{completed.checkpoint_id}")
                elif result is PublishResult.STALE:
                    report.stale = f"sink {ref.label} moved to a newer restore generation"
        after = self._control.load()
        if is_stale(generation, after.restore_generation) and after.restore is not None:
            # A restore won meanwhile: re-apply its rewind over what we just wrote.
            alias = self._alias_of(after.restore.target)
            for ref in refs:
                target, generation = after.restore.target, after.restore.generation
                self._sinks.rewind(ref, target, generation, alias, self._base_of)
            report.stale = report.stale or "a restore happened while publishing"
        return report

    def _settled_control(self) -> ControlRecord:
        """The control record to decide on: one whose restore, if any, has rewound the
        sinks. Decided in a restore's generation before its rewind, a publish would stamp
        a manifest with that generation and the rewind would skip it as rewound already,
        leaving the epoch it took back visible (invariant 10): rolled forward first."""
        for _ in range(_ROLL_FORWARDS):
            self._roll_forward()
            control = self._control.load()
            if control.restore is None or control.restore.sinks_rewound:
                return control
        raise CheckpointError(
            f"pipeline '{self._reads.pipeline}': restores kept landing while a publish "
            f"rolled them forward ({_ROLL_FORWARDS} times): publish again once they settle"
        )

    def _chain(
        self, checkpoint_id: int, targets: list[SinkTarget]
    ) -> tuple[list[SinkRef], list[CompletedCheckpoint]]:
        """The targets by uid, and the chain to publish. A chain that reaches back past
        the checkpoint (a sink with no manifest under its uid or name) is walked again
        if its checkpoints recorded other names for the targets: where a release before
        issue 36 kept their manifests (adopted on the first write)."""
        declared = [(t.uid, t.name or t.uid) for t in targets]
        refs = sink_refs(declared)
        chain = self._unpublished_chain(checkpoint_id, refs)
        if len(chain) > 1:
            named = sink_refs(declared, [n for c in chain for n in c.topology.nodes])
            if named != refs:
                return named, self._unpublished_chain(checkpoint_id, named)
        return refs, chain

    def _unpublished_chain(
        self, checkpoint_id: int, refs: list[SinkRef]
    ) -> list[CompletedCheckpoint]:
        """The checkpoint and its completed ancestors, newest first, back to the first
        one every sink has published already or did not have yet (a sink added later
        starts at the epoch that added it, and reads no record older than that epoch's
        base: a newer release's among them would fail every epoch)."""
        chain: list[CompletedCheckpoint] = []
        waiting = list(refs)
        cid: int | None = checkpoint_id
        while cid is not None and waiting:
            try:
                outcome = self._reads.get_outcome(cid)
            except RecordError:
                if not chain:
                    raise
                # An ancestor this release cannot read (a newer release's record; seed
                # 20850): a sink that published no epoch up to it started after it and
                # has nothing there; for any other, going on would lose output.
                waiting = [r for r in waiting if self._published_by(r, cid)]
                if waiting:
                    raise
                break
            if outcome is None or outcome.completed is None:
                break
            if chain:
                waiting = [r for r in waiting if _had_sink(outcome.completed, r)]
                if not waiting:
                    break
            chain.append(outcome.completed)
            cid = outcome.pending.base_checkpoint_id
            waiting = [
                r for r in waiting
                if (m := self._sinks.manifest(r)) is None or cid not in m.epochs
            ]  # fmt: skip
        return chain

    def _published_by(self, ref: SinkRef, checkpoint_id: int) -> bool:
        manifest = self._sinks.manifest(ref)
        return manifest is not None and any(e <= checkpoint_id for e in manifest.epochs)


def _had_sink(completed: CompletedCheckpoint, ref: SinkRef) -> bool:
    """Whether the checkpoint's recorded topology has the sink (by uid, or by a name a
    release before uids keyed it by). A topology derived from version-1 records cannot
    tell a sink that staged nothing from no sink: assumed had."""
    recorded = completed.pending.topology
    if recorded is None:
        return True
    # Sinks only (an operator may have the uid or name of a sink added later), and by
    # a legacy name only: the name itself may be another sink's uid, renamed away.
    sinks = recorded.of_kind(OperatorKind.SINK).values()
    return any(n.uid == ref.uid or n.name in ref.legacy for n in sinks)
