"""`batchpoint lineage`: which checkpoints of which pipelines a checkpoint was computed
from, and which were computed from it, read from the records alone (no code, no Spark).

Upstream: each pipeline source's barrier names the upstream checkpoint the epoch read up
to (sources/upstream.py); its base's barrier, where the read started. Whether that
checkpoint is still the upstream's history is the source's own check
(`PipelineSinkSource.verify_barrier`, the one an epoch makes before it reads), and the
walk goes on into the upstream checkpoint's own reads while the upstream retains it.

Downstream: every retained checkpoint of every other pipeline on the same storage that
reads the pipeline. It was computed from checkpoint N when N is on the timeline of the
checkpoint it read up to (protocol/sink_timeline.py, as the upstream's sink manifest
recorded it for that epoch); without a recorded timeline (the epoch pruned, or published
by a release before timelines) reading past N proves nothing, and is said so. The walk
goes on through the pipelines that read those, in the order they read one another.

Read-only: it writes nothing. What cannot be read is a note, never a refusal."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from batchpoint.errors import BatchpointError, CheckpointError, ConfigError, RecordError
from batchpoint.ops.lineage_values import (
    Derivation,
    DownstreamLineage,
    DownstreamRead,
    ReadState,
    UpstreamLineage,
    UpstreamRead,
)
from batchpoint.ops.pipelines import pipeline_names
from batchpoint.protocol.checkpoint import PendingCheckpoint
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.protocol.sink_manifest import SinkManifest
from batchpoint.protocol.sink_timeline import Timeline, reaches
from batchpoint.sources.errors import SourceOffsetError
from batchpoint.sources.upstream import (
    PipelineSinkSource,
    UpstreamBinding,
    UpstreamPosition,
    UpstreamRestored,
    upstream_of,
)
from batchpoint.storage import ObjectStore

#: A pipeline's history by name (ops.pipelines.open_pipeline, bound to a storage root).
HistoryOf = Callable[[str], PipelineHistory]


@dataclass(frozen=True)
class SourceRead:
    """One pipeline source of a checkpoint: what its base read, what it read."""

    source: str  # the source uid
    pipeline: str
    sink: str
    partition: str
    base: UpstreamPosition
    read: UpstreamPosition
    offsets: Mapping[str, object]  # the barrier of the source, as stored


def source_reads(pending: PendingCheckpoint) -> list[SourceRead]:
    """The checkpoint's reads of other pipelines, by source uid."""
    out = []
    for uid, partitions in sorted(pending.barrier.items()):
        if not isinstance(partitions, Mapping):
            continue
        for partition, offset in sorted(partitions.items()):
            found = upstream_of(partition)
            if found is None:
                continue
            base = pending.base_barrier.get(uid) or {}
            started = {partition: base[partition]} if partition in base else None
            out.append(
                SourceRead(
                    uid,
                    *found,
                    partition,
                    UpstreamPosition.of(started),
                    UpstreamPosition.of({partition: offset}),
                    dict(partitions),
                )
            )
    return out


class LineageRecords:
    """The records a lineage walk reads, each once: histories, checkpoints, manifests."""

    def __init__(self, store: ObjectStore, history_of: HistoryOf) -> None:
        self._store = store
        self._history_of = history_of
        self._histories: dict[str, PipelineHistory] = {}
        self._manifests: dict[tuple[str, str], SinkManifest | None] = {}

    def history(self, pipeline: str) -> PipelineHistory:
        if pipeline not in self._histories:
            self._histories[pipeline] = self._history_of(pipeline)
        return self._histories[pipeline]

    def target(self, pipeline: str, checkpoint_id: int | None) -> tuple[int, PendingCheckpoint]:
        """The checkpoint asked about (None: the head) and its trigger record; an
        unknown pipeline or checkpoint is an error naming it."""
        history = self.history(pipeline)
        if checkpoint_id is None:
            checkpoint_id = history.head.get().checkpoint_id
            if checkpoint_id is None:
                raise CheckpointError(
                    history.lost_control()
                    or f"pipeline '{pipeline}' has no head checkpoint (none completed yet): "
                    "name one with --checkpoint"
                )
        return checkpoint_id, history.get_checkpoint(checkpoint_id)

    def retained(self, pipeline: str) -> list[int]:
        return sorted(self.history(pipeline).completed.retained_ids())

    def source(self, read: SourceRead, reader: str) -> PipelineSinkSource:
        return PipelineSinkSource(self._store, UpstreamBinding(read.pipeline, read.sink, reader))

    def manifest(self, pipeline: str, sink: str) -> SinkManifest | None:
        """The sink's manifest (None: none, or unreadable: no timeline to prove with)."""
        key = (pipeline, sink)
        if key not in self._manifests:
            try:
                binding = UpstreamBinding(pipeline, sink)
                self._manifests[key] = PipelineSinkSource(self._store, binding).manifest(sink)
            except (ConfigError, RecordError, SourceOffsetError):
                self._manifests[key] = None
        return self._manifests[key]


# -- upstream ---------------------------------------------------------------------------


def upstream_lineage(
    store: ObjectStore, history_of: HistoryOf, pipeline: str, checkpoint_id: int | None = None
) -> UpstreamLineage:
    """What checkpoint `checkpoint_id` of `pipeline` (None: its head) read of other
    pipelines, and transitively what those checkpoints read."""
    records = LineageRecords(store, history_of)
    cid, pending = records.target(pipeline, checkpoint_id)
    reads: list[UpstreamRead] = []
    notes: list[str] = []
    _walk_up(records, pipeline, pending, 1, reads, notes, {(pipeline, cid)})
    return UpstreamLineage(pipeline, cid, tuple(reads), tuple(notes))


def _walk_up(
    records: LineageRecords,
    reader: str,
    pending: PendingCheckpoint,
    depth: int,
    reads: list[UpstreamRead],
    notes: list[str],
    seen: set[tuple[str, int]],
) -> None:
    for found in source_reads(pending):
        read = _upstream_read(records, reader, pending.checkpoint_id, found, depth)
        reads.append(read)
        upto = read.read_upto
        if not read.retained or upto is None or (read.pipeline, upto) in seen:
            continue
        seen.add((read.pipeline, upto))
        try:
            upstream = records.history(read.pipeline).get_checkpoint(upto)
        except BatchpointError as exc:
            notes.append(f"{read.pipeline} checkpoint {upto}: its reads cannot be read ({exc})")
            continue
        _walk_up(records, read.pipeline, upstream, depth + 1, reads, notes, seen)


def _upstream_read(
    records: LineageRecords, reader: str, checkpoint_id: int, found: SourceRead, depth: int
) -> UpstreamRead:
    upto = found.read.checkpoint_id
    state, problem = _read_state(records, reader, found)
    retained = None
    if upto is not None:
        try:
            retained = upto in records.retained(found.pipeline)
        except BatchpointError as exc:
            retained, problem = False, problem or str(exc)
    return UpstreamRead(
        reader,
        checkpoint_id,
        depth,
        found.source,
        found.pipeline,
        found.sink,
        found.base.checkpoint_id,
        upto,
        found.read.generation,
        state,
        problem,
        retained,
    )


def _read_state(records: LineageRecords, reader: str, found: SourceRead) -> tuple[ReadState, str]:
    """Whether the read is still on the upstream's timeline: the check the source makes
    before an epoch reads."""
    if found.read.checkpoint_id is None:
        return ReadState.NOTHING, ""
    try:
        records.source(found, reader).verify_barrier(found.offsets)
    except UpstreamRestored as exc:
        return ReadState.TAKEN_BACK, str(exc)
    except BatchpointError as exc:  # not registered, the sink gone, a record unreadable
        return ReadState.UNKNOWN, str(exc)
    return ReadState.KEPT, ""


# -- downstream -------------------------------------------------------------------------


@dataclass(frozen=True)
class Derived:
    """A checkpoint computed from the one asked about (or possibly: UNPROVEN)."""

    generation: int
    derivation: Derivation


def downstream_lineage(
    store: ObjectStore,
    history_of: HistoryOf,
    pipeline: str,
    checkpoint_id: int | None = None,
    pipelines: Sequence[str] | None = None,
) -> DownstreamLineage:
    """The retained checkpoints of the other pipelines (`pipelines`, default every one
    stored) that read `pipeline`, directly or through one another, each with whether it
    was computed from checkpoint `checkpoint_id` (None: the head)."""
    records = LineageRecords(store, history_of)
    cid, pending = records.target(pipeline, checkpoint_id)
    outcome = records.history(pipeline).get_outcome(cid)
    completed = outcome is not None and outcome.completed is not None
    notes: list[str] = []
    if not completed:
        notes.append(f"checkpoint {cid} did not complete: never published, nothing read it")
    names = pipeline_names(store) if pipelines is None else pipelines
    scanned = _scan(records, [p for p in names if p != pipeline], notes)
    # what each pipeline has computed from the checkpoint, filled in reading order
    derived: dict[str, dict[int, Derived]] = {pipeline: {}}
    if completed:
        derived[pipeline][cid] = Derived(pending.restore_generation, Derivation.COMPUTED)
    reads: list[DownstreamRead] = []
    for name, depth in _downstream_order(pipeline, scanned):
        mine = derived.setdefault(name, {})
        for reader in scanned[name]:
            for found in source_reads(reader):
                if found.pipeline not in derived or found.pipeline == name:
                    continue
                read = _downstream_read(records, name, reader, found, depth, derived)
                reads.append(read)
                if read.computed:
                    _keep_best(mine, reader, read.derivation)
    return DownstreamLineage(pipeline, cid, completed, tuple(reads), tuple(notes))


def _keep_best(derived: dict[int, Derived], reader: PendingCheckpoint, found: Derivation) -> None:
    """A checkpoint computed from it through one source, possibly through another:
    computed."""
    known = derived.get(reader.checkpoint_id)
    if known is None or known.derivation is Derivation.UNPROVEN:
        derived[reader.checkpoint_id] = Derived(reader.restore_generation, found)


def _scan(
    records: LineageRecords, pipelines: Sequence[str], notes: list[str]
) -> dict[str, list[PendingCheckpoint]]:
    """Each pipeline's retained checkpoints that read another pipeline, oldest first."""
    out: dict[str, list[PendingCheckpoint]] = {}
    for name in sorted(pipelines):
        try:
            ids = records.retained(name)
        except BatchpointError as exc:
            notes.append(f"pipeline '{name}': its retained checkpoints cannot be read ({exc})")
            continue
        found = []
        for cid in ids:
            try:
                pending = records.history(name).get_checkpoint(cid)
            except BatchpointError as exc:
                notes.append(f"{name} checkpoint {cid}: cannot be read ({exc})")
                continue
            if source_reads(pending):
                found.append(pending)
        if found:
            out[name] = found
    return out


def _downstream_order(
    pipeline: str, scanned: Mapping[str, list[PendingCheckpoint]]
) -> list[tuple[str, int]]:
    """The pipelines downstream of `pipeline`, each after the downstream pipelines it
    reads (what it read is judged first), with its distance from `pipeline`."""
    reads = {
        name: {r.pipeline for p in checkpoints for r in source_reads(p)}
        for name, checkpoints in scanned.items()
    }
    depth: dict[str, int] = {pipeline: 0}
    level = [pipeline]
    while level:  # distances, breadth first
        level = sorted(n for n, ups in reads.items() if n not in depth and ups & set(level))
        depth.update((n, depth[next(iter(reads[n] & depth.keys()))] + 1) for n in level)
    order: list[tuple[str, int]] = []
    placed = {pipeline}
    waiting = sorted((n for n in depth if n != pipeline), key=lambda n: (depth[n], n))
    while waiting:
        # those whose downstream upstreams are all placed; in a cycle, the nearest one
        ready = [n for n in waiting if reads[n] & depth.keys() <= placed] or waiting[:1]
        order += [(n, depth[n]) for n in ready]
        placed.update(ready)
        waiting = [n for n in waiting if n not in placed]
    return order


def _downstream_read(
    records: LineageRecords,
    reader: str,
    pending: PendingCheckpoint,
    found: SourceRead,
    depth: int,
    derived: Mapping[str, Mapping[int, Derived]],
) -> DownstreamRead:
    derivation, via, why = _derivation(records, found, derived[found.pipeline])
    return DownstreamRead(
        reader,
        pending.checkpoint_id,
        depth,
        found.source,
        found.pipeline,
        found.sink,
        found.base.checkpoint_id,
        found.read.checkpoint_id,
        derivation,
        via,
        why,
    )


def _derivation(
    records: LineageRecords, found: SourceRead, candidates: Mapping[int, Derived]
) -> tuple[Derivation, int | None, str]:
    """Whether what `found` read up to was computed from one of the `candidates` (the
    upstream's checkpoints computed from the one asked about), through which, and why."""
    upto, upstream = found.read.checkpoint_id, found.pipeline
    if upto is None:
        return Derivation.NOT_COMPUTED, None, f"it has read nothing of '{upstream}' yet"
    below = sorted((c for c in candidates if c <= upto), reverse=True)
    if not below:
        return Derivation.NOT_COMPUTED, None, f"it read '{upstream}' only up to {upto}"
    timeline = _timeline(records, upstream, found.sink, upto)
    # ids are never reused: reading up to a checkpoint is reading it
    on = [
        c
        for c in below
        if c == upto or (timeline and reaches(timeline, candidates[c].generation, c))
    ]
    if on:
        cid = next((c for c in on if candidates[c].derivation is Derivation.COMPUTED), on[0])
        why = (
            f"it read '{upstream}' up to {cid} itself"
            if cid == upto
            else f"{cid} is on the timeline of {upto}, which it read up to"
        )
        return candidates[cid].derivation, cid, why
    if not timeline:
        return (
            Derivation.UNPROVEN,
            below[0],
            (
                f"it read '{upstream}' up to {upto}, past {below[0]}, and no timeline recorded "
                f"for {upto} says whether {below[0]} is on it"
            ),
        )
    return (
        Derivation.NOT_COMPUTED,
        None,
        (
            f"it read '{upstream}' up to {upto}, whose timeline does not pass through "
            f"{', '.join(map(str, below))} (a restore of '{upstream}' left it behind)"
        ),
    )


def _timeline(records: LineageRecords, pipeline: str, sink: str, checkpoint_id: int) -> Timeline:
    """The timeline the sink's manifest recorded for the epoch (empty: none recorded,
    or the epoch pruned)."""
    manifest = records.manifest(pipeline, sink)
    epoch = None if manifest is None else manifest.epochs.get(checkpoint_id)
    return () if epoch is None else epoch.timeline
