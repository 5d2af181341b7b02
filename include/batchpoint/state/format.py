"""The keyed-state file format: Parquet files, one operator state per file, each file
owning a contiguous range of key groups.

A file holds the state's own columns plus ``_key_group`` (int32, the key group of the
row's key, computed once at write time so restores and rescales filter on a plain int
column instead of re-hashing keys). Rows are sorted by key group. The file's Parquet
schema metadata carries a small JSON header (format version, state name, key columns,
key-group range, schema fingerprint) so a file is self-describing even without its
handle, which is what makes savepoints relocatable.

A `StateHandle` is what a writer reports per file and what the protocol layer embeds in
ack records. Its JSON is a superset of `protocol.checkpoint.FileHandle`'s (same keys for
path, size, sha256, rows, key_group_range, name), so either side can read the other's.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from batchpoint import codec
from batchpoint.errors import BatchpointError
from batchpoint.state.keygroups import KeyGroupRange, KeyHash, key_group_range_for_subtask

#: What is written: 3 places keys with Spark's hash, as its hash partitioning does
#: (KeyHash.MURMUR3).
FORMAT_VERSION = 3
#: What is read. Formats 1 (the Python BLAKE2B key hash) and 2 (xxhash64) differ only in
#: how the stored `_key_group` was computed: restores filter on the stored column and new
#: snapshots rehash every row, so old checkpoints restore as they are, and a changelog is
#: never written over a base of another format (runtime/incremental.py).
READABLE_FORMATS = (1, 2, 3)
KEY_GROUP_COLUMN = "_key_group"
#: Used while writing and when reading for a new parallelism; never stored in files.
SUBTASK_COLUMN = "_subtask"
#: In changelog files only (layer > 0). A key in a changelog has all its rows as of that
#: layer there (`_change` CHANGE_ROW), or one CHANGE_GONE row when it has none left; a
#: reader takes each key's rows from the highest layer that has it. `_net` is the change
#: in the key's row count, on one of its rows (0 on the others), so a file's net row
#: count (`StateHandle.net_rows`) is its sum.
CHANGE_COLUMN = "_change"
NET_COLUMN = "_net"
CHANGE_ROW, CHANGE_GONE = 1, -1
RESERVED_COLUMNS = frozenset({KEY_GROUP_COLUMN, SUBTASK_COLUMN, CHANGE_COLUMN, NET_COLUMN})
CHANGELOG_COLUMNS = (CHANGE_COLUMN, NET_COLUMN)
METADATA_KEY = b"batchpoint.state"


# --- errors ---------------------------------------------------------------------------


class StateError(BatchpointError):
    """Keyed state that cannot be written or restored as asked."""


class StateSchemaMismatch(StateError):
    def __init__(self, path: str, differences: Sequence[str]) -> None:
        self.path = path
        self.differences = list(differences)
        super().__init__(
            f"state file '{path}' does not have the requested schema: " + "; ".join(differences)
        )


class StateFileCorrupt(StateError):
    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"state file '{path}' is corrupt: {problem}")


class StateCoverageError(StateError):
    """The handles do not cover the asked-for key groups exactly once."""


# --- files ----------------------------------------------------------------------------


def file_schema(state_schema: pa.Schema, header: Mapping[str, Any]) -> pa.Schema:
    """The Parquet schema of a state file: the state columns, then `_key_group`, then
    in a changelog file (header `layer` > 0) `_change`. A changelog's state columns are
    nullable: a CHANGE_GONE row holds only its key."""
    changelog = int(header.get("layer", 0)) > 0
    fields = [
        f.with_nullable(True) if changelog else f
        for f in state_schema
        if f.name not in RESERVED_COLUMNS
    ]
    fields.append(pa.field(KEY_GROUP_COLUMN, pa.int32(), nullable=False))
    if changelog:
        fields.append(pa.field(CHANGE_COLUMN, pa.int8(), nullable=False))
        fields.append(pa.field(NET_COLUMN, pa.int32(), nullable=False))
    return pa.schema(fields, metadata={METADATA_KEY: json.dumps(header).encode()})


def read_header(schema: pa.Schema, path: str) -> dict[str, Any]:
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise StateFileCorrupt(path, "it has no batchpoint header: not a state file")
    try:
        header = json.loads(raw)
    except ValueError as exc:
        raise StateFileCorrupt(path, f"unreadable header ({exc})") from None
    if header.get("format") not in READABLE_FORMATS:
        raise StateFileCorrupt(
            path,
            f"format version {header.get('format')!r}, this batchpoint reads "
            f"{', '.join(map(str, READABLE_FORMATS))}",
        )
    return header


def key_hash_of_format(version: int) -> KeyHash:
    """The key hash that placed the rows of files of format `version`."""
    if version not in READABLE_FORMATS:
        raise StateError(f"state format {version} is not one this batchpoint reads")
    return KeyHash(version)


# --- handles --------------------------------------------------------------------------


@dataclass(frozen=True)
class StateHandle(codec.Value):
    """One state file, as acknowledged by the task that wrote it."""

    path: str  # key relative to the store root
    size: int  # bytes
    sha256: str
    rows: int = codec.field(missing=0)
    key_group_range: KeyGroupRange = codec.field()
    name: str = codec.field(missing="")  # the operator state this file belongs to
    schema_fingerprint: str = ""
    subtask: int = -1
    parallelism: int = 0
    max_parallelism: int = 0
    task_attempt: str = ""
    format: int = codec.field(default=FORMAT_VERSION, missing=1)  # unnamed: before format 2
    # The rows' Spark schema (StructType JSON): a reader needs neither a Spark job nor a
    # download to learn it. Empty in handles written before it was recorded.
    spark_schema: str = codec.field(default="", omit="")
    # 0: a full snapshot of its key groups. n > 0: the n-th changelog on top of it (the
    # rows that changed since layer n-1, deletions included); a reader merges the layers
    # per key, the highest layer winning.
    layer: int = codec.field(default=0, omit=0)
    # A changelog's inserted minus deleted keys (its rows counts updates and deletions
    # too); for a full file, its rows.
    net_rows: int | None = codec.field(default=None, when="layer", doc="changelogs only")
    # Changelogs only: what a reader merges their rows on.
    key_columns: tuple[str, ...] = codec.field(default=(), when="layer", doc="changelogs only")

    @property
    def is_changelog(self) -> bool:
        return self.layer > 0

    @classmethod
    def coerce(cls, value: StateHandle | Mapping[str, Any] | Any) -> StateHandle:
        """Accept a StateHandle, its JSON, or any object with `to_json()` (FileHandle)."""
        if isinstance(value, StateHandle):
            return value
        if isinstance(value, Mapping):
            return cls.from_json(value)
        if hasattr(value, "to_json"):
            return cls.from_json(value.to_json(), getattr(value, "path", None))
        raise StateError(f"not a state handle: {value!r}")


def check_coverage(
    handles: Sequence[StateHandle], wanted: KeyGroupRange, what: str
) -> list[StateHandle]:
    """The handles overlapping `wanted`, after checking that together they cover every
    key group of `wanted` exactly once (a gap would silently lose state, an overlap
    would duplicate it)."""
    chosen = sorted(
        (h for h in handles if h.key_group_range.overlaps(wanted)),
        key=lambda h: (h.key_group_range.start, h.key_group_range.end),
    )
    next_group = wanted.start
    previous: StateHandle | None = None
    for handle in chosen:
        kgr = handle.key_group_range
        if kgr.start > next_group:
            raise StateCoverageError(
                f"{what}: no state file covers key groups [{next_group}, {kgr.start - 1}]"
            )
        if previous is not None and kgr.start <= previous.key_group_range.end:
            raise StateCoverageError(
                f"{what}: key groups [{kgr.start}, {min(kgr.end, previous.key_group_range.end)}]"
                f" are covered by both '{previous.path}' and '{handle.path}'"
            )
        next_group = kgr.end + 1
        previous = handle
    if next_group <= wanted.end:
        raise StateCoverageError(
            f"{what}: no state file covers key groups [{next_group}, {wanted.end}]"
        )
    return chosen


def state_rows(handles: Sequence[StateHandle]) -> int:
    """Rows of the state the handles hold once their layers are merged."""
    return sum(
        (h.net_rows if h.net_rows is not None else h.rows) if h.is_changelog else h.rows
        for h in handles
    )


def split_layers(
    handles: Sequence[StateHandle], wanted: KeyGroupRange, what: str
) -> tuple[list[StateHandle], dict[int, list[StateHandle]]]:
    """The full files over `wanted`, and each changelog layer's files over it, after
    checking that every layer covers `wanted` exactly once: a changelog with a gap would
    silently drop changes, one with an overlap would apply them twice."""
    layers: dict[int, list[StateHandle]] = {}
    for handle in handles:
        layers.setdefault(handle.layer, []).append(handle)
    if 0 not in layers:
        raise StateCoverageError(f"{what}: only changelog files, no full snapshot under them")
    full = check_coverage(layers.pop(0), wanted, what)
    changelogs = {
        n: check_coverage(layers[n], wanted, f"{what} changelog layer {n}") for n in sorted(layers)
    }
    return full, changelogs


def check_written_handles(
    handles: Sequence[StateHandle], parallelism: int, max_parallelism: int, state_name: str
) -> None:
    """After a write: each subtask's files tile exactly that subtask's key-group range."""
    for subtask in range(parallelism):
        own = [h for h in handles if h.subtask == subtask]
        if not own:
            raise StateCoverageError(f"state '{state_name}': subtask {subtask} wrote no file")
        wanted = key_group_range_for_subtask(max_parallelism, parallelism, subtask)
        stray = [h.path for h in own if not (wanted.start <= h.key_group_range.start)]
        stray += [h.path for h in own if h.key_group_range.end > wanted.end]
        if stray:
            raise StateCoverageError(
                f"state '{state_name}': files {stray} reach outside subtask {subtask}'s "
                f"key groups {wanted}"
            )
        check_coverage(own, wanted, f"state '{state_name}' subtask {subtask}")


# --- writing one file -----------------------------------------------------------------


class _HashingSink(io.RawIOBase):
    """A write-only file that hashes and counts what passes through, so the checksum
    costs no second read of the file."""

    def __init__(self, target: BinaryIO) -> None:
        super().__init__()
        self._target = target
        self.digest = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._target.write(view)
        self.digest.update(view)
        self.size += len(view)
        return len(view)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        if not self._target.closed:
            self._target.flush()

    def close(self) -> None:
        # ParquetWriter.close() closes its sink too; a second close must be harmless.
        if not self.closed:
            super().close()
            self._target.close()


@dataclass(frozen=True)
class WrittenFile:
    local_path: Path
    size: int
    sha256: str
    rows: int
    net_rows: int


class StateFileWriter:
    """Streams record batches of one state into one local Parquet file.

    Batches are buffered up to `row_group_bytes` and written as one row group, so the
    memory held is bounded by that buffer plus Parquet's per-row-group encoding buffers,
    whatever the file's final size.
    """

    def __init__(
        self,
        local_path: Path,
        schema: pa.Schema,
        *,
        row_group_bytes: int = 8 << 20,
        compression: str = "zstd",
    ) -> None:
        self.local_path = local_path
        self.schema = schema
        self._sink = _HashingSink(open(local_path, "wb"))  # noqa: SIM115 - closed in close()
        self._writer = pq.ParquetWriter(self._sink, schema, compression=compression)
        self._row_group_bytes = row_group_bytes
        self._buffer: list[pa.RecordBatch] = []
        self._buffered = 0
        self.rows = 0
        self._net = schema.get_field_index(NET_COLUMN)
        self.net_rows = 0

    @property
    def bytes_written(self) -> int:
        """Bytes flushed to disk so far (buffered rows not included)."""
        return self._sink.size

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self._buffer.append(batch)
        self._buffered += batch.nbytes
        self.rows += batch.num_rows
        if self._net >= 0:
            self.net_rows += int(pc.sum(batch.column(self._net)).as_py() or 0)
        else:
            self.net_rows += batch.num_rows
        if self._buffered >= self._row_group_bytes:
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            self._writer.write_table(pa.Table.from_batches(self._buffer, schema=self.schema))
            self._buffer.clear()
            self._buffered = 0

    def close(self, extra_metadata: Mapping[str, str] | None = None) -> WrittenFile:
        """Finish the file; `extra_metadata` goes into the footer (things only known at
        the end, such as where a rolled file's key-group range ends)."""
        self.flush()
        if extra_metadata:
            self._writer.add_key_value_metadata(dict(extra_metadata))
        self._writer.close()  # an empty file still gets the schema and the header
        self._sink.close()
        return WrittenFile(
            self.local_path,
            self._sink.size,
            self._sink.digest.hexdigest(),
            self.rows,
            self.net_rows,
        )

    def abort(self) -> None:
        try:
            self._writer.close()
        finally:
            self._sink.close()
            self.local_path.unlink(missing_ok=True)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
