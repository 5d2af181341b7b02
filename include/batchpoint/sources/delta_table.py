"""A Delta Lake table read incrementally as a source (delta-rs: the `deltalake` package).

The table is path-based, under the store's delta/ folder (tables/delta_location.py).
The barrier is the table's version at trigger time, recorded as the one partition
`versions` whose offset is the version + 1 (0: no table yet, so a table's first version
is already a step forward; versions only grow) and whose `last` is the version.

An epoch reads the rows the commits after its base checkpoint's version added, up to
the barrier's, each once: the driver reads each version's commit (the log's
`_delta_log/<version>.json`, the protocol's record of exactly what the commit changed)
and hands the executors the data files of its `add` actions; the executors read only
those files, never the log. A first epoch (no base) reads the barrier version's content.
A commit since the base that removed rows (a DELETE, UPDATE, MERGE, overwrite, RESTORE)
stops the epoch with SourceOffsetError naming its version and operation, as does a base
whose commits the log's cleanup removed or whose files VACUUM deleted.

With `changes=True` (a key declared), the table is read as its changes instead, each
row with its `_row_kind` (sources/upstream.py): the rows each commit since the base
removed against the rows it added, which spark/upstream_io.changelog pairs by key into
-U/+U, -D and +I. A commit with change data (the table's `delta.enableChangeDataFeed`)
contributes its change data files: their deletes and update pre-images as removed rows,
their inserts and post-images as added ones, as `load_cdf` reads them. A commit without
(the feed off, or a commit that adds or drops whole files) contributes the files it
removed and added, as `load_cdf` falls back to. The epoch's changes are thus the net
difference between the base version's content and the barrier's, keyed by the source's
key: a key changed twice in one epoch is one -U/+U pair, never an unordered sequence.
"""

from __future__ import annotations

import io
import json
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from batchpoint.errors import ConfigError, ObjectNotFound
from batchpoint.protocol.sink_manifest import SinkMode
from batchpoint.sources.barrier import PartitionOffset, SourceBarrier
from batchpoint.sources.errors import SourceDataError, SourceOffsetError
from batchpoint.sources.files import DEFAULT_DOWNLOAD_THRESHOLD, SourceSplit
from batchpoint.sources.readers import select_declared
from batchpoint.sources.upstream import UpstreamRead
from batchpoint.storage import ObjectStore
from batchpoint.tables.binding import TableBinding
from batchpoint.tables.delta_location import storage_options, table_key, table_uri

if TYPE_CHECKING:
    from deltalake import DeltaTable

PARTITION = "versions"
#: A change data file's change types, by the side of the changelog they are on.
CHANGE_TYPES = {"removed": ("delete", "update_preimage"), "added": ("insert", "update_postimage")}
CHANGE_TYPE_COLUMN = "_change_type"

Action = Mapping[str, Any]
Barrier = SourceBarrier | Mapping[str, object]  # a barrier, or its JSON as recorded


class NotAppended(SourceOffsetError):
    """A commit since the base that removed rows (a delete, update, merge, overwrite)."""


@dataclass(frozen=True)
class Commit:
    """One version's commit: its operation and the actions that changed data."""

    version: int
    operation: str
    added: tuple[Action, ...]
    removed: tuple[Action, ...]
    changes: tuple[Action, ...]  # `cdc`: its change data files


def delta_table_class() -> type[DeltaTable]:
    """deltalake's DeltaTable, imported on first use: it is an optional dependency."""
    try:
        from deltalake import DeltaTable
    except ImportError:
        raise ConfigError(
            "reading a Delta table needs the deltalake package (pip install 'batchpoint[tables]')"
        ) from None
    return DeltaTable


class DeltaTableSource:
    format = "delta"

    def __init__(
        self,
        store: ObjectStore,
        binding: TableBinding,
        *,
        schema: pa.Schema | None = None,
        key: tuple[str, ...] | None = None,
    ) -> None:
        self.store = store
        self.binding = binding
        self.schema = schema
        # the key of its changes: set, the table is read as changes (`read_between`)
        self.key = key
        self._root = table_key(binding)  # the table's folder as a key of the store

    @property
    def uri(self) -> str:
        return table_uri(self.store, self.binding)

    def _error(
        self, problem: str, cls: type[SourceOffsetError] = SourceOffsetError
    ) -> SourceOffsetError:
        return cls(PARTITION, problem, uri=self.uri)

    # -- the table's log (on the driver) ------------------------------------------------

    def table(self, version: int | None = None) -> DeltaTable | None:
        """The table as of `version` (default: its newest), None when there is none
        (or, for a version, when its commits can no longer be read)."""
        delta_table = delta_table_class()
        from deltalake.exceptions import TableNotFoundError

        try:
            return delta_table(
                self.uri, version=version, storage_options=storage_options(self.store) or None
            )
        except TableNotFoundError:
            return None

    def _commit(self, version: int) -> Commit | None:
        """Version `version`'s commit, None when the log no longer has it."""
        try:
            data = self.store.get(f"{self._root}_delta_log/{version:020d}.json").data
        except ObjectNotFound:
            return None
        operation = "unknown"
        added, removed, changes = [], [], []
        for action in self._actions(version, data):
            if "commitInfo" in action:
                operation = str(action["commitInfo"].get("operation") or operation)
            elif "metaData" in action:
                self._check_readable(action["metaData"].get("configuration") or {}, version)
            # A file whose dataChange is false only rearranges rows that are already in
            # the table (OPTIMIZE's compaction, a statistics rewrite): it adds no row and
            # takes none away, so it is skipped as if the commit had not happened.
            elif "add" in action and action["add"].get("dataChange", True):
                if action["add"].get("deletionVector"):
                    raise self._deletion_vectors(version)
                added.append(action["add"])
            elif "remove" in action and action["remove"].get("dataChange", True):
                removed.append(action["remove"])
            elif "cdc" in action:
                changes.append(action["cdc"])
        return Commit(version, operation, tuple(added), tuple(removed), tuple(changes))

    def _actions(self, version: int, data: bytes) -> list[Action]:
        # A damaged commit stops the epoch naming its version, not with a parser's traceback.
        actions: list[Action] = []
        try:
            for line in data.decode("utf-8").splitlines():
                action = json.loads(line) if line.strip() else {}
                if not isinstance(action, dict):
                    raise ValueError(f"a {type(action).__name__}, not a JSON object")
                actions.append(action)
        except ValueError as exc:  # also UnicodeDecodeError, JSONDecodeError
            at = "" if isinstance(exc, UnicodeDecodeError) else f" at line {len(actions) + 1}"
            why = f"{exc.msg}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else exc
            raise self._error(
                f"the commit of version {version} ({self._root}_delta_log/{version:020d}.json) "
                f"is damaged{at}: {why}; the table's log cannot be read past it"
            ) from None
        return actions

    def _commits(self, base: int, target: int) -> list[Commit]:
        """The commits after version `base` up to `target`, oldest first."""
        commits = []
        for version in range(base + 1, target + 1):
            commit = self._commit(version)
            if commit is None:
                raise self._error(
                    f"the commit of version {version}, after the base checkpoint's version "
                    f"{base}, is gone (the log's cleanup removed it): the table cannot be read "
                    f"incrementally from version {base} (restore to a newer checkpoint, or "
                    "keep the log, delta.logRetentionDuration, longer than checkpoints are "
                    "retained)"
                )
            commits.append(commit)
        return commits

    def _check_readable(self, configuration: Mapping[str, Any], version: int) -> None:
        mode = configuration.get("delta.columnMapping.mode") or "none"
        if mode != "none":
            raise self._error(
                f"version {version} has column mapping (mode '{mode}'): its data files name "
                "their columns apart from the table's, which batchpoint cannot read yet"
            )

    def _deletion_vectors(self, version: int) -> SourceOffsetError:
        return self._error(
            f"version {version} deletes rows through deletion vectors, which batchpoint "
            "cannot read yet: write the table without them (delta.enableDeletionVectors=false)"
        )

    # -- barriers -----------------------------------------------------------------------

    def capture_barrier(self) -> SourceBarrier:
        table = self.table()
        if table is None:
            return SourceBarrier({PARTITION: PartitionOffset(0)})
        version = table.version()
        # the digest is the table's id: a table deleted and created anew counts its
        # versions again from 0, and only its id tells the two apart
        identity = str(table.metadata().id)
        return SourceBarrier({PARTITION: PartitionOffset(version + 1, str(version), identity)})

    @staticmethod
    def _identity_of(barrier: Barrier | None) -> str | None:
        offset = SourceBarrier.coerce(barrier).get(PARTITION)
        return offset.digest if offset is not None else None  # None: captured before ids

    def _recreated(self, recorded: str, found: str) -> SourceOffsetError:
        return self._error(
            f"the table is not the one the base checkpoint read (Delta table id {recorded}, "
            f"now {found}): it was deleted and created anew, and its versions count from 0 "
            "again, so it cannot be read on from the base's version (give the source a new "
            "uid to read the new table from its beginning, or restore)"
        )

    @staticmethod
    def _version_of(barrier: Barrier | None) -> int | None:
        offset = SourceBarrier.coerce(barrier).get(PARTITION)
        return int(offset.last) if offset is not None and offset.last else None

    def verify_barrier(self, barrier: Barrier) -> None:
        wanted = self._version_of(barrier)
        if wanted is None:
            return
        newest = self.table()
        if newest is None or newest.version() < wanted:
            now = "no table" if newest is None else f"version {newest.version()}"
            raise self._error(
                f"version {wanted} of the barrier is beyond the table's newest ({now}): the "
                "table was deleted, or deleted and created anew"
            )
        at_barrier = self.table(wanted)
        if at_barrier is None:
            raise self._error(
                f"version {wanted} of the barrier can no longer be read (the log's cleanup "
                "removed its commits)"
            )
        recorded = self._identity_of(barrier)
        if recorded is not None and (found := str(at_barrier.metadata().id)) != recorded:
            raise self._recreated(recorded, found)

    def _versions(self, start: Barrier | None, end: Barrier) -> tuple[int | None, int | None]:
        base, target = self._version_of(start), self._version_of(end)
        if base is not None and (target is None or target < base):
            found = "no table" if target is None else f"version {target}"
            raise self._error(
                f"the barrier found {found}, before the base checkpoint's version {base}: "
                "the table was deleted (or deleted and created anew), or the barriers are "
                "out of order"
            )
        recorded, found = self._identity_of(start), self._identity_of(end)
        if base is not None and None not in (recorded, found) and recorded != found:
            raise self._recreated(str(recorded), str(found))
        return base, target

    # -- what an epoch reads ------------------------------------------------------------

    def files_between(self, start: Barrier | None, end: Barrier) -> list[SourceSplit]:
        """The data files the commits after `start`'s version (exclusive) up to `end`'s
        added; from no base, the content of `end`'s version."""
        base, target = self._versions(start, end)
        if target is None:
            return []
        if base is None:
            return list(self._content(target))
        return self._appended(self._commits(base, target))

    def _appended(self, commits: Sequence[Commit]) -> list[SourceSplit]:
        splits: list[SourceSplit] = []
        for commit in commits:
            if commit.removed:
                raise self._error(
                    f"version {commit.version} is a{'n' if commit.operation[:1] in 'AEIOU' else ''}"
                    f" {commit.operation} commit that removed rows: the table was rewritten, not "
                    "appended to, so it cannot be read incrementally (declare the source with "
                    "changes=True and a key to read its changes)",
                    NotAppended,
                )
            splits.extend(self._split(a, len(splits)) for a in commit.added)
        return splits

    def read_between(self, start: Barrier | None, end: Barrier) -> UpstreamRead:
        """The changes between the base's version and the barrier's: the appended files
        when only appends happened since, else the rows removed and the rows added."""
        keys = self.key or ()
        base, target = self._versions(start, end)
        if target is None or target == base:
            return UpstreamRead(SinkMode.APPEND, keys, unchanged=True)
        if base is None:  # everything so far: the barrier's content, all inserts
            return UpstreamRead(SinkMode.APPEND, keys, (), self._content(target))
        commits = self._commits(base, target)
        if not any(commit.removed for commit in commits):
            return UpstreamRead(SinkMode.APPEND, keys, (), tuple(self._appended(commits)))
        before, after = self._changes(commits)
        return UpstreamRead(SinkMode.SNAPSHOT, keys, before, after)

    def _changes(
        self, commits: Sequence[Commit]
    ) -> tuple[tuple[SourceSplit, ...], tuple[SourceSplit, ...]]:
        """The files of the rows the commits removed, and of those they added."""
        before: list[SourceSplit] = []
        after: list[SourceSplit] = []
        for commit in commits:
            # A commit's change data holds exactly its changes, where the files it removed
            # and added also hold every row it copied unchanged.
            old = [(a, "removed") for a in commit.changes] or [(a, "") for a in commit.removed]
            new = [(a, "added") for a in commit.changes] or [(a, "") for a in commit.added]
            for action, rows in old:
                split = self._split(action, len(before), rows)
                self._check_present(split, commit)
                before.append(split)
            after.extend(self._split(a, len(after) + i, rows) for i, (a, rows) in enumerate(new))
        return tuple(before), tuple(after)

    def _check_present(self, split: SourceSplit, commit: Commit) -> None:
        """Removed files and change data are in no current version, so VACUUM may have
        deleted them: the epoch says which version it can no longer read, before any
        executor finds a file missing."""
        if not self.store.exists(split.key):
            raise self._error(
                f"version {commit.version} ({commit.operation}) can no longer be read: its "
                f"file {self.store.child(split.key)} is gone (VACUUM removed it), so the "
                "changes since the base checkpoint cannot be computed (restore to a newer "
                "checkpoint, or VACUUM with a retention longer than checkpoints are retained)"
            )

    def _content(self, version: int) -> tuple[SourceSplit, ...]:
        """The data files of a version's whole content, with their partition values."""
        table = self.table(version)
        if table is None:
            raise self._error(f"version {version} of the table can no longer be read")
        self._check_readable(table.metadata().configuration, version)
        features = table.protocol().reader_features or []
        if "deletionVectors" in features and table.deletion_vectors().read_all().num_rows:
            raise self._deletion_vectors(version)
        actions = pa.table(table.get_add_actions(flatten=True))
        # flattened, a partition column is `partition.<name>`, typed: back to the log's
        # text, which the executors cast to the declared type as they do the log's
        texts = {
            name.removeprefix("partition."): actions.column(name).cast(pa.string()).to_pylist()
            for name in actions.column_names
            if name.startswith("partition.")
        }
        files = zip(actions["path"].to_pylist(), actions["size_bytes"].to_pylist(), strict=True)
        return tuple(
            self._split(
                {"path": p, "size": n, "partitionValues": {c: t[i] for c, t in texts.items()}}, i
            )
            for i, (p, n) in enumerate(files)
        )

    def _split(self, action: Action, index: int, rows: str = "") -> SourceSplit:
        """A file of an add, remove or cdc action, as a key of the store."""
        path = unquote(str(action["path"]))  # the log's paths are URI-encoded
        if "://" in path:  # absolute (a shallow clone's): only within the store
            root = self.store.child("")
            if not path.startswith(root):
                raise self._error(f"data file {path} is outside the store ({root})")
            key = path[len(root) :].lstrip("/")
        else:
            key = self._root + path
        # the log writes a null partition value as "": None, as delta-rs (and so `_content`)
        values = {n: v or None for n, v in (action.get("partitionValues") or {}).items()} or None
        return SourceSplit(PARTITION, index, key, int(action.get("size") or 0), values, rows)

    # -- reading (on executors: no log, only the files) ---------------------------------

    def read_split(self, split: SourceSplit) -> pa.Table:
        uri = self.store.child(split.key)
        table = _without_views(self._parquet(split, uri))
        if split.rows:  # a change data file: the changes of one side
            kinds = pa.array(CHANGE_TYPES[split.rows])
            table = table.filter(pc.is_in(table.column(CHANGE_TYPE_COLUMN), kinds))
        for name, text in (split.values or {}).items():
            if name not in table.column_names:
                table = table.append_column(name, self._partition_column(name, text, table, uri))
        return select_declared(table, self.schema, uri)

    def _parquet(self, split: SourceSplit, uri: str) -> pa.Table:
        try:
            if split.size <= DEFAULT_DOWNLOAD_THRESHOLD:
                return _read_parquet(io.BytesIO(self.store.get(split.key).data), uri)
            with tempfile.TemporaryDirectory(prefix="bp-split-") as tmp:
                path = Path(tmp) / "split.parquet"
                self.store.download_file(split.key, path)
                return _read_parquet(path, uri)
        except ObjectNotFound:
            raise self._error(
                f"data file {uri} is gone (VACUUM removed it after the table was rewritten "
                "or compacted): this epoch's versions can no longer be read"
            ) from None

    def _partition_column(self, name: str, text: str | None, table: pa.Table, uri: str) -> pa.Array:
        """A partition column's value (the log's text) on every row, as declared."""
        declared = (
            self.schema.field(name).type if self.schema and name in self.schema.names else None
        )
        column = pa.array([text] * table.num_rows, pa.string())
        try:
            return _cast_partition_text(column, declared) if declared is not None else column
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise SourceDataError(
                uri, f"partition value {text!r} is not a {declared}", column=name
            ) from None


def _read_parquet(source: io.BytesIO | Path, uri: str) -> pa.Table:
    # A damaged file (torn, truncated, overwritten) is a finding naming it, not a traceback.
    try:
        return pq.read_table(source)
    except (pa.ArrowException, OSError) as exc:
        raise SourceDataError(uri, f"not a readable Parquet file: {exc}") from None


def _cast_partition_text(column: pa.Array, declared: pa.DataType) -> pa.Array:
    # A zoned timestamp's text is in UTC with no offset ('2024-01-02 03:04:05.678901'), or
    # from newer writers with one ('...Z', '...+01:00'): both read as the same instant.
    if pa.types.is_timestamp(declared) and declared.tz is not None:
        try:
            return column.cast(declared)
        except pa.ArrowInvalid:  # no offset: a naive time, cast to the zone as UTC
            return column.cast(pa.timestamp(declared.unit)).cast(declared)
    return column.cast(declared)


def _without_views(table: pa.Table) -> pa.Table:
    """delta-rs writes some files (a MERGE's) with Arrow's string and binary views, which
    pyarrow's filter cannot take yet: read as the plain types they stand for."""
    plain = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
    if not any(f.type in plain for f in table.schema):
        return table
    return table.cast(pa.schema([f.with_type(plain.get(f.type, f.type)) for f in table.schema]))
