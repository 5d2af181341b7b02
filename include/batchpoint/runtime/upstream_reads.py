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
from batchpoint.protocol.finalizer import ReadsCheck
from batchpoint.protocol.pipeline import OperatorKind
from batchpoint.runtime.api import Pipeline
from batchpoint.sources.upstream import PipelineSinkSource, UpstreamBinding, UpstreamRestored
from batchpoint.storage import ObjectStore

#: One read of another pipeline: the source's name, its uid, its files and the
#: upstream checkpoint whose timeline counts (None: today's).
_Read = tuple[str, str, PipelineSinkSource, int | None]


def taken_back(
    pipeline: Pipeline,
    store: ObjectStore,
    pending: PendingCheckpoint,
    as_of: Mapping[str, int] | None = None,
) -> list[str]:
    """Why the checkpoint's reads of its upstreams are not on their timelines (empty:
    they all are, or it has no pipeline source). `as_of`: upstream pipeline -> the
    checkpoint a cascade restores it to, whose timeline counts instead of today's."""
    reads = []
    for name, source in sorted(pipeline.sources.items()):
        if source.upstream is None:
            continue
        files = source.files(store)
        assert isinstance(files, PipelineSinkSource)
        reads.append((name, source.uid, files, (as_of or {}).get(source.upstream.pipeline)))
    return _off_timeline(pending, reads)


def recorded_taken_back(store: ObjectStore, reader: str, pending: PendingCheckpoint) -> list[str]:
    """`taken_back` without the code: the sources the checkpoint's recorded topology
    says read a pipeline (runtime/deploy.py records the upstream and its sink)."""
    reads: list[_Read] = []
    nodes = pending.topology.nodes if pending.topology is not None else ()
    for node in sorted(nodes, key=lambda n: n.name):
        upstream, sink = node.properties.get("upstream"), node.properties.get("sink")
        if node.kind is OperatorKind.SOURCE and upstream and sink:
            binding = UpstreamBinding(str(upstream), str(sink), reader)
            reads.append((node.name, node.uid, PipelineSinkSource(store, binding), None))
    return _off_timeline(pending, reads)


def _off_timeline(pending: PendingCheckpoint, reads: list[_Read]) -> list[str]:
    problems = []
    for name, uid, files, as_of in reads:
        if uid not in pending.barrier:
            continue
        try:
            files.verify_barrier(pending.barrier[uid], as_of=as_of)
        except UpstreamRestored as exc:
            problems.append(f"source {name}: {exc}")
    return problems


def reads_check(pipeline: Pipeline, store: ObjectStore) -> ReadsCheck | None:
    """The finalizer's check that a checkpoint still reads only its upstreams' history
    (none for a pipeline that reads no other)."""
    if all(source.upstream is None for source in pipeline.sources.values()):
        return None
    return _as_check(lambda pending: taken_back(pipeline, store, pending))


def recorded_reads_check(store: ObjectStore, reader: str) -> ReadsCheck:
    """The same check for a coordinator built without the code (`batchpoint gc`'s
    settle, Airflow's hooks), which finalizes checkpoints whose driver died after
    their acks: it must not complete what an upstream restore took back either."""
    return _as_check(lambda pending: recorded_taken_back(store, reader, pending))


def _as_check(problems_of: Callable[[PendingCheckpoint], list[str]]) -> ReadsCheck:
    """An upstream whose records cannot be read now is not a reason: the epoch's read
    was checked, and one pipeline's damage must not block another's finalize, settle
    and GC (invariant 11)."""

    def check(pending: PendingCheckpoint) -> str | None:
        try:
            problems = problems_of(pending)
        except BatchpointError:
            return None
        return (
            "a restore of a pipeline it reads took back what it read: " + "; ".join(problems)
            if problems
            else None
        )

    return check
