"""What GC keeps for a publish still to come (seed 7738 of the concurrency model's Delta
schedules): a completed checkpoint whose finalize died before its publish may leave the
retained set before it is published (its successor completed on it); the successor's
publish then publishes it too, from its staged sink files, as the unpublished part of
its chain (protocol/publish.py). So those files are references while a retained
checkpoint (or the head) can still publish them: until every sink published the epoch,
or an epoch that descends from it (a publish of it is then refused, `supersedes`).
"""

from __future__ import annotations

from collections.abc import Sequence

from batchpoint.errors import RecordError
from batchpoint.protocol.checkpoint import CheckpointOutcome, CompletedCheckpoint
from batchpoint.protocol.control import ControlRecord
from batchpoint.protocol.reads import CheckpointReads
from batchpoint.protocol.sinks import SinkManifest, staged_output, supersedes

SinkManifests = dict[str, list[SinkManifest]]  # by sink uid


def unpublished_chains(
    reads: CheckpointReads,
    control: ControlRecord,
    roots: Sequence[CheckpointOutcome],
    manifests: Sequence[SinkManifest],
) -> set[str]:
    """The staged sink files a publish of one of `roots` (completed, retained or the
    head) would publish from its chain. Only ancestors whose folder a GC pass may delete
    from (queued or collected) are walked, so the work is the queue's; none for a root
    every sink published (the manifests read after the roots)."""
    swept = [e.checkpoint_id for e in control.discarded] + list(control.collected)
    floor = min(swept, default=None)
    by_sink: SinkManifests = {}
    for m in manifests:
        by_sink.setdefault(m.sink, []).append(m)
    out: set[str] = set()
    seen: set[int] = set()
    for root in sorted(roots, key=lambda o: -o.checkpoint_id):
        if root.completed is None or _published(root.completed, by_sink, manifests):
            continue
        cid = root.pending.base_checkpoint_id
        while floor is not None and cid is not None and cid >= floor and cid not in seen:
            seen.add(cid)
            try:
                outcome = reads.get_outcome(cid)
            except RecordError:
                break  # a publish that reaches it fails there, publishing nothing
            if outcome is None or outcome.completed is None:
                break
            waiting = _waiting(outcome.completed, by_sink)
            if waiting is None:
                break  # every sink published it or a descendant: and so its chain
            out.update(h.path for u in waiting for h in staged_output(outcome.completed, u))
            cid = outcome.pending.base_checkpoint_id
    return out


def _waiting(completed: CompletedCheckpoint, by_sink: SinkManifests) -> list[str] | None:
    """The sinks that staged output in the checkpoint and could still publish it; None
    when it staged some and every one of them published it or a descendant."""
    staged = {a.operator_uid for a in completed.acks if staged_output(completed, a.operator_uid)}
    waiting = [
        uid for uid in sorted(staged)
        if not by_sink.get(uid) or not all(supersedes(m, completed) for m in by_sink[uid])
    ]  # fmt: skip
    return None if staged and not waiting else waiting


def _published(
    completed: CompletedCheckpoint, by_sink: SinkManifests, manifests: Sequence[SinkManifest]
) -> bool:
    """Whether every sink (each with a manifest, each that staged output in it) has
    published the checkpoint or a descendant: its publish then publishes no ancestor."""
    return _waiting(completed, by_sink) is None and all(supersedes(m, completed) for m in manifests)
