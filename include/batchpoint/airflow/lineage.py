"""OpenLineage for the checkpoint DAG: what each task read and wrote, as datasets.

The OpenLineage provider calls an operator's `get_openlineage_facets_on_start`,
`_on_complete` and `_on_failure` when it is installed and configured; batchpoint's
operators answer from `LineageMixin` with what this module builds from the pipeline's
declarations and, on completion, from the acks of the checkpoint and (finalize) its
table sinks' snapshots: lineage reads nothing else, after the task's work, and a failed
read only leaves the statistics or versions out:

- an operator task reads its inputs (sources, or the channels of its upstream
  operators) and writes a channel to each consumer and each of its states; a sink task
  reads its channels and writes its published location (and its Iceberg table), so
  the jobs connect operator to operator from the sources to the sinks;
- finalize reads every source, with the barrier the checkpoint read up to (a table's
  snapshot id as its `version` facet), and publishes every sink;
- datasets carry the declared schema (`schema`: sources and states), the rows, bytes
  and files the acks record (`outputStatistics`, on completion) and the checkpoint id
  their content is as of (`version`: channels, states, sinks; a table sink's at
  finalize: the snapshot that published the checkpoint);
- the run facet `batchpoint_checkpoint`: pipeline, operator, checkpoint id, type and base.

Names follow OpenLineage's naming spec as the Amazon provider's S3 operators do: an S3
location is namespace `s3://bucket`, name the key path; a local one namespace `file`,
name the absolute path. A channel is `<root>/pipelines/<p>/channels/<producer uid>/
<consumer uid>` and a state `<root>/pipelines/<p>/states/<operator uid>/<state uid>`:
stable names for what each checkpoint writes under its own folder. An Iceberg table is
named by its location, as OpenLineage's Spark integration names Iceberg tables, with its
identifier in a `symlinks` facet; the location is where batchpoint's catalogs put a table
(`<root>/tables/<namespace>/<table>`, pyiceberg's default in that warehouse), not read
from the catalog: a table created elsewhere with a location of its own is still named
by that default.

Imported only inside those methods: OpenLineage is an optional dependency."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.event_v2 import Dataset, OutputDataset
from openlineage.client.facet_v2 import symlinks_dataset

from batchpoint.airflow.lineage_facets import (
    BARRIER_FACET,
    RUN_FACET,
    CheckpointRunFacet,
    SourceBarrierInputFacet,
    output_statistics,
    schema_facet,
    version_facet,
)
from batchpoint.protocol.checkpoint import AckRecord, FileHandle
from batchpoint.runtime.streams import SINK_STREAM, reads_channel, state_stream
from batchpoint.sources.barrier import SourceBarrier
from batchpoint.sources.delta_table import PARTITION as DELTA_PARTITION  # last: version
from batchpoint.sources.iceberg_table import PARTITION as TABLE_PARTITION  # last: snapshot id
from batchpoint.sources.upstream import upstream_of

if TYPE_CHECKING:
    from batchpoint.runtime.api import Pipeline, SinkDef, SourceDef
    from batchpoint.runtime.nodes import OperatorDef
    from batchpoint.storage import StoreRef
    from batchpoint.tables.binding import TableBinding


def location_name(uri: str) -> tuple[str, str]:
    """(namespace, name) of a storage location, by OpenLineage's naming spec."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return "file", parsed.path.rstrip("/") or "/"
    return f"{parsed.scheme}://{parsed.netloc}", parsed.path.strip("/")


def _under(root_uri: str, path: str) -> str:
    return f"{root_uri.rstrip('/')}/{path.strip('/')}" if path.strip("/") else root_uri


def table_dataset(root_uri: str, table: TableBinding, facets: dict[str, Any]) -> Dataset:
    """An Iceberg table at its warehouse location, with its identifier as a symlink; a
    Delta table at its path (what OpenLineage's Spark integration names it by)."""
    if table.is_delta:
        from batchpoint.tables.delta_location import table_key

        namespace, path = location_name(_under(root_uri, table_key(table)))
        return Dataset(namespace=namespace, name=path, facets=facets)
    warehouse = _under(root_uri, "tables")
    # pyiceberg's default location in a warehouse: <warehouse>/<namespace>/<table>
    database, _, name = table.identifier.rpartition(".")
    namespace, path = location_name(_under(warehouse, f"{database}/{name}"))
    symlink = symlinks_dataset.Identifier(namespace=warehouse, name=table.identifier, type="TABLE")
    facets = {**facets, "symlinks": symlinks_dataset.SymlinksDatasetFacet(identifiers=[symlink])}
    return Dataset(namespace=namespace, name=path, facets=facets)


def source_dataset(
    source: SourceDef, root_uri: str, barrier: Mapping[str, Any] | None = None
) -> Dataset:
    """A source's dataset with its declared schema; `barrier` (its offsets in a pending
    checkpoint) adds how far the checkpoint read it."""
    offsets = SourceBarrier.coerce(barrier)
    root = source.location.uri if source.location else root_uri
    facets: dict[str, Any] = {"schema": schema_facet(source.schema)}
    if source.upstream is not None:
        return _upstream_dataset(source, root, offsets, facets)
    if source.table is not None:
        partition = DELTA_PARTITION if source.table.is_delta else TABLE_PARTITION
        snapshot = offsets[partition].last if partition in offsets else None
        if snapshot is not None:
            facets["version"] = version_facet(snapshot)
        return table_dataset(root, source.table, facets)
    namespace, name = location_name(_under(root, source.root))
    if offsets:
        facets[BARRIER_FACET] = SourceBarrierInputFacet(partitions=offsets.counts())
    return Dataset(namespace=namespace, name=name, facets=facets)


def _upstream_dataset(
    source: SourceDef, root: str, offsets: SourceBarrier, facets: dict[str, Any]
) -> Dataset:
    """The upstream sink's own dataset (what its pipeline's finalize reports as output),
    with the upstream checkpoint read up to as its version: the edge between the two."""
    assert source.upstream is not None
    partition, offset = next(iter(offsets.items()), (source.upstream.partition(), None))
    _, sink_uid = upstream_of(partition) or (None, source.upstream.sink)
    path = f"pipelines/{source.upstream.pipeline}/sinks/{sink_uid}"
    namespace, name = location_name(_under(root, path))
    if offset is not None and offset.offset:
        facets = {**facets, "version": version_facet(str(offset.offset))}
    return Dataset(namespace=namespace, name=name, facets=facets)


def _as_of(dataset: Dataset, checkpoint_id: int | None) -> Dataset:
    """`dataset` with the checkpoint its content is as of as its version."""
    facets = dict(dataset.facets or {})
    if checkpoint_id is not None and "version" not in facets:
        facets["version"] = version_facet(checkpoint_id)
    return Dataset(namespace=dataset.namespace, name=dataset.name, facets=facets)


def _output(
    dataset: Dataset, checkpoint_id: int | None, written: Sequence[FileHandle] | None
) -> OutputDataset:
    """`dataset` as a task's output, as of `checkpoint_id`, with the statistics of the
    files `written` (None: not known)."""
    facets = _as_of(dataset, checkpoint_id).facets
    stats = {} if written is None else {"outputStatistics": output_statistics(written)}
    return OutputDataset(dataset.namespace, dataset.name, outputFacets=stats, facets=facets)


def sink_datasets(
    sink: SinkDef, root_uri: str, pipeline: str, table_snapshot: int | None = None
) -> list[Dataset]:
    """A sink's published output (the folder of its manifest) and its Iceberg table,
    with the snapshot it was published as, when known, as the table's version."""
    namespace, name = location_name(_under(root_uri, f"pipelines/{pipeline}/sinks/{sink.uid}"))
    out = [Dataset(namespace=namespace, name=name)]
    if sink.table is not None:
        facets = {} if table_snapshot is None else {"version": version_facet(table_snapshot)}
        out.append(table_dataset(root_uri, sink.table, facets))
    return out


def table_snapshots(pipeline: Pipeline, store: StoreRef, checkpoint_id: int) -> dict[str, int]:
    """Each table sink's (by uid) snapshot that publishes the checkpoint: a catalog read
    (each table's metadata), for finalize's outputs once it has published."""
    from batchpoint.tables.service import sink_table, table_refs

    refs = table_refs((s.uid, s.name, s.table) for s in pipeline.sinks.values())
    return {
        ref.uid: sink_table(store, pipeline.name, ref, binding).snapshot_of(checkpoint_id)
        for ref, binding in refs.items()
    }


def channel_dataset(
    root_uri: str, pipeline: Pipeline, producer: OperatorDef, consumer: OperatorDef | SinkDef
) -> Dataset:
    """The rows `producer` hands `consumer` each epoch."""
    path = f"pipelines/{pipeline.name}/channels/{producer.uid}/{consumer.uid}"
    namespace, name = location_name(_under(root_uri, path))
    return Dataset(namespace=namespace, name=name)


def state_dataset(root_uri: str, pipeline: Pipeline, operator: OperatorDef, state: str) -> Dataset:
    """One keyed state of an operator, with its declared schema."""
    path = f"pipelines/{pipeline.name}/states/{operator.uid}/{operator.state_uid(state)}"
    namespace, name = location_name(_under(root_uri, path))
    return Dataset(
        namespace=namespace, name=name, facets={"schema": schema_facet(operator.states[state])}
    )


class _Written:
    """The files a node's subtasks acknowledged, by output; None for each when the
    acks are not known (a task starting or failing, or acks that could not be read)."""

    def __init__(self, node: str, acks: Iterable[AckRecord] | None) -> None:
        self.known = acks is not None
        self.acks = [a for a in acks or () if a.task.operator == node]

    def channel(self, consumer: str) -> list[FileHandle] | None:
        handles = [h for a in self.acks for h in a.written_handles if reads_channel(h, consumer)]
        return handles if self.known else None

    def stream(self, stream: str, *, adopted: bool = False) -> list[FileHandle] | None:
        """A state's files (written by this task), or a sink's (`adopted`: with the
        channel files it staged by reference, which are its output all the same)."""
        own = (a.handles if adopted else a.written_handles for a in self.acks)
        handles = [h for files in own for h in files if h.name == stream]
        return handles if self.known else None


def _consumers(pipeline: Pipeline, name: str) -> list[OperatorDef | SinkDef]:
    nodes: list[OperatorDef | SinkDef] = [*pipeline.operators.values(), *pipeline.sinks.values()]
    return [n for n in nodes if name in n.inputs]


def _sink_outputs(
    pipeline: Pipeline,
    root_uri: str,
    sink: SinkDef,
    cid: int | None,
    written: _Written,
    table_snapshot: int | None = None,
) -> list[OutputDataset]:
    files = written.stream(SINK_STREAM, adopted=True)
    manifest, *table = sink_datasets(sink, root_uri, pipeline.name, table_snapshot)
    # A table's version is its snapshot (known once finalize committed it), not the
    # checkpoint id: the two name different things and must not pass for each other.
    return [_output(manifest, cid, files), *(_output(t, None, files) for t in table)]


def _node_lineage(
    pipeline: Pipeline,
    root_uri: str,
    node: OperatorDef | SinkDef,
    checkpoint: Mapping[str, Any],
    acks: Iterable[AckRecord] | None,
) -> tuple[list[Dataset], list[OutputDataset]]:
    """What one operator or sink task reads and writes."""
    cid = checkpoint.get("checkpoint_id")
    barrier = checkpoint.get("barrier") or {}
    inputs: list[Dataset] = []
    for name in node.inputs:
        if name in pipeline.sources:
            source = pipeline.sources[name]
            inputs.append(source_dataset(source, root_uri, barrier.get(source.uid)))
        else:
            producer = pipeline.operators[name]
            inputs.append(_as_of(channel_dataset(root_uri, pipeline, producer, node), cid))
    written = _Written(node.name, acks)
    if node.name in pipeline.sinks:
        sink = pipeline.sinks[node.name]
        return inputs, _sink_outputs(pipeline, root_uri, sink, cid, written)
    operator = pipeline.operators[node.name]
    outputs = [
        _output(channel_dataset(root_uri, pipeline, operator, c), cid, written.channel(c.name))
        for c in _consumers(pipeline, node.name)
    ]
    for state in operator.states:
        files = written.stream(state_stream(operator.state_uid(state)))
        outputs.append(_output(state_dataset(root_uri, pipeline, operator, state), cid, files))
    return inputs, outputs


def checkpoint_lineage(
    pipeline: Pipeline,
    root_uri: str,
    *,
    operator: str | None,
    checkpoint: Mapping[str, Any] | None,
    acks: Iterable[AckRecord] | None = None,
    table_snapshots: Mapping[str, int] | None = None,
) -> OperatorLineage:
    """One task's lineage: an operator's or a sink's (`operator`: the pipeline node it
    runs) or the whole checkpoint's (None: every source and sink, as finalize publishes
    them). `checkpoint`: what the trigger returned (checkpoint_id, type,
    base_checkpoint_id), with the `barrier` when known; `acks`: the checkpoint's acks
    when known (the outputs' statistics come from them); `table_snapshots`: sink uid ->
    the snapshot its table published the checkpoint as (finalize's, when known)."""
    snapshots = table_snapshots or {}
    checkpoint = checkpoint or {}
    cid = checkpoint.get("checkpoint_id")
    if operator is None:
        barrier = checkpoint.get("barrier") or {}
        sources = pipeline.sources.values()
        inputs = [source_dataset(s, root_uri, barrier.get(s.uid)) for s in sources]
        outputs = [
            d
            for s in pipeline.sinks.values()
            for d in _sink_outputs(
                pipeline, root_uri, s, cid, _Written(s.name, acks), snapshots.get(s.uid)
            )
        ]
    else:
        node = pipeline.node(operator)
        inputs, outputs = _node_lineage(pipeline, root_uri, node, checkpoint, acks)
    facet = CheckpointRunFacet(
        pipeline=pipeline.name,
        checkpointId=cid,
        operator=operator,
        checkpointType=checkpoint.get("type"),
        baseCheckpointId=checkpoint.get("base_checkpoint_id"),
    )
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets={RUN_FACET: facet})
