"""OpenLineage for the checkpoint DAG: what each task read and wrote, as datasets.

The OpenLineage provider calls an operator's `get_openlineage_facets_on_start`,
`_on_complete` and `_on_failure` when it is installed and configured; batchpoint's
operators answer from `LineageMixin` with what this module builds from the pipeline's
declarations (nothing is read from storage, so lineage never slows or fails a task):

- inputs: each file source's location (its own root URI, or its folder under the
  pipeline's root) and each Iceberg table source; at finalize, with the barrier the
  checkpoint read up to (a table's snapshot id as its `version` facet);
- outputs: each sink's published location (its manifest's folder) and its Iceberg table;
- the run facet `batchpoint_checkpoint`: pipeline, operator, checkpoint id, type and base.

Names follow OpenLineage's naming spec as the Amazon provider's S3 operators do: an S3
location is namespace `s3://bucket`, name the key path; a local one namespace `file`,
name the absolute path. An Iceberg table is named by its location, as OpenLineage's Spark
integration names Iceberg tables, with its identifier in a `symlinks` facet; the location
is where batchpoint's catalogs put a table (`<root>/tables/<namespace>/<table>`, pyiceberg's
default in that warehouse), not read from the catalog: a table created elsewhere with a
location of its own is still named by that default.

Imported only inside those methods: OpenLineage is an optional dependency."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import attr
from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.event_v2 import Dataset
from openlineage.client.facet_v2 import (
    DatasetFacet,
    RunFacet,
    dataset_version_dataset,
    symlinks_dataset,
)

from batchpoint.sources.barrier import SourceBarrier
from batchpoint.sources.iceberg_table import PARTITION as TABLE_PARTITION  # last: snapshot id

if TYPE_CHECKING:
    from batchpoint.runtime.api import Pipeline, SinkDef, SourceDef
    from batchpoint.tables.binding import TableBinding

#: The facets' JSON schemas: docs/openlineage/batchpoint-facets.schema.json ($defs, by $id)
RUN_FACET_SCHEMA = "urn:batchpoint:openlineage:CheckpointRunFacet:1-0-0"
RUN_FACET = "batchpoint_checkpoint"
BARRIER_FACET_SCHEMA = "urn:batchpoint:openlineage:SourceBarrierInputFacet:1-0-0"
BARRIER_FACET = "batchpoint_barrier"


@attr.define
class CheckpointRunFacet(RunFacet):
    """Which checkpoint (epoch) of which pipeline a task's run belongs to; camelCase, as
    OpenLineage's facets are. The epoch reads from the base checkpoint's barrier up to
    this one's. `checkpointId` is None when the task starts (the trigger's XCom is not
    read then)."""

    pipeline: str
    checkpointId: int | None
    operator: str | None = None
    checkpointType: str | None = None
    baseCheckpointId: int | None = None

    @staticmethod
    def _get_schema() -> str:
        return RUN_FACET_SCHEMA


@attr.define
class SourceBarrierInputFacet(DatasetFacet):
    """Partition -> files covered: how far the checkpoint read a file source."""

    partitions: dict[str, int] = attr.field(factory=dict)

    @staticmethod
    def _get_schema() -> str:
        return BARRIER_FACET_SCHEMA


def location_name(uri: str) -> tuple[str, str]:
    """(namespace, name) of a storage location, by OpenLineage's naming spec."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return "file", parsed.path.rstrip("/") or "/"
    return f"{parsed.scheme}://{parsed.netloc}", parsed.path.strip("/")


def _under(root_uri: str, path: str) -> str:
    return f"{root_uri.rstrip('/')}/{path.strip('/')}" if path.strip("/") else root_uri


def table_dataset(root_uri: str, table: TableBinding, facets: dict[str, Any]) -> Dataset:
    """An Iceberg table at its warehouse location, with its identifier as a symlink."""
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
    """A source's dataset; `barrier` (its offsets in a pending checkpoint) adds how far
    the checkpoint read it."""
    offsets = SourceBarrier.coerce(barrier)
    root = source.location.uri if source.location else root_uri
    facets: dict[str, Any] = {}
    if source.table is not None:
        snapshot = offsets[TABLE_PARTITION].last if TABLE_PARTITION in offsets else None
        if snapshot is not None:
            facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
                datasetVersion=str(snapshot)
            )
        return table_dataset(root, source.table, facets)
    namespace, name = location_name(_under(root, source.root))
    if offsets:
        facets[BARRIER_FACET] = SourceBarrierInputFacet(partitions=offsets.counts())
    return Dataset(namespace=namespace, name=name, facets=facets)


def sink_datasets(sink: SinkDef, root_uri: str, pipeline: str) -> list[Dataset]:
    """A sink's published output (the folder of its manifest) and its Iceberg table."""
    namespace, name = location_name(_under(root_uri, f"pipelines/{pipeline}/sinks/{sink.uid}"))
    out = [Dataset(namespace=namespace, name=name)]
    if sink.table is not None:
        out.append(table_dataset(root_uri, sink.table, {}))
    return out


def checkpoint_lineage(
    pipeline: Pipeline,
    root_uri: str,
    *,
    operator: str | None,
    checkpoint: Mapping[str, Any] | None,
) -> OperatorLineage:
    """One task's lineage: an operator's (`operator`: the pipeline node it runs; its
    source inputs, and its sink if it is one) or the whole checkpoint's (None: every
    source and sink, as finalize publishes them). `checkpoint`: what the trigger
    returned (checkpoint_id, type, base_checkpoint_id), with the `barrier` when known."""
    checkpoint = checkpoint or {}
    barrier = checkpoint.get("barrier") or {}
    if operator is None:
        sources = list(pipeline.sources.values())
        sinks = list(pipeline.sinks.values())
    else:
        node = pipeline.node(operator)
        inputs = getattr(node, "inputs", ())
        sources = [pipeline.sources[n] for n in inputs if n in pipeline.sources]
        sinks = [node] if operator in pipeline.sinks else []
    facet = CheckpointRunFacet(
        pipeline=pipeline.name,
        checkpointId=checkpoint.get("checkpoint_id"),
        operator=operator,
        checkpointType=checkpoint.get("type"),
        baseCheckpointId=checkpoint.get("base_checkpoint_id"),
    )
    return OperatorLineage(
        inputs=[source_dataset(s, root_uri, barrier.get(s.uid)) for s in sources],
        outputs=[d for s in sinks for d in sink_datasets(s, root_uri, pipeline.name)],
        run_facets={RUN_FACET: facet},
    )
