"""A sink's published rows as of a checkpoint (or now), and a table sink's commit
history: what `batchpoint sink show` and `sink history` print. A table sink is read
through its table (time travel by checkpoint id), any other through its manifest.

A sink is its uid (invariant 17): a user names it by its uid, its current name, or a
name a retained checkpoint recorded for it (`protocol/sink_directory.py`); what is
printed shows the current name as the label."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from batchpoint.errors import BatchpointError, RecordError
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.protocol.sink_directory import KnownSink, SinkDirectory
from batchpoint.protocol.topology import Topology
from batchpoint.storage import StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.sync import SinkTableAdapter, TableCommit


@dataclass
class SinkView:
    pipeline: str
    sink: str  # its current name
    uid: str
    checkpoint_id: int | None  # None: as published now
    source: str  # "<format> table <id>, snapshot/version <n>", or "sink manifest"
    rows: pa.Table
    total_rows: int

    def to_json(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "sink": self.sink,
            "uid": self.uid,
            "checkpoint_id": self.checkpoint_id,
            "source": self.source,
            "total_rows": self.total_rows,
            "rows": self.rows.to_pylist(),
        }


def recorded_topologies(coordinator: PipelineHistory, *, pending: bool = True) -> list[Topology]:
    """What the pipeline's checkpoints recorded, oldest first: the retained ones, then
    (with `pending`) the pending ones, triggered by the newest code."""
    out = []
    for cid in sorted(coordinator.completed.retained_ids()):
        try:
            outcome = coordinator.get_outcome(cid)
        except RecordError:
            # a damaged record, or a newer release's: it only names sinks, which the
            # registered spec and the other checkpoints still do (integrity reports it)
            continue
        if outcome is not None and outcome.completed is not None:
            out.append(outcome.completed.topology)
    if pending:
        newest = sorted(coordinator.pending_checkpoints(), key=lambda p: p.checkpoint_id)
        out += [p.topology for p in newest if p.topology is not None]
    return out


def head_topology(coordinator: PipelineHistory) -> Topology | None:
    """What the head checkpoint recorded (None: no head, or its record unreadable)."""
    head = coordinator.head.get().checkpoint_id
    if head is None:
        return None
    try:
        outcome = coordinator.get_outcome(head)
    except RecordError:
        return None
    return outcome.completed.topology if outcome and outcome.completed else None


def sink_directory(
    coordinator: PipelineHistory,
    *,
    pending: bool = True,
    names: bool = True,
    published: bool = False,
) -> SinkDirectory:
    """The sinks of the spec the pipeline registered (no code needed) and of its
    checkpoints (`pending`: the pending ones' too); raises, naming the pipeline, when
    none is registered. `names`: resolve names as the head has them too (one more
    read; a caller that only lists the sinks needs none). `published`: also every sink
    whose manifest still stands, as the checkpoint it shows recorded it (a sink a
    deploy dropped, which no retained checkpoint has any more)."""
    spec = coordinator.load_spec().operators
    recorded = recorded_topologies(coordinator, pending=pending)
    if published:
        known = {sink.ref.uid for sink in SinkDirectory(spec, recorded).sinks}
        recorded = [*published_topologies(coordinator, known), *recorded]  # older first
    head = head_topology(coordinator) if names else None
    return SinkDirectory(spec, recorded, head)


def published_topologies(coordinator: PipelineHistory, known: set[str]) -> list[Topology]:
    """What the checkpoints that the stored manifests of sinks not in `known` show now
    recorded. Their records stay while the manifest holds their files (GC prunes no
    history whose data is referenced), and a manifest always keeps the epoch it shows;
    an unreadable one raises (RecordError)."""
    out = []
    # One listing; a manifest read only for a sink the caller does not know (normally
    # none: GC asks this on every pass, and reads every manifest itself).
    for key in coordinator.sinks.sink_names():
        if key in known or (manifest := coordinator.sinks.manifest(key)) is None:
            continue
        if manifest.sink in known or manifest.moved_to is not None or manifest.current is None:
            continue
        outcome = coordinator.get_outcome(manifest.current)
        if outcome is not None and outcome.completed is not None:
            out.append(outcome.completed.topology)
    return out


def find_sink(coordinator: PipelineHistory, sink: str) -> KnownSink:
    """The sink `sink` names (a uid, a name, a recorded earlier name); an unknown one is
    an error naming the pipeline's sinks."""
    directory = sink_directory(coordinator)
    found = directory.find(sink)
    if found is None:
        raise BatchpointError(
            f"pipeline '{coordinator.pipeline}' has no sink '{sink}' "
            f"(sinks: {', '.join(directory.labels()) or 'none'})"
        )
    return found


def _table(
    coordinator: PipelineHistory, store_ref: StoreRef, sink: KnownSink
) -> tuple[SinkTableAdapter, TableBinding]:
    from batchpoint.tables.service import sink_table

    binding = TableBinding.from_properties(sink.properties)
    if binding is None:
        raise BatchpointError(
            f"sink '{sink.ref.label}' of '{coordinator.pipeline}' is not a table sink"
        )
    return sink_table(store_ref, coordinator.pipeline, sink.ref, binding), binding


def show_sink(
    coordinator: PipelineHistory,
    store_ref: StoreRef,
    sink: str,
    checkpoint_id: int | None = None,
    limit: int | None = None,
) -> SinkView:
    found = find_sink(coordinator, sink)
    try:
        rows, source = _published_rows(coordinator, store_ref, found, checkpoint_id)
    except pa.ArrowException as exc:  # damage is a finding, not a traceback (invariant 11)
        raise BatchpointError(
            f"sink '{found.ref.label}' of '{coordinator.pipeline}': a published file cannot "
            f"be read ({exc}); `batchpoint verify` names the checkpoint's damaged files"
        ) from None
    total = rows.num_rows
    if rows.num_rows and rows.column_names:
        rows = rows.sort_by([(rows.column_names[0], "ascending")])
    if limit is not None:
        rows = rows.slice(0, limit)
    return SinkView(
        coordinator.pipeline, found.ref.label, found.uid, checkpoint_id, source, rows, total
    )


def _published_rows(
    coordinator: PipelineHistory, store_ref: StoreRef, found: KnownSink, checkpoint_id: int | None
) -> tuple[pa.Table, str]:
    """The rows the sink published as of `checkpoint_id` (None: now), and from where."""
    if TableBinding.from_properties(found.properties) is None:
        return coordinator.sinks.read_table(found.ref, checkpoint_id), "sink manifest"
    table, binding = _table(coordinator, store_ref, found)
    snapshot = table.snapshot_of(checkpoint_id) if checkpoint_id is not None else None
    at = f", {table.commit_noun} {snapshot}" if snapshot is not None else ""
    return table.read(checkpoint_id), f"{binding}{at}"


@dataclass
class SinkHistory:
    pipeline: str
    sink: str  # its current name
    uid: str
    commits: list[TableCommit]
    noun: str = "snapshot"  # what the format calls a commit: Delta's "version"


def sink_history(
    coordinator: PipelineHistory, store_ref: StoreRef, sink: str | KnownSink
) -> SinkHistory:
    """The table commits of sink `sink`: a name or uid to find, or a sink found already
    (looked up again by its uid, a declared sink of that name would win)."""
    found = sink if isinstance(sink, KnownSink) else find_sink(coordinator, sink)
    table = _table(coordinator, store_ref, found)[0]
    commits = table.history()
    return SinkHistory(coordinator.pipeline, found.ref.label, found.uid, commits, table.commit_noun)
