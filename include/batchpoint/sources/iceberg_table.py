"""An Apache Iceberg table read incrementally as a source (pyiceberg).

The barrier is the table's current snapshot at trigger time, recorded as the one
partition `snapshots` whose `last` is the snapshot id, whose offset is the snapshot's
sequence number (it only grows, whatever snapshots are expired) and whose digest records
the table's uuid, what the offset counts and the schema its files are read as
(`TableMark`). A barrier of an earlier release has no digest and its offset is the
snapshot's depth (its ancestors still in the metadata), which expiring old snapshots
shrinks: such offsets are read alike (only `last` says where an epoch reads) and are not
compared (`offsets_ordered`); a format-1 table, without sequence numbers, still counts
depth. An epoch reads the data files the snapshots after its base checkpoint's snapshot
added, up to its own: each appended row once. A table that was overwritten or had rows
deleted since the base, whose base snapshot has been expired or is no longer an ancestor
(a rollback), or that was dropped and created anew (another uuid, or no snapshot at all)
cannot be read incrementally: the epoch stops with SourceOffsetError saying which, as it
does for a file source whose files changed.

Data files are read by Iceberg field id, as Iceberg's own readers do: a column renamed
since a file was written is read under its new name, one dropped and re-added under the
same name reads as nulls from the files written before, and two columns swapped by
renames keep their values. The driver puts the barrier schema's field ids, by name, in
each split (`SourceSplit.values`), so executors need only the files.

With `changes=True` (a key declared), a table that another engine overwrites or merges
into is read as its changes instead, each row with its `_row_kind` as a pipeline
source's (sources/upstream.py): appends since the base as inserts, and across an
overwrite or delete the difference between the base snapshot's content and the
barrier's, keyed by the source's key. pyiceberg (0.12) has no changelog scan, so this is
batchpoint's own comparison of the two snapshots' data files; a snapshot whose rows are
deleted through delete files (merge-on-read) is not supported and stops the epoch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from batchpoint.errors import ConfigError
from batchpoint.protocol.sink_manifest import SinkMode
from batchpoint.sources.barrier import PartitionOffset, SourceBarrier
from batchpoint.sources.errors import SourceDataError, SourceOffsetError
from batchpoint.sources.files import SourceSplit
from batchpoint.sources.readers import select_declared
from batchpoint.sources.upstream import UpstreamRead
from batchpoint.storage import ObjectStore
from batchpoint.storage.redaction import scrub
from batchpoint.tables.binding import TableBinding

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

PARTITION = "snapshots"
#: What a barrier's offset counts: the snapshot's sequence number, or (format-1 tables,
#: and every barrier of an earlier release) its depth, which expiry shrinks.
SEQUENCE, DEPTH = "sequence", "depth"
#: Where a Parquet file written for Iceberg keeps a column's field id.
FIELD_ID = b"PARQUET:field_id"


@dataclass(frozen=True)
class TableMark:
    """What a barrier records of the table beside its snapshot, as the offset's digest
    (`table=<uuid>;offset=<counts>;schema=<id>`): the table's uuid, as Delta's source
    records its table id, since a table dropped and created anew has another; what the
    offset counts; the schema the epoch reads the files as (a replay reads them alike,
    whatever the schema became since)."""

    table: str | None = None
    counts: str | None = None  # None: not an offset this source wrote
    schema: int | None = None

    def encode(self) -> str:
        return f"table={self.table};offset={self.counts};schema={self.schema}"

    @classmethod
    def of(cls, offset: PartitionOffset | None) -> TableMark:
        if offset is None or offset.digest is None:
            # an earlier release's barrier: a snapshot's offset was its depth
            return cls(counts=DEPTH if offset is not None and offset.last else None)
        fields = dict(part.partition("=")[::2] for part in offset.digest.split(";"))
        if fields.get("offset") not in (SEQUENCE, DEPTH):
            return cls()
        schema = fields.get("schema", "")
        return cls(fields.get("table"), fields["offset"], int(schema) if schema.isdigit() else None)


#: Words in the name of a pyiceberg catalog option that holds a secret.
_SECRET_KEYS = ("password", "secret", "token", "credential")


def _catalog_config(name: str) -> dict[str, str]:
    """pyiceberg's own configuration of catalog `name` (its flat options)."""
    from pyiceberg.utils.config import Config

    config = Config().get_catalog_config(name) or {}
    return {str(k).lower(): str(v) for k, v in config.items() if not isinstance(v, Mapping)}


def offsets_ordered(base: PartitionOffset, end: PartitionOffset) -> bool:
    """Whether a base's offset and a later barrier's say which came first (for the
    integrity check): sequence numbers of one table do; a depth does not, since expiring
    old snapshots lowers it, nor do offsets of two tables or of two kinds."""
    if base.offset == 0 or end.offset == 0:
        return True  # a side without a snapshot: the other is never behind it, or lost it
    ours, theirs = TableMark.of(base), TableMark.of(end)
    if DEPTH in (ours.counts, theirs.counts) or ours.counts != theirs.counts:
        return False
    return ours.counts is None or ours.table == theirs.table


class NotAppended(SourceOffsetError):
    """A snapshot since the base that is not an append (overwrite, delete, replace)."""


class IcebergTableSource:
    def __init__(
        self,
        store: ObjectStore,
        binding: TableBinding,
        *,
        schema: pa.Schema | None = None,
        catalog_uri: str | None = None,
        key: tuple[str, ...] | None = None,
    ) -> None:
        self.store = store
        self.binding = binding
        self.schema = schema
        self.catalog_uri = catalog_uri
        self.format = "iceberg"
        # the key of its changes: set, the table is read as changes (`read_between`)
        self.key = key

    @property
    def uri(self) -> str:
        return f"iceberg:{self.binding.catalog}/{self.binding.identifier}"

    def _error(
        self, problem: str, cls: type[SourceOffsetError] = SourceOffsetError
    ) -> SourceOffsetError:
        return cls(PARTITION, problem, uri=self.uri)

    def table(self) -> Table:
        from pyiceberg.exceptions import NoSuchTableError

        from batchpoint.tables.catalog import open_catalog
        from batchpoint.tables.service import configured_catalog_uri

        uri = self.catalog_uri if self.catalog_uri is not None else configured_catalog_uri()
        try:
            catalog = open_catalog(self.binding.catalog, self.store, uri)
            return catalog.load_table(self.binding.identifier)
        except NoSuchTableError:
            raise ConfigError(f"source {self.binding} does not exist") from None
        except ConfigError:
            raise
        except Exception as exc:  # the catalog's own: its database or REST service failed
            # the driver's text may repeat the catalog URI's password or the store's keys
            problem = scrub(str(exc), self._secrets(uri))
            raise ConfigError(f"source {self.binding}: the catalog failed: {problem}") from None

    def _secrets(self, catalog_uri: str | None = None) -> list[str | None]:
        """What must not reach a message: the store's keys, the catalog URI's password."""
        from urllib.parse import unquote, urlparse

        from batchpoint.tables.catalog import file_io_properties

        io = file_io_properties(self.store)
        secrets = [io.get("s3.secret-access-key"), io.get("s3.session-token")]
        try:
            password = urlparse(catalog_uri or "").password
        except ValueError:
            password = None
        secrets += [password, unquote(password) if password else None]
        # a catalog configured for pyiceberg (a REST service's credential or token)
        config = _catalog_config(self.binding.catalog)
        return [*secrets, *(v for k, v in config.items() if any(w in k for w in _SECRET_KEYS))]

    # -- barriers -----------------------------------------------------------------------

    @staticmethod
    def _ancestry(table: Table, snapshot: Snapshot | None) -> list[Snapshot]:
        """The snapshot and its ancestors still in the metadata, newest first."""
        out = []
        while snapshot is not None:
            out.append(snapshot)
            parent = snapshot.parent_snapshot_id
            snapshot = table.snapshot_by_id(parent) if parent is not None else None
        return out

    def capture_barrier(self) -> SourceBarrier:
        table = self.table()
        metadata = table.metadata
        current = table.current_snapshot()
        # a format-1 snapshot (or one from before a table's upgrade) has sequence number 0
        sequence = current.sequence_number if current is not None else None
        counted = sequence if current is not None else metadata.format_version >= 2
        mark = TableMark(
            str(metadata.table_uuid), SEQUENCE if counted else DEPTH, metadata.current_schema_id
        )
        if current is None:
            return SourceBarrier({PARTITION: PartitionOffset(0, None, mark.encode())})
        offset = sequence or len(self._ancestry(table, current))
        return SourceBarrier(
            {PARTITION: PartitionOffset(offset, str(current.snapshot_id), mark.encode())}
        )

    @staticmethod
    def _snapshot_of(barrier: SourceBarrier | Mapping[str, object] | None) -> int | None:
        offset = SourceBarrier.coerce(barrier).get(PARTITION)
        return int(offset.last) if offset is not None and offset.last else None

    @staticmethod
    def _mark_of(barrier: SourceBarrier | Mapping[str, object] | None) -> TableMark:
        return TableMark.of(SourceBarrier.coerce(barrier).get(PARTITION))

    def _recreated(self, recorded: str, found: str) -> SourceOffsetError:
        return self._error(
            f"the table is not the one the base checkpoint read (Iceberg table uuid "
            f"{recorded}, now {found}): it was dropped and created anew, so it cannot be read "
            "on from the base's snapshot (give the source a new uid to read the new table "
            "from its beginning, or restore)"
        )

    def _snapshots(
        self,
        start: SourceBarrier | Mapping[str, object] | None,
        end: SourceBarrier | Mapping[str, object],
    ) -> tuple[int | None, int | None]:
        """The base's and the barrier's snapshots, once they are known to be of one table."""
        base, target = self._snapshot_of(start), self._snapshot_of(end)
        if base is None:
            return base, target  # nothing read yet: whatever table is there now is read whole
        recorded, found = self._mark_of(start).table, self._mark_of(end).table
        if None not in (recorded, found) and recorded != found:
            raise self._recreated(str(recorded), str(found))
        if target is None:
            raise self._error(
                f"the table has no snapshot now, but the base checkpoint read up to snapshot "
                f"{base}: it was dropped and created anew, or its history was removed"
            )
        return base, target

    def verify_barrier(self, barrier: SourceBarrier | Mapping[str, object]) -> None:
        wanted = self._snapshot_of(barrier)
        if wanted is None:
            return
        table = self.table()
        recorded, found = self._mark_of(barrier).table, str(table.metadata.table_uuid)
        if recorded is not None and recorded != found:
            raise self._recreated(recorded, found)
        if table.snapshot_by_id(wanted) is None:
            raise self._error(f"snapshot {wanted} of the barrier has been expired")

    def read_between(
        self,
        start: SourceBarrier | Mapping[str, object] | None,
        end: SourceBarrier | Mapping[str, object],
    ) -> UpstreamRead:
        """The changes between the base's snapshot and the barrier's: the appended files
        when only appends happened since, else the two snapshots' contents to compare."""
        keys = self.key or ()
        base, target = self._snapshots(start, end)
        if target is None or target == base:
            return UpstreamRead(SinkMode.APPEND, keys, unchanged=True)
        if base is not None:
            try:
                splits = tuple(self.files_between(start, end))
                return UpstreamRead(SinkMode.APPEND, keys, (), splits)
            except NotAppended:
                pass  # overwritten or merged into: compare the two snapshots' contents
        table = self.table()
        fields = self._field_ids(table, end)  # both sides read as the barrier's schema
        after = self._content(table, target, fields)
        # no base: everything so far, the barrier's content, all inserts
        before = self._content(table, base, fields) if base is not None else ()
        return UpstreamRead(SinkMode.SNAPSHOT, keys, before, after)

    def _field_ids(
        self, table: Table, end: SourceBarrier | Mapping[str, object]
    ) -> dict[str, str | None]:
        """The field id of each column read, by its name in the barrier's schema (the
        table's current one for a barrier that did not record it)."""
        schema: Schema = table.schemas().get(self._mark_of(end).schema) or table.schema()
        names = self.schema.names if self.schema is not None else [f.name for f in schema.fields]
        by_name = {field.name: str(field.field_id) for field in schema.fields}
        return {name: by_name[name] for name in names if name in by_name}

    def _content(
        self, table: Table, snapshot_id: int, fields: dict[str, str | None]
    ) -> tuple[SourceSplit, ...]:
        """The data files of a snapshot's whole content."""
        splits = []
        for task in table.scan(snapshot_id=snapshot_id).plan_files():
            if task.delete_files:
                raise self._error(
                    f"snapshot {snapshot_id} deletes rows through delete files (merge-on-read), "
                    "which batchpoint cannot compare yet: write the table copy-on-write"
                )
            data = task.file
            splits.append(
                SourceSplit(PARTITION, len(splits), data.file_path, data.file_size_in_bytes, fields)
            )
        return tuple(splits)

    def files_between(
        self,
        start: SourceBarrier | Mapping[str, object] | None,
        end: SourceBarrier | Mapping[str, object],
    ) -> list[SourceSplit]:
        """The data files the snapshots after `start` (exclusive) up to `end` added."""
        from pyiceberg.table.snapshots import Operation

        base, target = self._snapshots(start, end)
        if target is None:
            return []  # no snapshot yet, and none read before
        table = self.table()
        fields = self._field_ids(table, end)
        top = table.snapshot_by_id(target)
        if top is None:
            raise self._error(f"snapshot {target} of the barrier has been expired")
        chain = self._ancestry(table, top)
        ids = [s.snapshot_id for s in chain]
        if base is not None:
            if base not in ids:
                why = (
                    "has been expired"
                    if table.snapshot_by_id(base) is None
                    else "is no longer an ancestor of the table's snapshot (a rollback)"
                )
                raise self._error(
                    f"the base checkpoint's snapshot {base} {why}: the table cannot be read "
                    "incrementally from it (restore to a newer checkpoint, or keep snapshots "
                    "longer than checkpoints are retained)"
                )
            chain = chain[: ids.index(base)]
        elif chain and chain[-1].parent_snapshot_id is not None:
            raise self._error(
                f"the table's first snapshots have been expired (the oldest left, "
                f"{chain[-1].snapshot_id}, has a parent): a first epoch would miss rows"
            )
        splits: list[SourceSplit] = []
        for snapshot in reversed(chain):  # oldest first
            operation = snapshot.summary.operation if snapshot.summary else None
            if operation is not Operation.APPEND:
                raise self._error(
                    f"snapshot {snapshot.snapshot_id} is a{'n' if operation else ''} "
                    f"{operation.value if operation else 'unknown'} operation: the table was "
                    "rewritten, not appended to, so it cannot be read incrementally (declare the "
                    "source with changes=True and a key to read its changes)",
                    NotAppended,
                )
            for data in self._added(table, snapshot):
                splits.append(
                    SourceSplit(
                        PARTITION, len(splits), data.file_path, data.file_size_in_bytes, fields
                    )
                )
        return splits

    @staticmethod
    def _added(table: Table, snapshot: Snapshot) -> list[DataFile]:
        """The data files `snapshot` itself added."""
        from pyiceberg.manifest import ManifestEntryStatus

        return [
            entry.data_file
            for manifest in snapshot.manifests(table.io)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
            if entry.status == ManifestEntryStatus.ADDED
            and entry.snapshot_id == snapshot.snapshot_id
        ]

    # -- reading (on executors: no catalog, only the files) -----------------------------

    def read_split(self, split: SourceSplit) -> pa.Table:
        from pyiceberg.io import load_file_io

        from batchpoint.tables.catalog import file_io_properties

        file_io = load_file_io(file_io_properties(self.store), split.key)
        try:
            with file_io.new_input(split.key).open(seekable=True) as stream:
                table = by_field_id(pq.ParquetFile(stream), split.values)
        except FileNotFoundError:
            raise self._error(
                f"data file {split.key} is gone (the table's files were removed)"
            ) from None
        except (pa.ArrowException, OSError) as exc:
            # the file system's text may carry the store's keys (a signed request)
            problem = scrub(str(exc), self._secrets())
            raise SourceDataError(split.key, f"not a readable Parquet file: {problem}") from None
        return select_declared(table, self.schema, split.key)


def by_field_id(parquet: pq.ParquetFile, fields: Mapping[str, str | None] | None) -> pa.Table:
    """A data file's columns under the names the table's schema gives their field ids
    (`fields`: name -> field id), as Iceberg reads them: a file's column names are those
    of when it was written. A field id the file does not have reads as nulls (a column
    added, or dropped and re-added, since). Only those columns are read. A split without
    field ids (an earlier release's) or a file without them (added from plain Parquet)
    is read by name, as before."""
    columns = {}
    for field in parquet.schema_arrow:
        found = (field.metadata or {}).get(FIELD_ID)
        if found is not None:
            columns[found.decode()] = field.name
    if fields is None or not columns:
        return parquet.read()
    wanted = {name: columns.get(str(field_id)) for name, field_id in fields.items()}
    data = parquet.read(columns=sorted({c for c in wanted.values() if c is not None}))
    out = data.select([])  # no column yet, but the file's rows: none is lost
    for name, column in wanted.items():
        values = data.column(column) if column is not None else pa.nulls(data.num_rows)
        out = out.append_column(name, values)
    return out
