"""Table sinks for the layers above: open a sink's table, sync every table sink of a
pipeline after a publish or a restore, read a table as of a checkpoint."""

from __future__ import annotations

from collections.abc import Mapping

from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sinks import SinkPublisher
from batchpoint.storage import ObjectStore, StoreRef
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.catalog import open_catalog
from batchpoint.tables.iceberg import IcebergSinkTable, SyncReport, TableSync


def configured_catalog_uri() -> str | None:
    from batchpoint.settings import read_environment

    return read_environment().table_catalog


def sink_table(
    store: StoreRef | ObjectStore,
    pipeline: str,
    sink: str,
    binding: TableBinding,
    catalog_uri: str | None = None,
) -> IcebergSinkTable:
    store = store.open() if isinstance(store, StoreRef) else store
    uri = catalog_uri if catalog_uri is not None else configured_catalog_uri()
    catalog = open_catalog(binding.catalog, store, uri)
    return IcebergSinkTable(catalog, binding, pipeline, sink, store)


def sync_tables(
    store_ref: StoreRef,
    pipeline: str,
    bindings: Mapping[str, TableBinding],
    catalog_uri: str | None = None,
) -> list[SyncReport]:
    """Bring every table sink's table to its manifest. Idempotent; safe beside other
    syncs, publishes and restores of the pipeline (see tables/iceberg.py)."""
    if not bindings:
        return []
    publisher = SinkPublisher(store_ref.open(), PipelineLayout(pipeline))
    reports = []
    for sink, binding in bindings.items():
        table = sink_table(store_ref, pipeline, sink, binding, catalog_uri)
        reports.append(TableSync(table, lambda s=sink: publisher.manifest(s)).run())
    return reports
