"""Table sinks for the layers above: open a sink's table, sync every table sink of a
pipeline after a publish or a restore, read a table as of a checkpoint. A sink is named
by uid, or by a `SinkRef` (its uid, its name as a label, its older names)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from batchpoint.errors import BatchpointError
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sink_keys import sink_refs
from batchpoint.protocol.sinks import Sink, SinkPins, SinkPublisher, SinkRef
from batchpoint.storage import ObjectStore, StoreRef
from batchpoint.storage.redaction import redact_uri
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.catalog import open_catalog
from batchpoint.tables.iceberg import PIPELINE, ROOT, SINK, IcebergSinkTable
from batchpoint.tables.sync import (
    SinkTableAdapter,
    SyncReport,
    TableError,
    TableSync,
    error_detail,
)

log = logging.getLogger(__name__)


def configured_catalog_uri() -> str | None:
    from batchpoint.settings import read_environment

    return read_environment().table_catalog


def sink_table(
    store: StoreRef | ObjectStore,
    pipeline: str,
    sink: Sink,
    binding: TableBinding,
    catalog_uri: str | None = None,
) -> SinkTableAdapter:
    """The sink's table adapter for its binding's format."""
    store = store.open() if isinstance(store, StoreRef) else store
    if binding.is_delta:
        from batchpoint.tables.delta import DeltaSinkTable

        return DeltaSinkTable(binding, pipeline, sink, store)
    uri = catalog_uri if catalog_uri is not None else configured_catalog_uri()
    catalog = open_catalog(binding.catalog, store, uri)
    return IcebergSinkTable(catalog, binding, pipeline, sink, store)


def table_refs(
    sinks: Iterable[tuple[str, str, TableBinding | None]],
) -> dict[SinkRef, TableBinding]:
    """The table sinks among a pipeline's (uid, name, table) sinks, by ref."""
    sinks = list(sinks)
    refs = sink_refs((uid, name) for uid, name, _ in sinks)
    return {ref: table for ref, (_, _, table) in zip(refs, sinks, strict=True) if table}


def sync_tables(
    store_ref: StoreRef,
    pipeline: str,
    bindings: Mapping[Sink, TableBinding],
    catalog_uri: str | None = None,
) -> list[SyncReport]:
    """Bring every table sink's table to its manifest. Idempotent; safe beside other
    syncs, publishes, restores and GC passes of the pipeline (see tables/iceberg.py).
    A table that cannot be synced (its catalog down) is an error naming the sink (a
    TableError for the catalog's own), raised after the other sinks were synced: it
    lags its manifest until the next sync (a retried finalize, the next publish or
    restore), and GC keeps what its snapshots read meanwhile."""
    if not bindings:
        return []
    store = store_ref.open()
    publisher = SinkPublisher(store, PipelineLayout(pipeline))
    reports = []
    failed: list[BatchpointError] = []
    for sink, binding in bindings.items():
        ref = SinkRef.of(sink)
        try:
            table = sink_table(store_ref, pipeline, ref, binding, catalog_uri)
            read = lambda r=ref: publisher.manifest(r)  # noqa: E731
            reports.append(TableSync(table, read, SinkPins(publisher, ref)).run())
        except BatchpointError as exc:
            failed.append(exc)
        except Exception as exc:  # the catalog's or its driver's: said as the sink's
            # A driver's text may repeat the catalog's URI (never with its password), and
            # delta-rs its storage options (never the store's credentials).
            detail = error_detail(exc, store)
            failed.append(
                TableError(f"sink '{ref.label}': {binding} could not be synced ({detail})")
            )
    if len(failed) == 1:
        raise failed[0]
    if failed:
        raise TableError("; ".join(map(str, failed)))
    return reports


def table_writers(
    store: ObjectStore, pipeline: str, bindings: Iterable[TableBinding]
) -> dict[TableBinding, str]:
    """The sink each existing table names as its writer, for the tables of `pipeline` on
    `store` among `bindings`: what a deploy plan holds a binding against when the base
    checkpoint records no sink of the table (a restore took back the epoch that made
    it). A table that cannot be read is left out: its sync reports it."""
    writers = {}
    for binding in bindings:
        if binding.is_delta:
            found = _delta_writer(store, pipeline, binding)
            if found:
                writers[binding] = found
            continue
        try:
            from pyiceberg.exceptions import NoSuchTableError
        except ImportError:  # the sync says how to install it
            continue
        uri = configured_catalog_uri()
        try:
            table = open_catalog(binding.catalog, store, uri).load_table(binding.identifier)
        except NoSuchTableError:
            continue
        except Exception as exc:  # the catalog's or its driver's; never with its password
            log.info("%s: its writer not read (%s)", binding, redact_uri(str(exc))[:200])
            continue
        props = table.properties
        if props.get(PIPELINE) == pipeline and props.get(ROOT) == store.uri and props.get(SINK):
            writers[binding] = props[SINK]
    return writers


def _delta_writer(store: ObjectStore, pipeline: str, binding: TableBinding) -> str | None:
    try:
        from deltalake import DeltaTable

        from batchpoint.tables.delta_location import storage_options, table_uri

        uri, options = table_uri(store, binding), storage_options(store)
        if not DeltaTable.is_deltatable(uri, storage_options=options):
            return None
        config = DeltaTable(uri, storage_options=options).metadata().configuration
    except ImportError:  # the sync says how to install it
        return None
    except Exception as exc:  # unreadable: its sync reports it
        log.info("%s: its writer not read (%s)", binding, error_detail(exc, store)[:200])
        return None
    if config.get(PIPELINE) == pipeline and config.get(ROOT) == store.uri:
        return config.get(SINK) or None
    return None
