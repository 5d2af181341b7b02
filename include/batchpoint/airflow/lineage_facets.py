"""The facets batchpoint's OpenLineage datasets and runs carry: OpenLineage's own schema,
outputStatistics and version facets, built from what the pipeline declares and what
the tasks' acks record, and two facets of batchpoint's (the checkpoint a run belongs
to, how far a checkpoint read a file source).

Every facet's `_schemaURL` is one the OpenLineage client sets, a URL of OpenLineage's
published spec: the standard facets' own schemas, and for batchpoint's two the spec's
`RunFacet` and `DatasetFacet` they extend (their own fields are documented in
docs/openlineage/batchpoint-facets.schema.json, a file that is not served anywhere)."""

from __future__ import annotations

from collections.abc import Iterable

import attr
import pyarrow as pa
from openlineage.client.facet_v2 import (
    DatasetFacet,
    RunFacet,
    dataset_version_dataset,
    output_statistics_output_dataset,
    schema_dataset,
)

from batchpoint.protocol.checkpoint import FileHandle

RUN_FACET = "batchpoint_checkpoint"
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


@attr.define
class SourceBarrierInputFacet(DatasetFacet):
    """Partition -> files covered: how far the checkpoint read a file source."""

    partitions: dict[str, int] = attr.field(factory=dict)


def _schema_fields(fields: Iterable[pa.Field]) -> list[schema_dataset.SchemaDatasetFacetFields]:
    return [
        schema_dataset.SchemaDatasetFacetFields(
            name=f.name,
            type=str(f.type),
            fields=_schema_fields(f.type) if pa.types.is_struct(f.type) else None,
        )
        for f in fields
    ]


def schema_facet(schema: pa.Schema) -> schema_dataset.SchemaDatasetFacet:
    """A declared schema's columns with their Arrow types (a struct's fields nested;
    OpenLineage's schema facet has no nullability)."""
    return schema_dataset.SchemaDatasetFacet(fields=_schema_fields(schema))


def version_facet(version: object) -> dataset_version_dataset.DatasetVersionDatasetFacet:
    return dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(version))


def output_statistics(
    handles: Iterable[FileHandle],
) -> output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet:
    """Rows, bytes and files of the files a task acknowledged for one output."""
    files = list(handles)
    return output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
        rowCount=sum(h.rows for h in files),
        size=sum(h.size for h in files),
        fileCount=len(files),
    )
