"""The delta-rs adapter of a table sink: a path-based Delta table
(tables/delta_location.py) that `TableSync` brings to the sink manifest, one commit per
checkpoint, as it does an Iceberg table.

Idempotence is Delta's own: each commit carries a `SetTransaction` whose application id
is the sink's (`batchpoint:<pipeline>:<sink uid>`) and whose version encodes the
restore generation and the checkpoint (`txn_version`), as Structured Streaming's Delta
sink does with its batch id. The encoding only grows along what a sink publishes (a
generation's checkpoints in order, a restore into a newer generation), so the table's
position is its transaction version: table state, which survives the log's cleanup
when commit infos do not. A commit is a conditional put of the log's next version with
no retry: a writer that lost to a concurrent one gets a conflict and plans again.

delta-rs reads only files under the table's folder (no absolute paths in `add`
actions), so a commit first copies the epoch's staged files into
`<table>/batchpoint/<key>`; the name follows from the staged key, so a retried or
concurrent sync copies to the same place and a rewind reuses what earlier commits
copied. The table then holds no checkpoint file: GC needs no reference from it, and
`expire` deletes the copies only commits of dropped checkpoints read.

The commit info names the pipeline, sink, checkpoint, generation and operation
(publish or rewind) for time travel by checkpoint (`snapshot_of`). Another writer's data
commits on top of batchpoint's stop the sync, and VACUUMed versions of retained
checkpoints are findings (tables/delta_log.py).
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from batchpoint.errors import CheckpointError, ConfigError
from batchpoint.protocol.checkpoint import FileHandle
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sinks import Sink, SinkManifest, SinkPublisher, SinkRef, visible_files
from batchpoint.storage import ObjectStore
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.delta_location import storage_options, table_key, table_uri
from batchpoint.tables.iceberg import CHECKPOINT, GENERATION, OPERATION, PIPELINE, ROOT, SINK
from batchpoint.tables.plan import SyncStep, TablePosition
from batchpoint.tables.sync import TableCommit, TableError, commit_of, error_detail, missing_said

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

COPIES = "batchpoint/"  # under the table's folder: the staged files' copies
_GENERATION_STEP = 10**12  # checkpoint ids stay below it; generations below 9.2 million
_HISTORY_SCAN = 100  # commits read back for a RESTORE by another writer


def txn_version(generation: int, checkpoint_id: int | None) -> int:
    """The SetTransaction version of a commit: grows with what a sink publishes."""
    return generation * _GENERATION_STEP + (checkpoint_id or 0)


def position_of(version: int | None) -> TablePosition | None:
    if version is None:
        return None
    generation, checkpoint = divmod(version, _GENERATION_STEP)
    return TablePosition(checkpoint or None, generation)


def copy_key(staged: str) -> str:
    """Where a staged file's copy sits, relative to the table's folder."""
    return COPIES + staged


def _nullable_schema(path: Path) -> pa.Schema:
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    return pa.schema([f.with_nullable(True) for f in schema])  # drops the metadata too


def _said(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)


def _deltalake() -> Any:
    try:
        import deltalake
    except ImportError:
        raise ConfigError(
            "Delta table sinks need deltalake: install batchpoint with its 'tables' extra "
            "(pip install 'batchpoint[tables]')"
        ) from None
    return deltalake


class DeltaSinkTable:
    commit_noun = "version"

    def __init__(
        self, binding: TableBinding, pipeline: str, sink: Sink, store: ObjectStore
    ) -> None:
        self.binding = binding
        self.pipeline = pipeline
        self.ref = SinkRef.of(sink)
        self.sink = self.ref.uid
        self.store = store
        self.uri = table_uri(store, binding)
        self.options = storage_options(store)
        self.app_id = f"batchpoint:{pipeline}:{self.sink}"

    # -- the table ----------------------------------------------------------------------

    def _open(self, version: int | None = None) -> DeltaTable:
        dl = _deltalake()
        return dl.DeltaTable(self.uri, storage_options=self.options, version=version)

    def load(self, *, claim: bool = False) -> DeltaTable | None:
        """The table (None: it does not exist), checked to be this sink's. `claim`: a
        sync's load, which adopts an empty table made for the sink; any other load
        writes nothing (an empty table not adopted yet reads as one with no batchpoint
        commit)."""
        dl = _deltalake()
        try:
            if not dl.DeltaTable.is_deltatable(self.uri, storage_options=self.options):
                return None
            table = self._open()
        except Exception as exc:  # storage's: said as the sink's, never with its keys
            raise TableError(
                f"sink '{self.ref.label}': {self.binding} at {self.uri} cannot be read "
                f"({error_detail(exc, self.store)})"
            ) from None
        self._check_owner(table, claim)
        return table

    def require(self) -> DeltaTable:
        table = self.load()
        if table is None:
            raise CheckpointError(missing_said(self, f" at {self.uri}"))
        return table

    def _mine(self) -> dict[str, str]:
        return {PIPELINE: self.pipeline, SINK: self.sink, ROOT: self.store.uri}

    def ensure(self, manifest: SinkManifest) -> DeltaTable | None:
        """The table, created on the first sync from the staged files' schema (every
        column nullable, as in the sinks' files). None while no file gives a schema."""
        table = self.load(claim=True)
        if table is not None:
            return table
        sample = next((f for e in manifest.epochs.values() for f in e.files), None)
        if sample is None:
            return None
        dl = _deltalake()
        try:
            dl.DeltaTable.create(
                self.uri,
                schema=self._file_schema(sample.path),
                mode="error",
                configuration=self._mine(),
                storage_options=self.options,
                raise_if_key_not_exists=False,  # batchpoint's own keys
            )
        except Exception as exc:
            if "exists" not in str(exc).lower():
                raise
            # another sync created it meanwhile
        log.info("created %s for sink %s.%s", self.binding, self.pipeline, self.ref.label)
        return self.load(claim=True)

    def _file_schema(self, key: str) -> pa.Schema:
        with tempfile.TemporaryDirectory(prefix="batchpoint-delta-") as folder:
            local = Path(folder) / "staged.parquet"
            self.store.download_file(key, local)
            return _nullable_schema(local)

    def _check_owner(self, table: DeltaTable, claim: bool) -> None:
        config = table.metadata().configuration
        mine = self._mine()
        theirs = {k: config.get(k) for k in mine}
        if theirs == mine:
            return
        if not any(theirs.values()) and not table.file_uris():
            if not claim:  # a reader's load writes nothing: the sync adopts it
                return
            # An empty table made for us: adopt it (the claim is a commit of its own).
            table.alter.set_table_properties(mine, raise_if_not_exists=False)
            return
        owner = (
            f"sink {theirs[PIPELINE]}.{theirs[SINK]} on {theirs[ROOT]}"
            if any(theirs.values())
            else "no batchpoint sink (it holds data written otherwise)"
        )
        raise TableError(
            f"{self.binding} at {self.uri} belongs to {owner}, not to sink "
            f"{self.pipeline}.{self.ref.label} on {self.store.uri}: name another table, "
            "or drop that one"
        )

    # -- what TableSync and GC ask of every format --------------------------------------

    def conflicts(self) -> tuple[type[BaseException], ...]:
        from deltalake.exceptions import CommitFailedError

        return (CommitFailedError,)

    def refresh(self, table: DeltaTable) -> DeltaTable:
        table.update_incremental()
        return table

    def head(self, table: DeltaTable) -> int | None:
        return table.version()

    def position(self, table: DeltaTable) -> TablePosition | None:
        return self._content(table)[0]

    def _content(self, table: DeltaTable) -> tuple[TablePosition | None, int]:
        """Where the table's content is, and the transaction version a commit must be
        above. A RESTORE by another writer brings back an older version's files but
        leaves the SetTransactions as they were: after a RESTORE to a version (and before
        batchpoint's next commit) the content is at that version's transaction. One by
        time names no version: a foreign commit (tables/delta_log.py), which the next
        commit refuses, loudly, rather than the sync finding nothing to do."""
        from batchpoint.tables import delta_log

        recorded = table.transaction_version(self.app_id)
        for info in table.history(limit=_HISTORY_SCAN):  # newest first
            if info.get(PIPELINE) == self.pipeline and GENERATION in info:
                break  # batchpoint's commit is the newest word on the content
            if info.get("operation") != "RESTORE":
                continue
            restored = delta_log.restored_version(delta_log.LogEntry(0, info, True))
            if restored is None:  # by time: at checkpoint 0, on no chain, so a sync
                known = position_of(recorded)  # plans a commit, and meets the refusal
                return TablePosition(0, known.generation if known else 0), -1
            recorded = self._open(restored).transaction_version(self.app_id)
            break
        return position_of(recorded), -1 if recorded is None else recorded

    def referenced_keys(self, table: DeltaTable) -> set[str]:
        return set()  # the table reads its own copies, never a checkpoint's files

    def problems(self, table: DeltaTable, manifest: SinkManifest) -> list[str]:
        """Another writer's data commits on top of batchpoint's, and retained
        checkpoints whose versions read files that are gone (tables/delta_log.py)."""
        from batchpoint.tables import delta_log

        out = []
        if (foreign := delta_log.foreign(self, table)) is not None:
            out.append(foreign.said(self))
        if gone := delta_log.unreadable(self, table, manifest):
            out.append(delta_log.unreadable_said(self, gone))
        return out

    # -- history and time travel --------------------------------------------------------

    def history(self, table: DeltaTable | None = None) -> list[TableCommit]:
        """Every batchpoint commit still in the table's log, oldest first."""
        table = table or self.require()
        out = []
        for info in reversed(table.history()):
            if GENERATION not in info or info.get(PIPELINE) != self.pipeline:
                continue
            text = str(info.get(CHECKPOINT, ""))
            out.append(
                TableCommit(
                    int(info["version"]),
                    int(text) if text else None,
                    int(info[GENERATION]),
                    str(info.get(OPERATION, "")),
                    int(info.get("batchpoint.records", 0)),
                    int(info.get("timestamp", 0)),
                )
            )
        return out

    def snapshot_of(self, checkpoint_id: int, table: DeltaTable | None = None) -> int:
        """The table version as of a checkpoint: its newest commit of that checkpoint."""
        return commit_of(self.binding, self.history(table or self.require()), checkpoint_id)

    def read(self, checkpoint_id: int | None = None) -> pa.Table:
        """The table's rows, now or as of a checkpoint."""
        missing = _deltalake().exceptions.TableNotFoundError
        version = None if checkpoint_id is None else self.snapshot_of(checkpoint_id)
        try:
            return pa.table(self._open(version).to_pyarrow_table())
        except missing:  # no log (any more) at its path
            raise CheckpointError(missing_said(self, f" at {self.uri}")) from None
        except FileNotFoundError:
            at = "now" if version is None else f"at version {version}"
            raise CheckpointError(
                f"sink '{self.ref.label}': {self.binding} at {self.uri} {at} reads files "
                "that are gone (VACUUM removed them, or GC expired the checkpoint's copies)"
            ) from None
        except Exception as exc:  # a file that is not Parquet (Arrow's "magic bytes not
            # found"), or storage's: said as the sink's, without the keys delta-rs repeats
            at = "" if version is None else f" at version {version}"
            raise TableError(
                f"sink '{self.ref.label}': {self.binding} at {self.uri} cannot be read"
                f"{at} ({error_detail(exc, self.store)})"
            ) from None

    def keys_at(self, checkpoint_id: int | None = None) -> list[str]:
        """The store's keys of the table's data files, now or as of a checkpoint: what
        a reader of that Delta version reads (`read_sink` reads them with Spark)."""
        table = self.require()
        version = table.version() if checkpoint_id is None else self.snapshot_of(checkpoint_id)
        return sorted(self.version_keys(version))

    # -- commits ------------------------------------------------------------------------

    def commit(self, table: DeltaTable, step: SyncStep, generation: int) -> None:
        from deltalake import CommitProperties, Transaction

        from batchpoint.tables import delta_log

        version = txn_version(generation, step.checkpoint_id)
        recorded = self._content(table)[1]
        if recorded >= version:
            # Committed by a concurrent sync since this one read the table: plan again.
            raise self.conflicts()[0](f"{self.app_id} is at transaction {recorded} already")
        if (foreign := delta_log.foreign(self, table)) is not None:
            raise TableError(f"sink '{self.ref.label}': {foreign.said(self)}")
        wanted = pa.schema(table.schema())
        actions = [self._add(table_file, wanted, step) for table_file in step.files]
        if step.replace:
            actions = self._replacing(table, actions)
        rows = sum(f.rows or 0 for f in step.files)
        if not step.replace:
            rows += self._rows(table)
        metadata = {
            PIPELINE: self.pipeline,
            SINK: self.sink,
            CHECKPOINT: "" if step.checkpoint_id is None else str(step.checkpoint_id),
            GENERATION: str(generation),
            OPERATION: step.operation.value,
            "batchpoint.records": str(rows),
        }
        table.create_write_transaction(
            actions,
            mode="append",  # a replace says its removes itself (`_replacing`)
            schema=table.schema(),
            commit_properties=CommitProperties(
                custom_metadata=metadata,
                app_transactions=[Transaction(self.app_id, version)],
                max_commit_retries=0,  # a conflict is planned anew, never rebased
            ),
        )

    def _add(self, staged: FileHandle, wanted: pa.Schema, step: SyncStep) -> Any:
        """Copy a staged file into the table's folder (unless an earlier sync did) and
        say it as an `add` action; a file that does not fit the table is refused."""
        from deltalake.transaction import AddAction

        key = table_key(self.binding) + copy_key(staged.path)
        with tempfile.TemporaryDirectory(prefix="batchpoint-delta-") as folder:
            local = Path(folder) / "staged.parquet"
            self.store.download_file(staged.path, local)
            got = _nullable_schema(local)
            if [(f.name, f.type) for f in got] != [(f.name, f.type) for f in wanted]:
                raise TableError(
                    f"sink '{self.ref.label}': checkpoint {step.checkpoint_id}'s output "
                    f"({_said(got)}) does not fit {self.binding}'s schema ({_said(wanted)}); "
                    "write a new table"
                )
            info = self.store.head(key)
            if info is None or info.size != local.stat().st_size:
                info = self.store.upload_file(key, local)
        stats = json.dumps({"numRecords": staged.rows or 0})
        return AddAction(copy_key(staged.path), info.size, {}, int(time.time() * 1000), True, stats)

    def _replacing(self, table: DeltaTable, adds: list[Any]) -> list[Any]:
        """A replace as explicit file actions: an `add` of each file of the step the table
        does not hold, a `remove` of each file it holds that the step does not. Not
        delta-rs's overwrite, which removes every file held, those the step adds again
        included: a version that adds and removes one path is not valid Delta (the
        protocol leaves a commit's actions unordered; Spark's and Delta Kernel's replays
        drop the file, delta-rs keeps it), and a rewind to the files the table holds (a
        restore of the checkpoint it is at, stamping the new generation) is just that
        (concurrency model, Delta seed 13)."""
        from deltalake.transaction import RemoveAction

        held = pa.table(table.get_add_actions(flatten=True))
        live = dict(
            zip(held.column("path").to_pylist(), held.column("size_bytes").to_pylist(), strict=True)
        )
        now = int(time.time() * 1000)
        named = {a.path for a in adds}
        removes = [RemoveAction(p, True, now, size) for p, size in live.items() if p not in named]
        return [*(a for a in adds if live.get(a.path) != a.size), *removes]

    def _rows(self, table: DeltaTable) -> int:
        actions = pa.table(table.get_add_actions(flatten=True))
        if "num_records" not in actions.column_names:
            return 0
        return int(sum(v or 0 for v in actions.column("num_records").to_pylist()))

    # -- expiry -------------------------------------------------------------------------

    def expire(self, table: DeltaTable, manifest: SinkManifest) -> list[int]:
        """Delete the copies that only commits of checkpoints GC dropped read. Listed
        first, then the manifest and the table read: a sync pins its epoch (kept in
        the manifest) before it copies, and unpins only after its commit, so a copy
        listed here is either kept by the manifest or read by a version seen here."""
        prefix = table_key(self.binding) + COPIES
        listed = [o.key for o in self.store.list_sizes(prefix)]
        if not listed:
            return []
        # The manifest as of now, not as the caller read it: a sync that pinned an
        # epoch published since has it there.
        manifest = SinkPublisher(self.store, PipelineLayout(self.pipeline)).manifest(self.ref)
        if manifest is None:
            return []
        keep = {
            table_key(self.binding) + copy_key(f.path)
            for cid in manifest.epochs
            for f in visible_files(manifest, cid)
        }
        commits = self.history(self.refresh(table))
        kept = {c.snapshot_id for c in commits if c.checkpoint_id in manifest.epochs}
        # Batchpoint's newest version too, which the head is not when another writer
        # committed on top: the sync refuses until it is restored (delta_log.py).
        for version in {table.version(), *kept, *(c.snapshot_id for c in commits[-1:])}:
            keep |= self.version_keys(version)
        gone = [key for key in listed if key not in keep]
        if not gone:
            return []
        self.store.delete_many(gone)
        dropped = {c.checkpoint_id for c in self.history(table) if c.checkpoint_id}
        return sorted(dropped - set(manifest.epochs))

    def version_keys(self, version: int) -> set[str]:
        # Unreadable is an error, not "reads nothing": expiry deletes nothing it cannot
        # prove unread.
        actions = pa.table(self._open(version).get_add_actions(flatten=True))
        return {table_key(self.binding) + p for p in actions.column("path").to_pylist()}
