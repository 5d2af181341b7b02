"""Whether a checkpoint's reads of upstream pipelines are still their history.

A checkpoint that read an upstream sink up to checkpoint c stays consistent with the
upstream only while c is on the upstream's timeline. After a restore of the upstream
took c back, restoring the downstream to that checkpoint would bring back results of
output that no longer exists, so the restore passes over it (it is not damaged: it is
not quarantined) and names why."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from batchpoint.errors import BatchpointError
from batchpoint.protocol.checkpoint import PendingCheckpoint
from batchpoint.runtime.api import Pipeline
from batchpoint.sources.upstream import PipelineSinkSource, UpstreamRestored
from batchpoint.storage import ObjectStore


def taken_back(
    pipeline: Pipeline,
    store: ObjectStore,
    pending: PendingCheckpoint,
    as_of: Mapping[str, int] | None = None,
) -> list[str]:
    """Why the checkpoint's reads of its upstreams are not on their timelines (empty:
    they all are, or it has no pipeline source). `as_of`: upstream pipeline -> the
    checkpoint a cascade restores it to, whose timeline counts instead of today's."""
    problems = []
    for name, source in sorted(pipeline.sources.items()):
        if source.upstream is None or source.uid not in pending.barrier:
            continue
        target = (as_of or {}).get(source.upstream.pipeline)
        try:
            files = source.files(store)
            assert isinstance(files, PipelineSinkSource)
            files.verify_barrier(pending.barrier[source.uid], as_of=target)
        except UpstreamRestored as exc:
            problems.append(f"source {name}: {exc}")
    return problems


def reads_check(
    pipeline: Pipeline, store: ObjectStore
) -> Callable[[PendingCheckpoint], str | None] | None:
    """The finalizer's check that a checkpoint still reads only its upstreams' history
    (none for a pipeline that reads no other). An upstream whose records cannot be read
    now is not a reason: the epoch's read was checked, and one pipeline's damage must
    not block another's finalize, settle and GC (invariant 11)."""
    if all(source.upstream is None for source in pipeline.sources.values()):
        return None

    def check(pending: PendingCheckpoint) -> str | None:
        try:
            problems = taken_back(pipeline, store, pending)
        except BatchpointError:
            return None
        return (
            "a restore of a pipeline it reads took back what it read: " + "; ".join(problems)
            if problems
            else None
        )

    return check
