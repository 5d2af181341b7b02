"""The checker's view of a table sink's Iceberg table, read raw: the catalog's row from
its SQLite file (sqlite3, no catalog code), the table's metadata JSON from the store,
and its manifest lists and manifests from the store too, decoded with pyiceberg's Avro
readers (the file format's reader only: no batchpoint code, no catalog, no table API).

What it judges (invariant 14): every snapshot the table still lists reads (each live
data file exists with the size and row count the manifest says), and the current
snapshot's rows.
"""

from __future__ import annotations

import io
import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile
from pyiceberg.manifest import ManifestEntryStatus, read_manifest_list

from batchpoint.errors import ObjectNotFound
from batchpoint.storage.base import ObjectStore

CHECKPOINT = "batchpoint.checkpoint-id"


class _BytesInput(InputFile):
    def __init__(self, location: str, data: bytes) -> None:
        super().__init__(location)
        self._data = data

    def __len__(self) -> int:
        return len(self._data)

    def exists(self) -> bool:
        return True

    def open(self, seekable: bool = True) -> InputStream:
        return io.BytesIO(self._data)


class StoreFileIO(FileIO):
    """Reads an Iceberg file through the store (the checker's raw reads); writes nothing."""

    def __init__(self, store: ObjectStore) -> None:
        super().__init__()
        self.store = store

    def key(self, location: str) -> str | None:
        prefix = self.store.child("")
        return location[len(prefix) :] if location.startswith(prefix) else None

    def new_input(self, location: str) -> InputFile:
        key = self.key(location)
        if key is None:
            raise FileNotFoundError(f"{location} is not in the store")
        return _BytesInput(location, self.store.get(key).data)

    def new_output(self, location: str) -> OutputFile:
        raise PermissionError("the checker writes nothing")

    def delete(self, location: str | InputFile | OutputFile) -> None:
        raise PermissionError("the checker deletes nothing")


@dataclass(frozen=True)
class DataFile:
    path: str  # as the manifest names it (the store's URI of a key)
    key: str | None  # None: not in the store
    size: int
    rows: int


@dataclass(frozen=True)
class TableSnapshot:
    snapshot_id: int
    checkpoint_id: int | None
    manifest_list: str


@dataclass(frozen=True)
class TableState:
    metadata_location: str
    current: int | None
    snapshots: dict[int, TableSnapshot]

    @property
    def position(self) -> int | None:
        """The checkpoint the current snapshot is stamped with."""
        snap = self.snapshots.get(self.current) if self.current is not None else None
        return snap.checkpoint_id if snap is not None else None


class TableReader:
    def __init__(
        self, store: ObjectStore, catalog: Path, catalog_name: str, identifier: str
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.catalog_name = catalog_name
        self.namespace, _, self.table = identifier.rpartition(".")
        self.io = StoreFileIO(store)
        self._files: dict[str, list[DataFile]] = {}  # manifest list -> live files
        self._rows: dict[tuple[str, int], int | None] = {}  # (key, size) -> Parquet rows

    def location(self) -> str | None:
        """The metadata file the catalog's row points at (None: no such table)."""
        if not self.catalog.exists():
            return None
        with closing(sqlite3.connect(f"file:{self.catalog}?mode=ro", uri=True)) as db:
            try:
                row = db.execute(
                    "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? "
                    "AND table_namespace = ? AND table_name = ?",
                    (self.catalog_name, self.namespace, self.table),
                ).fetchone()
            except sqlite3.OperationalError:
                return None  # the catalog's tables are not made yet
        return row[0] if row else None

    def state(self) -> TableState | None:
        location = self.location()
        if location is None:
            return None
        key = self.io.key(location)
        assert key is not None, f"table metadata outside the store: {location}"
        doc: dict[str, Any] = json.loads(self.store.get(key).data)
        snapshots = {}
        for s in doc.get("snapshots", []):
            text = (s.get("summary") or {}).get(CHECKPOINT, "")
            snapshots[int(s["snapshot-id"])] = TableSnapshot(
                int(s["snapshot-id"]), int(text) if text else None, s["manifest-list"]
            )
        current = doc.get("current-snapshot-id")
        current = None if current in (None, -1) else int(current)
        return TableState(location, current, snapshots)

    def files(self, snapshot: TableSnapshot) -> list[DataFile]:
        """The live data files a snapshot reads (manifests are immutable: cached)."""
        found = self._files.get(snapshot.manifest_list)
        if found is None:
            found = []
            for manifest in read_manifest_list(self.io.new_input(snapshot.manifest_list)):
                for entry in manifest.fetch_manifest_entry(self.io, discard_deleted=False):
                    if entry.status == ManifestEntryStatus.DELETED:
                        continue
                    f = entry.data_file
                    found.append(
                        DataFile(
                            f.file_path,
                            self.io.key(f.file_path),
                            int(f.file_size_in_bytes),
                            int(f.record_count),
                        )
                    )
            self._files[snapshot.manifest_list] = found
        return found

    def problems(self, state: TableState) -> Iterator[tuple[TableSnapshot, str]]:
        """Every snapshot listed whose data cannot be read as its manifest says."""
        for snapshot in state.snapshots.values():
            for f in self.files(snapshot):
                if f.key is None:
                    yield snapshot, f"{f.path} is outside the store"
                    continue
                info = self.store.head(f.key)
                if info is None:
                    yield snapshot, f"{f.key} is missing"
                elif info.size != f.size:
                    yield snapshot, f"{f.key} has {info.size} bytes, the manifest says {f.size}"
                elif self._row_count(f.key, info.size) != f.rows:
                    yield snapshot, f"{f.key} does not hold the {f.rows} rows the manifest says"

    def _row_count(self, key: str, size: int) -> int | None:
        if (key, size) not in self._rows:
            try:
                data = self.store.get(key).data
                self._rows[(key, size)] = pq.ParquetFile(io.BytesIO(data)).metadata.num_rows
            except (ObjectNotFound, OSError, ValueError):
                self._rows[(key, size)] = None
        return self._rows[(key, size)]

    def rows(self, state: TableState) -> list[dict[str, Any]]:
        """The current snapshot's rows."""
        if state.current is None:
            return []
        out: list[dict[str, Any]] = []
        for f in self.files(state.snapshots[state.current]):
            assert f.key is not None
            out += pq.read_table(io.BytesIO(self.store.get(f.key).data)).to_pylist()
        return out

    def referenced_keys(self, state: TableState) -> set[str]:
        return {f.key for s in state.snapshots.values() for f in self.files(s) if f.key}
