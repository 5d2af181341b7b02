"""The pyiceberg adapter of a table sink: create the table from the staged files'
schema, read its position, commit a sync plan's steps, read it as of a checkpoint, and
expire the snapshots of checkpoints GC dropped.

Every commit is a compare-and-set on the table's current snapshot (pyiceberg asserts
the branch head it read); the table is created with commit retries off, because a
rebased retry would commit a decision made on a table that has changed since. After
a conflict, `TableSync` reads the manifest and the table again and plans anew.

Before each commit, `TableSync` pins the epoch in the sink manifest (a CAS that fails
if GC dropped the epoch since the manifest was read: then it plans anew), so GC keeps
the epoch's files until the commit; from then on the table's snapshot references them
(protocol/table_pins.py::TablePin). A sync that planned before a GC pass therefore never
commits a snapshot whose files that pass deleted.

A table belongs to its sink by uid (invariant 17): the table's `batchpoint.sink`
property and every commit's summary name the uid, so a sink renamed with its uid kept
goes on in its table. A release before issue 36 wrote the sink's name there: a table
whose property is one of the sink's older names (`SinkRef.legacy`) is its own, and the
next sync writes the uid in its place.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

import pyarrow as pa

from batchpoint.errors import CheckpointError
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sinks import Sink, SinkManifest, SinkPublisher, SinkRef
from batchpoint.storage import ObjectStore
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.plan import UNKNOWN_POSITION, Operation, SyncStep, TablePosition
from batchpoint.tables.sync import (
    SyncReport,
    TableCommit,
    TableError,
    TableSync,
    commit_of,
    error_detail,
    foreign_said,
    missing_said,
)

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

log = logging.getLogger(__name__)

PIPELINE = "batchpoint.pipeline"
SINK = "batchpoint.sink"
ROOT = "batchpoint.root"
CHECKPOINT = "batchpoint.checkpoint-id"
GENERATION = "batchpoint.generation"
OPERATION = "batchpoint.operation"


def _props(snapshot: Snapshot) -> dict[str, str]:
    return dict(snapshot.summary.additional_properties) if snapshot.summary else {}


def _name_mapping(table: Table) -> dict[str, str]:
    # Staged files carry no field ids: readers map their columns by name.
    from pyiceberg.table import TableProperties

    return {TableProperties.DEFAULT_NAME_MAPPING: table.schema().name_mapping.model_dump_json()}


def snapshot_keys(table: Table, store: ObjectStore) -> set[str]:
    """The store's keys that some snapshot of `table` reads (shared manifests read once:
    the cost is the table's unexpired history)."""
    prefix = store.child("")
    seen: set[str] = set()
    keys: set[str] = set()
    for snapshot in table.snapshots():
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            # Deleted entries are files a snapshot stopped reading; the snapshots that
            # read them list them in their own (older) manifests.
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                path = entry.data_file.file_path
                if path.startswith(prefix):
                    keys.add(path[len(prefix) :])
    return keys


def _data_files(table: Table, snapshot: Snapshot | None) -> set[str]:
    if snapshot is None:
        return set()
    return {
        entry.data_file.file_path
        for manifest in snapshot.manifests(table.io)
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
    }


def _order(props: dict[str, str]) -> tuple[int, int]:
    """A batchpoint commit's place in what its sink publishes (Delta's txn_version)."""
    return int(props[GENERATION]), _checkpoint_of(props) or 0


def _checkpoint_of(props: dict[str, str]) -> int | None:
    text = props.get(CHECKPOINT, "")
    return int(text) if text else None


class IcebergSinkTable:
    commit_noun = "snapshot"

    def __init__(
        self,
        catalog: Catalog,
        binding: TableBinding,
        pipeline: str,
        sink: Sink,
        store: ObjectStore,
    ) -> None:
        self.catalog = catalog
        self.binding = binding
        self.pipeline = pipeline
        self.ref = SinkRef.of(sink)
        self.sink = self.ref.uid
        self.store = store

    # -- the table ----------------------------------------------------------------------

    def load(self, *, claim: bool = False) -> Table | None:
        """The table (None: it does not exist), checked to be this sink's. `claim`: a
        sync's load, which adopts an empty table made for the sink and writes the uid
        over an older release's name; a reader's writes nothing (see _check_owner)."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            table = self.catalog.load_table(self.binding.identifier)
        except NoSuchTableError:
            return None
        self._check_owner(table, claim)
        return table

    def require(self) -> Table:
        table = self.load()
        if table is None:
            raise CheckpointError(missing_said(self))
        return table

    def ensure(self, manifest: SinkManifest) -> Table | None:
        """The table, created on the first sync from the staged files' schema (every
        column optional: nullability is a data-quality rule, as in the sinks' files).
        None while the manifest holds no file to take the schema from."""
        table = self.load(claim=True)
        if table is not None:
            return table
        sample = next((f for e in manifest.epochs.values() for f in e.files), None)
        if sample is None:
            return None
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError
        from pyiceberg.table import TableProperties

        schema = self._file_schema(sample.path)
        with contextlib.suppress(NamespaceAlreadyExistsError):
            self.catalog.create_namespace(self.binding.namespace)
        try:
            table = self.catalog.create_table(
                self.binding.identifier,
                schema=schema,
                properties={
                    PIPELINE: self.pipeline,
                    SINK: self.sink,
                    ROOT: self.store.uri,
                    TableProperties.COMMIT_NUM_RETRIES: "0",
                },
            )
        except TableAlreadyExistsError:
            return self.load(claim=True)  # another sync created it meanwhile
        with table.transaction() as txn:
            txn.set_properties(**_name_mapping(table))
        log.info("created %s for sink %s.%s", self.binding, self.pipeline, self.ref.label)
        return self.load()

    def _file_schema(self, key: str) -> pa.Schema:
        import pyarrow.parquet as pq
        from pyiceberg.io import load_file_io

        io = load_file_io(dict(self.catalog.properties), self.store.child(key))
        with io.new_input(self.store.child(key)).open() as stream:
            schema = pq.read_schema(stream)
        return pa.schema([f.with_nullable(True) for f in schema])  # drops the metadata too

    def _check_owner(self, table: Table, claim: bool = False) -> None:
        props = table.properties
        mine = {PIPELINE: self.pipeline, SINK: self.sink, ROOT: self.store.uri}
        theirs = {k: props.get(k) for k in mine}
        if theirs == mine:
            return
        if {**theirs, SINK: self.sink} == mine and theirs[SINK] in self.ref.legacy:
            if claim:  # this sink's, under its older name: its uid from now on
                self._claim(table)
            return
        if not any(theirs.values()) and table.current_snapshot() is None:
            if not claim:  # a reader's load writes nothing: the sync adopts it
                return
            from pyiceberg.table import TableProperties

            with table.transaction() as txn:  # an empty table made for us: adopt it
                txn.set_properties(
                    **mine, **{TableProperties.COMMIT_NUM_RETRIES: "0"}, **_name_mapping(table)
                )
            table.refresh()
            return
        owner = (
            f"sink {theirs[PIPELINE]}.{theirs[SINK]} on {theirs[ROOT]}"
            if any(theirs.values())
            else "no batchpoint sink (it holds data written otherwise)"
        )
        mine_said = (
            self.sink if self.ref.label == self.sink else f"{self.ref.label} (uid {self.sink})"
        )
        raise TableError(
            f"{self.binding} belongs to {owner}, not to sink {self.pipeline}.{mine_said} on "
            f"{self.store.uri}: name another table, or drop that one"
        )

    def _claim(self, table: Table) -> None:
        from pyiceberg.exceptions import CommitFailedException

        try:
            with table.transaction() as txn:
                txn.set_properties(**{SINK: self.sink})
        except CommitFailedException:  # another sync changed the table: it claims it next
            return
        table.refresh()

    # -- what TableSync and GC ask of every format --------------------------------------

    def conflicts(self) -> tuple[type[BaseException], ...]:
        from pyiceberg.exceptions import CommitFailedException

        return (CommitFailedException,)

    def refresh(self, table: Table) -> Table:
        return table.refresh()

    def head(self, table: Table) -> int | None:
        current = table.current_snapshot()
        return None if current is None else current.snapshot_id

    def referenced_keys(self, table: Table) -> set[str]:
        return snapshot_keys(table, self.store)

    def problems(self, table: Table, manifest: SinkManifest) -> list[str]:
        """Another writer's data commits on top of batchpoint's (beside the lag)."""
        return [] if (found := self._foreign(table)) is None else [self._foreign_said(*found)]

    def _foreign(self, table: Table) -> tuple[int | None, list[Snapshot]] | None:
        """Another writer's data commits (not a compaction's `replace`) on top of
        batchpoint's newest commit (its id; None: since the first snapshot), which a
        commit would lose (a snapshot sink overwrites) or claim; none if the table reads
        that commit's files (undone). A history expired below them (its oldest snapshot
        not the first: an expiry clears the parent) is UNKNOWN_POSITION, not this."""
        since, found, snapshot = None, [], table.current_snapshot()
        while snapshot is not None and since is None:
            if self._mine(snapshot):
                since = snapshot
            elif snapshot.summary is None or snapshot.summary.operation.value != "replace":
                found.append(snapshot)
            parent, oldest = snapshot.parent_snapshot_id, snapshot
            snapshot = None if parent is None else table.snapshot_by_id(parent)
            if since is None and snapshot is None and (parent or oldest.sequence_number != 1):
                return None  # expired by another engine: UNKNOWN_POSITION
        if not found or _data_files(table, since) == _data_files(table, table.current_snapshot()):
            return None
        return (None if since is None else since.snapshot_id), found

    def _foreign_said(self, since: int | None, found: list[Snapshot]) -> str:
        ops = {s.snapshot_id: s.summary.operation.value if s.summary else "?" for s in found}
        listed = ", ".join(f"snapshot {i} ({op})" for i, op in ops.items())
        if since is None:
            return foreign_said(str(self.binding), "its creation", listed)
        undo = f" (manage_snapshots().rollback_to_snapshot({since}))"
        return foreign_said(str(self.binding), f"batchpoint's snapshot {since}", listed, undo)

    # -- position and history -----------------------------------------------------------

    def _newest_commit(self, table: Table) -> Snapshot | None:
        """Batchpoint's newest commit on the main branch (a compaction by another engine
        on top keeps the content, so it does not hide it)."""
        snapshot = table.current_snapshot()
        while snapshot is not None:
            if self._mine(snapshot):
                return snapshot
            parent = snapshot.parent_snapshot_id
            snapshot = table.snapshot_by_id(parent) if parent is not None else None
        return None

    def _mine(self, snapshot: Snapshot) -> bool:
        props = _props(snapshot)
        return GENERATION in props and props.get(PIPELINE) == self.pipeline

    def position(self, table: Table) -> TablePosition | None:
        """Where the table stands: its newest batchpoint commit. A table of the sink's
        (only an empty one is adopted) that holds rows with no batchpoint commit below
        its head had its history expired by another engine: UNKNOWN_POSITION, since read
        as a new table the chain was appended again over the rows it holds."""
        found = self._newest_commit(table)
        if found is None:
            current = table.current_snapshot()
            summary = current.summary if current is not None else None
            held = int(summary.get("total-records", 0)) if summary is not None else 0
            return UNKNOWN_POSITION if held else None
        props = _props(found)
        return TablePosition(_checkpoint_of(props), int(props[GENERATION]))

    def history(self, table: Table | None = None) -> list[TableCommit]:
        """Every batchpoint commit still in the table's metadata, oldest first."""
        table = table or self.require()
        out = []
        for entry in table.metadata.snapshot_log:
            snapshot = table.snapshot_by_id(entry.snapshot_id)
            if snapshot is None:
                continue
            props = _props(snapshot)
            if GENERATION not in props:
                continue
            summary = snapshot.summary
            out.append(
                TableCommit(
                    snapshot.snapshot_id,
                    _checkpoint_of(props),
                    int(props[GENERATION]),
                    props.get(OPERATION, ""),
                    int(summary.get("total-records", 0)) if summary else 0,
                    snapshot.timestamp_ms,
                )
            )
        return out

    def snapshot_of(self, checkpoint_id: int, table: Table | None = None) -> int:
        """The table snapshot as of a checkpoint: its newest commit of that checkpoint."""
        return commit_of(
            self.binding,
            self.history(table or self.require()),
            checkpoint_id,
            "; GC expires those of dropped checkpoints",
        )

    def read(self, checkpoint_id: int | None = None) -> pa.Table:
        """The table's rows, now or as of a checkpoint."""
        table = self.require()
        snapshot = None if checkpoint_id is None else self.snapshot_of(checkpoint_id, table)
        try:
            return table.scan(snapshot_id=snapshot).to_arrow()
        except FileNotFoundError:
            at = "now" if snapshot is None else f"at snapshot {snapshot}"
            raise CheckpointError(
                f"sink '{self.ref.label}': {self.binding} {at} reads files that are gone "
                "(GC expired the checkpoint's copies, or they were deleted by hand)"
            ) from None
        except (OSError, pa.ArrowException) as exc:  # a data file that is not Parquet
            detail = error_detail(exc, self.store)
            raise TableError(
                f"sink '{self.ref.label}': {self.binding} cannot be read ({detail}); "
                "`batchpoint verify` names the checkpoint's damaged files"
            ) from None

    # -- commits ------------------------------------------------------------------------

    def commit(self, table: Table, step: SyncStep, generation: int) -> None:
        from pyiceberg.io.pyarrow import parquet_file_to_data_file

        props = {
            PIPELINE: self.pipeline,
            SINK: self.sink,
            CHECKPOINT: "" if step.checkpoint_id is None else str(step.checkpoint_id),
            GENERATION: str(generation),
            OPERATION: step.operation.value,
        }
        at = self._newest_commit(table)
        if at is not None and _order(_props(at)) >= (generation, step.checkpoint_id or 0):
            # Committed since this sync planned: a restore's rewind, say (invariant 10).
            raise self.conflicts()[0](f"{self.binding} is at snapshot {at.snapshot_id} already")
        if (foreign := self._foreign(table)) is not None:
            raise TableError(f"sink '{self.ref.label}': {self._foreign_said(*foreign)}")
        try:
            data_files = [
                parquet_file_to_data_file(table.io, table.metadata, self.store.child(f.path))
                for f in step.files
            ]
        except ValueError as exc:
            raise TableError(
                f"sink '{self.ref.label}': checkpoint {step.checkpoint_id}'s output does not fit "
                f"{self.binding}'s schema ({exc}); evolve the table's schema or write a new table"
            ) from None
        with table.transaction() as txn:
            update = txn.update_snapshot(snapshot_properties=props)
            if step.replace and table.current_snapshot() is not None:
                with update.overwrite() as overwrite:
                    for task in table.scan().plan_files():
                        overwrite.delete_data_file(task.file)
                    for data_file in data_files:
                        overwrite.append_data_file(data_file)
            else:
                with update.fast_append() as append:
                    for data_file in data_files:
                        append.append_data_file(data_file)

    def expire(self, table: Table, manifest: SinkManifest) -> list[int]:
        """Expire the snapshots of checkpoints the manifest no longer has (GC dropped
        their files): time travel then offers only checkpoints it can still read. The
        table is read first, then the manifest as of now (not as the caller read it: a
        checkpoint published and committed since is in it). The head and batchpoint's
        newest commit below it stay whatever the manifest says: that commit is the
        table's position, and without it the next sync could not tell where it stands."""
        table = self.refresh(table)
        manifest = SinkPublisher(self.store, PipelineLayout(self.pipeline)).manifest(self.ref)
        if manifest is None:
            return []
        newest = self._newest_commit(table)
        keep = {s.snapshot_id for s in (table.current_snapshot(), newest) if s is not None}
        gone = [
            c
            for c in self.history(table)
            if c.checkpoint_id is not None
            and c.checkpoint_id not in manifest.epochs
            and c.snapshot_id not in keep
        ]
        if not gone:
            return []
        expire = table.maintenance.expire_snapshots()
        for commit in gone:
            expire = expire.by_id(commit.snapshot_id)
        expire.commit()
        return sorted({c.checkpoint_id for c in gone if c.checkpoint_id is not None})


__all__ = [
    "IcebergSinkTable",
    "Operation",
    "SyncReport",
    "TableCommit",
    "TableError",
    "TableSync",
    "snapshot_keys",
]
