"""A pipeline's table sinks as GC, `verify` and the UI see them (`protocol.sink_tables.
SinkTables`): which storage keys their snapshots read, and whether a table lags its
manifest. Each table is read through its format's adapter (Iceberg, Delta).

An Iceberg table's references come from its own metadata: every snapshot it still lists
(not only the current one, and whatever the manifest says), each snapshot's manifests,
their live data files. A data file's path is the store's URI of a key (`TableSync` adds
the staged files where they are), so the key is the path less the store's prefix; a path
elsewhere (another engine's compaction, under the table's own folder) is no checkpoint's
file. Manifests shared by several snapshots are read once: the cost is the table's
unexpired history, which GC's expiry keeps to the manifest's epochs plus what a lagging
table holds.

A Delta table holds no reference: its versions read copies of the staged files in the
table's own folder (tables/delta.py), never a checkpoint's file, so it holds no
checkpoint folder back. GC still reads it each pass: `expire` deletes the copies only
dropped checkpoints' versions read, and a table that lags or cannot be read is a finding
(the latter with nothing deleted in that pass), as an Iceberg table is.

A table the catalog does not know is no reference holder, unless its metadata is in the
store's warehouse: then the catalog read is not the one the pipeline writes with, and
that is an error (GC deletes nothing), not an empty table. A Delta table is found by its
path alone (no catalog): a folder with no Delta log is no table yet.

Besides its lag, a table's format may tell more (`SinkTableAdapter.problems`): a Delta
table's data commits by another writer, retained checkpoints whose versions a VACUUM
left unreadable (tables/delta_log.py). Findings only: what GC keeps does not hang on them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from batchpoint.errors import BatchpointError
from batchpoint.protocol.findings import Finding
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sink_tables import TableReferences
from batchpoint.protocol.sinks import Sink, SinkManifest, SinkPublisher, SinkRef
from batchpoint.storage import ObjectStore
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.catalog import default_catalog_missing, table_metadata_prefix
from batchpoint.tables.delta_location import table_uri
from batchpoint.tables.plan import lag
from batchpoint.tables.sync import SinkTableAdapter, TableError, error_detail


class PipelineTables:
    """The table sinks of one pipeline (implements `SinkTables` for GC), by uid."""

    def __init__(
        self,
        store: ObjectStore,
        pipeline: str,
        bindings: Mapping[Sink, TableBinding],
        catalog_uri: str | None = None,
    ) -> None:
        self.store = store
        self.pipeline = pipeline
        self.refs = {r.uid: r for r in map(SinkRef.of, bindings)}
        self.bindings = {SinkRef.of(s).uid: b for s, b in bindings.items()}
        self.catalog_uri = catalog_uri
        self._manifests = SinkPublisher(store, PipelineLayout(pipeline))

    # -- SinkTables ---------------------------------------------------------------------

    def expire(self) -> None:
        for found in self._tables():
            if found.adapter is None or found.table is None or found.manifest is None:
                continue
            with _reading(found, self.store):
                found.adapter.expire(found.table, found.manifest)

    def references(self) -> TableReferences:
        keys: set[str] = set()
        findings: list[Finding] = []
        for found in self._tables():
            if found.table is not None:
                with _reading(found, self.store):
                    keys |= found.adapter.referenced_keys(found.table)
            findings += self._findings(found)
        return TableReferences(frozenset(keys), tuple(findings))

    def head(self, sink: str) -> int | None:
        """`sink`: a manifest's key, a uid (or, until adopted, an older name)."""
        uid = next((r.uid for r in self.refs.values() if sink in (r.uid, *r.legacy)), None)
        if uid is None:
            raise TableError(f"sink '{sink}' has no table among {sorted(self.bindings)}")
        for found in self._tables([uid]):
            if found.table is None:
                return None
            with _reading(found, self.store):
                return found.adapter.head(found.table) if found.adapter else None
        return None

    # -- for verify and the UI ----------------------------------------------------------

    def findings(self) -> list[Finding]:
        """Every table that lags its manifest or cannot be read, one finding each, and
        what else its format tells (a Delta table's commits by another writer, versions
        a VACUUM left unreadable). Never raises: a reader shows them beside what it read."""
        out = []
        for sink in self.bindings:
            try:
                for found in self._tables([sink]):
                    out += self._findings(found)
            except BatchpointError as exc:
                out.append(Finding(f"sink {self.refs[sink].label}", str(exc)))
        return out

    # -- reading ------------------------------------------------------------------------

    def _tables(self, sinks: list[str] | None = None) -> Iterator[_SinkTable]:
        """Each table sink with its table and manifest. Raises TableError naming the
        sink when a table cannot be read."""
        from batchpoint.tables.service import configured_catalog_uri, sink_table

        uri = self.catalog_uri if self.catalog_uri is not None else configured_catalog_uri()
        for uid in self.bindings if sinks is None else sinks:
            ref = self.refs[uid]
            found = _SinkTable(ref.label, self.bindings[uid], self._manifests.manifest(ref))
            binding = found.binding
            if binding.is_delta or not default_catalog_missing(binding.catalog, self.store, uri):
                with _reading(found, self.store):
                    found.adapter = sink_table(self.store, self.pipeline, ref, found.binding, uri)
                    found.table = found.adapter.load()
            if found.table is None and not found.binding.is_delta:  # Delta: by path only
                self._check_no_metadata(found)
            yield found

    def _check_no_metadata(self, found: _SinkTable) -> None:
        prefix = table_metadata_prefix(found.binding.identifier)
        if next(iter(self.store.list_sizes(prefix)), None) is not None:
            raise TableError(
                f"sink '{found.sink}': {found.binding} is not in the catalog read here, yet "
                f"its metadata is in storage ({self.store.child(prefix)}): read it through "
                "the catalog the pipeline writes with (BATCHPOINT_TABLE_CATALOG)"
            )

    def _findings(self, found: _SinkTable) -> list[Finding]:
        out = [] if (lagging := self._lag(found)) is None else [lagging]
        if found.adapter is None or found.table is None or found.manifest is None:
            return out
        try:
            with _reading(found, self.store):
                problems = found.adapter.problems(found.table, found.manifest)
        except TableError as exc:  # said beside the lag; never what holds GC back
            problems = [str(exc)]
        return out + [Finding(f"sink {found.sink}", problem) for problem in problems]

    def _lag(self, found: _SinkTable) -> Finding | None:
        if found.manifest is None:
            return None
        position = None
        if found.adapter is not None and found.table is not None:
            with _reading(found, self.store):
                position = found.adapter.position(found.table)
        why = lag(position, found.manifest)
        if why is None:
            return None
        if found.table is None:
            current = found.manifest.current
            why = f"the table does not exist yet, the manifest is at checkpoint {current}"
        # A Delta table has no catalog to find it by: say where it is.
        at = f" at {table_uri(self.store, found.binding)}" if found.binding.is_delta else ""
        return Finding(
            f"sink {found.sink}",
            f"{found.binding}{at} lags its manifest: {why}; the next publish or restore of "
            "the pipeline syncs it, and GC keeps every file its snapshots read meanwhile",
        )


@dataclass
class _SinkTable:
    sink: str  # its label
    binding: TableBinding
    manifest: SinkManifest | None
    adapter: SinkTableAdapter | None = None  # None: its catalog was never made
    table: Any = None  # the format's table; None: it does not exist (yet)


@contextlib.contextmanager
def _reading(found: _SinkTable, store: ObjectStore) -> Iterator[None]:
    """A catalog's or storage's error, said as the sink's."""
    try:
        yield
    except BatchpointError:
        raise
    except Exception as exc:
        # A driver's text may repeat the catalog's URI (never with its password), and
        # delta-rs its storage options (never the store's credentials).
        detail = error_detail(exc, store)
        raise TableError(
            f"sink '{found.sink}': {found.binding} cannot be read ({detail})"
        ) from None
