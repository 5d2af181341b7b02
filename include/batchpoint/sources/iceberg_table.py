"""An Apache Iceberg table read incrementally as a source (pyiceberg).

The barrier is the table's current snapshot at trigger time, recorded as the one
partition `snapshots` whose offset is the snapshot's depth in the table's history
(its ancestors and itself: it only grows while the table is appended to) and whose
`last` is the snapshot id. An epoch reads the data files the snapshots after its base
checkpoint's snapshot added, up to its own: each appended row once. A table that was
overwritten or had rows deleted since the base, or whose base snapshot has been expired
or is no longer an ancestor (a rollback), cannot be read incrementally: the epoch stops
with SourceOffsetError saying which, as it does for a file source whose files changed.

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
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from batchpoint.errors import ConfigError
from batchpoint.protocol.sink_manifest import SinkMode
from batchpoint.sources.barrier import PartitionOffset, SourceBarrier
from batchpoint.sources.errors import SourceOffsetError
from batchpoint.sources.files import SourceSplit
from batchpoint.sources.readers import select_declared
from batchpoint.sources.upstream import UpstreamRead
from batchpoint.storage import ObjectStore
from batchpoint.tables.binding import TableBinding

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

PARTITION = "snapshots"


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
        catalog = open_catalog(self.binding.catalog, self.store, uri)
        try:
            return catalog.load_table(self.binding.identifier)
        except NoSuchTableError:
            raise ConfigError(f"source {self.binding} does not exist") from None

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
        current = table.current_snapshot()
        if current is None:
            return SourceBarrier({PARTITION: PartitionOffset(0)})
        depth = len(self._ancestry(table, current))
        return SourceBarrier({PARTITION: PartitionOffset(depth, str(current.snapshot_id))})

    @staticmethod
    def _snapshot_of(barrier: SourceBarrier | Mapping[str, object] | None) -> int | None:
        offset = SourceBarrier.coerce(barrier).get(PARTITION)
        return int(offset.last) if offset is not None and offset.last else None

    def verify_barrier(self, barrier: SourceBarrier | Mapping[str, object]) -> None:
        wanted = self._snapshot_of(barrier)
        if wanted is not None and self.table().snapshot_by_id(wanted) is None:
            raise self._error(f"snapshot {wanted} of the barrier has been expired")

    def read_between(
        self,
        start: SourceBarrier | Mapping[str, object] | None,
        end: SourceBarrier | Mapping[str, object],
    ) -> UpstreamRead:
        """The changes between the base's snapshot and the barrier's: the appended files
        when only appends happened since, else the two snapshots' contents to compare."""
        keys = self.key or ()
        base, target = self._snapshot_of(start), self._snapshot_of(end)
        if target is None or target == base:
            return UpstreamRead(SinkMode.APPEND, keys, unchanged=True)
        if base is None:  # everything so far: the barrier's content, all inserts
            content = self._content(self.table(), target)
            return UpstreamRead(SinkMode.SNAPSHOT, keys, (), content)
        try:
            return UpstreamRead(SinkMode.APPEND, keys, (), tuple(self.files_between(start, end)))
        except NotAppended:
            pass  # overwritten or merged into: compare the two snapshots' contents
        table = self.table()
        return UpstreamRead(
            SinkMode.SNAPSHOT, keys, self._content(table, base), self._content(table, target)
        )

    def _content(self, table: Table, snapshot_id: int) -> tuple[SourceSplit, ...]:
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
                SourceSplit(PARTITION, len(splits), data.file_path, data.file_size_in_bytes)
            )
        return tuple(splits)

    def files_between(
        self,
        start: SourceBarrier | Mapping[str, object] | None,
        end: SourceBarrier | Mapping[str, object],
    ) -> list[SourceSplit]:
        """The data files the snapshots after `start` (exclusive) up to `end` added."""
        from pyiceberg.manifest import ManifestEntryStatus
        from pyiceberg.table.snapshots import Operation

        base, target = self._snapshot_of(start), self._snapshot_of(end)
        if target is None:
            return []
        table = self.table()
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
            for manifest in snapshot.manifests(table.io):
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                    if (
                        entry.status == ManifestEntryStatus.ADDED
                        and entry.snapshot_id == snapshot.snapshot_id
                    ):
                        data = entry.data_file
                        splits.append(
                            SourceSplit(
                                PARTITION, len(splits), data.file_path, data.file_size_in_bytes
                            )
                        )
        return splits

    # -- reading (on executors: no catalog, only the files) -----------------------------

    def read_split(self, split: SourceSplit) -> pa.Table:
        from pyiceberg.io import load_file_io

        from batchpoint.tables.catalog import file_io_properties

        file_io = load_file_io(file_io_properties(self.store), split.key)
        try:
            with file_io.new_input(split.key).open(seekable=True) as stream:
                table = pq.read_table(stream)
        except FileNotFoundError:
            raise self._error(
                f"data file {split.key} is gone (the table's files were removed)"
            ) from None
        return select_declared(table, self.schema, split.key)
