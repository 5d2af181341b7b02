"""A partitioned, append-only file source: `<root>/<partition>/<file>` in an ObjectStore.

Files of a partition are ordered by name (relative to the partition folder) and an offset
is a position in that order, so producers must name files so that each new one sorts
after the ones already there (e.g. a zero-padded arrival sequence or timestamp). Names
whose path has a part starting with '.' or '_' are in-flight or bookkeeping files
(`.part`, `_SUCCESS`, `_temporary/`) and are not part of the source.

The trigger calls `capture_barrier()`; epoch N reads `files_between(base, barrier_N)`,
one `SourceSplit` per file, each of which any worker can `read_split()` on its own.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from batchpoint import codec
from batchpoint.errors import ConfigError, ObjectNotFound
from batchpoint.sources.barrier import (
    FileEntry,
    PartitionOffset,
    SourceBarrier,
    verify_offset,
)
from batchpoint.sources.errors import SourceOffsetError
from batchpoint.sources.readers import FORMATS, read_table
from batchpoint.storage.base import ObjectStore

#: Files larger than this are downloaded to a temporary file instead of held in memory.
DEFAULT_DOWNLOAD_THRESHOLD = 64 << 20


def is_hidden(relative_name: str) -> bool:
    return any(part.startswith((".", "_")) for part in relative_name.split("/"))


@dataclass(frozen=True)
class SourceSplit(codec.Value):
    """One file of one partition, at position `index` (0-based) in the name order."""

    partition: str
    index: int
    key: str
    size: int
    # A Delta table's file (sources/delta_table.py): the values of the table's partition
    # columns, which the log holds and the file does not (as the log writes them); an
    # Iceberg table's (sources/iceberg_table.py): the field id of each column read, by
    # name, which the file's own column names may not match; ...
    values: Mapping[str, str | None] | None = codec.field(
        default=None,
        omit=None,
        doc="a Delta table's partition values the file does not hold, or an Iceberg "
        "table's field ids by column name",
    )
    # ... and of a change data file, which of its changes to read ("removed": deletes and
    # pre-images, "added": inserts and post-images; "": every row of a data file).
    rows: str = codec.field(
        default="", omit="", doc="a Delta change data file's side: 'removed' or 'added'"
    )


class PartitionedFileSource:
    """Partitions are the declared `partitions`, or else every non-hidden folder under
    the root (so a partition that appears later joins the next barrier at offset 0).

    `schema` is needed only to read: a field declared `nullable=False` is required and
    must never be null (declare key columns that way); see `batchpoint.sources.readers`.
    """

    def __init__(
        self,
        store: ObjectStore,
        root_key: str,
        format: str,
        partitions: Sequence[str] | None = None,
        *,
        schema: pa.Schema | None = None,
        download_threshold: int = DEFAULT_DOWNLOAD_THRESHOLD,
    ) -> None:
        if format not in FORMATS:
            raise ConfigError(
                f"source format '{format}' is not supported (use one of {', '.join(FORMATS)})"
            )
        self.store = store
        self.root_key = root_key.strip("/")
        self.format = format
        self.schema = schema
        self.download_threshold = download_threshold
        self._declared = None if partitions is None else _check_partitions(partitions)

    @property
    def uri(self) -> str:
        return self.store.child(self.root_key) if self.root_key else self.store.uri

    def _root_prefix(self) -> str:
        return f"{self.root_key}/" if self.root_key else ""

    def _prefix(self, partition: str) -> str:
        return f"{self._root_prefix()}{partition}/"

    # -- listing ------------------------------------------------------------------------

    def partitions(self) -> list[str]:
        if self._declared is not None:
            return list(self._declared)
        root = self._root_prefix()
        names = (folder[len(root) :].rstrip("/") for folder in self.store.list_dirs(root))
        return sorted(name for name in names if name and not is_hidden(name))

    def _listing(self, partition: str) -> list[FileEntry]:
        prefix = self._prefix(partition)
        entries = [
            FileEntry(key[len(prefix) :], size) for key, size in self.store.list_sizes(prefix)
        ]
        # Sort here rather than trust each backend's listing order: offsets depend on it.
        return sorted((e for e in entries if not is_hidden(e.name)), key=lambda e: e.name)

    def list_files(self, partition: str) -> list[str]:
        """Keys of the partition's files, in name order (the order offsets count in)."""
        prefix = self._prefix(partition)
        return [prefix + entry.name for entry in self._listing(partition)]

    # -- barriers and splits ------------------------------------------------------------

    def capture_barrier(self) -> SourceBarrier:
        """The current end of every partition: what an epoch triggered now reads up to.
        A root that holds files but no partition folder is refused: those files would
        never be read, and every epoch would run on nothing."""
        partitions = self.partitions()
        if not partitions:
            self._refuse_files_at_the_root()
        return SourceBarrier({p: PartitionOffset.capture(self._listing(p)) for p in partitions})

    def _refuse_files_at_the_root(self) -> None:
        root = self._root_prefix()
        names = (key[len(root) :] for key, _ in self.store.list_sizes(root))
        stray = [name for name in names if "/" not in name and not is_hidden(name)]
        if stray:
            shown = ", ".join(sorted(stray)[:3]) + (", ..." if len(stray) > 3 else "")
            raise ConfigError(
                f"source {self.uri} has {len(stray)} file(s) directly under its root "
                f"({shown}) and no partition folder: files are read from "
                "<root>/<partition>/<file>, so these would never be read; move them into "
                "a partition folder (for example <root>/p0/)"
            )

    def verify_barrier(self, barrier: SourceBarrier | Mapping[str, object]) -> None:
        """Raise SourceOffsetError unless every offset still covers the files it covered
        when it was captured."""
        for partition, offset in SourceBarrier.coerce(barrier).items():
            verify_offset(
                partition,
                offset,
                self._listing(partition),
                uri=self.store.child(self._prefix(partition)),
            )

    def files_between(
        self,
        start: SourceBarrier | Mapping[str, object] | None,
        end: SourceBarrier | Mapping[str, object],
    ) -> list[SourceSplit]:
        """Every file after `start` up to `end`, by partition then position. A partition
        `start` does not name starts at 0; one that `end` does not name is an error (its
        files would be skipped), unless `start` has it at 0: a folder seen empty (a
        writer's temporary files) that is gone covered nothing, and refusing it would
        refuse every epoch built on that start. `None` as `start` means the beginning."""
        start, end = SourceBarrier.coerce(start), SourceBarrier.coerce(end)
        for partition in start:
            if partition not in end and start.offset(partition) > 0:
                raise SourceOffsetError(
                    partition,
                    f"the start barrier has it at offset {start.offset(partition)} but the "
                    "end barrier does not name it: the barriers belong to different sources "
                    "or the partition disappeared",
                    uri=self.store.child(self._prefix(partition)),
                )
        splits: list[SourceSplit] = []
        for partition, stop in end.items():
            splits.extend(self._partition_splits(partition, start.get(partition), stop))
        return splits

    def _partition_splits(
        self, partition: str, begin: PartitionOffset | None, stop: PartitionOffset
    ) -> Iterable[SourceSplit]:
        _check_partitions([partition])
        begin = begin or PartitionOffset(0)
        uri = self.store.child(self._prefix(partition))
        if stop.offset < begin.offset:
            raise SourceOffsetError(
                partition,
                f"the end offset {stop.offset} is before the start offset {begin.offset}: "
                "the barriers are out of order",
                uri=uri,
            )
        files = self._listing(partition)
        verify_offset(partition, begin, files, uri=uri)
        verify_offset(partition, stop, files, uri=uri)
        prefix = self._prefix(partition)
        for index in range(begin.offset, stop.offset):
            entry = files[index]
            yield SourceSplit(partition, index, prefix + entry.name, entry.size)

    # -- reading ------------------------------------------------------------------------

    def read_split(self, split: SourceSplit) -> pa.Table:
        """The file's records as a table of the declared schema; SourceDataError if the
        file is malformed, SourceOffsetError if it vanished or changed since it was listed."""
        if self.schema is None:
            raise ConfigError(f"source {self.uri} has no declared schema, so it cannot read files")
        uri = self.store.child(split.key)
        if split.size > self.download_threshold:
            with tempfile.TemporaryDirectory(prefix="bp-split-") as tmp:
                path = Path(tmp) / "split"
                try:
                    info = self.store.download_file(split.key, path)
                except ObjectNotFound:
                    raise self._vanished(split) from None
                self._check_size(split, info.size)
                with path.open("rb") as handle:
                    return read_table(handle, self.format, self.schema, uri)
        try:
            data = self.store.get(split.key).data
        except ObjectNotFound:
            raise self._vanished(split) from None
        self._check_size(split, len(data))
        return read_table(io.BytesIO(data), self.format, self.schema, uri)

    def read_splits(self, splits: Iterable[SourceSplit]) -> pa.Table:
        tables = [self.read_split(split) for split in splits]
        if not tables:
            if self.schema is None:
                raise ConfigError(f"source {self.uri} has no declared schema")
            return self.schema.empty_table()
        return pa.concat_tables(tables)

    def _vanished(self, split: SourceSplit) -> SourceOffsetError:
        return SourceOffsetError(
            split.partition,
            f"file {self.store.child(split.key)} (position {split.index}) was listed for "
            "this epoch but no longer exists (the source is append-only)",
            uri=self.store.child(self._prefix(split.partition)),
        )

    def _check_size(self, split: SourceSplit, size: int) -> None:
        if size != split.size:
            raise SourceOffsetError(
                split.partition,
                f"file {self.store.child(split.key)} had {split.size} bytes when it was "
                f"listed and has {size} now: it was rewritten (the source is append-only)",
                uri=self.store.child(self._prefix(split.partition)),
            )


def _check_partitions(partitions: Sequence[str]) -> tuple[str, ...]:
    if isinstance(partitions, str):
        raise ConfigError(
            f"source partitions must be a list of names, got the string {partitions!r}"
        )
    seen: set[str] = set()
    for name in partitions:
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            raise ConfigError(f"source partition name {name!r} is invalid: use a folder name")
        if name in seen:
            raise ConfigError(f"source partition '{name}' is declared twice")
        seen.add(name)
    return tuple(partitions)
