"""Two-phase-commit sinks (Flink's TwoPhaseCommitSinkFunction, notifyCheckpointComplete).

A sink task stages its output as files under the checkpoint and acknowledges them like
state. When the checkpoint completes, `publish` records those files in the sink's
manifest; that is the commit, it is idempotent, and readers see nothing else. When a
checkpoint aborts, nothing publishes its staged files and GC removes them.

The manifest keeps every published epoch with its base, so the sink can be read as of
any published checkpoint by following the chain; a restore rewinds `current`, and the
next publication continues the chain from the restored checkpoint.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from batchpoint.errors import CheckpointError, CorruptRecord
from batchpoint.protocol import records
from batchpoint.protocol.cas import read_record, update_record
from batchpoint.protocol.checkpoint import CompletedCheckpoint, FileHandle
from batchpoint.protocol.layout import PipelineLayout, split_task_name
from batchpoint.storage.base import ObjectStore


@dataclass(frozen=True)
class PublishedEpoch:
    checkpoint_id: int
    base_checkpoint_id: int | None
    files: tuple[FileHandle, ...]

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)


@dataclass(frozen=True)
class SinkManifest:
    KIND = "sink-manifest"
    VERSION = 1

    sink: str
    mode: str
    key_columns: tuple[str, ...]
    current: int | None
    epochs: Mapping[int, PublishedEpoch]

    def chain(self, as_of: int | None = None) -> list[PublishedEpoch]:
        """The published epochs visible as of a checkpoint, oldest first."""
        cid = self.current if as_of is None else as_of
        if cid is not None and cid not in self.epochs:
            raise CheckpointError(
                f"sink '{self.sink}' has published no checkpoint {cid} "
                f"(published: {sorted(self.epochs) or 'none'})"
            )
        out: list[PublishedEpoch] = []
        while cid is not None and cid in self.epochs:
            epoch = self.epochs[cid]
            out.append(epoch)
            cid = epoch.base_checkpoint_id
        return out[::-1]

    def encode(self) -> bytes:
        return records.encode(
            self.KIND,
            self.VERSION,
            {
                "sink": self.sink,
                "mode": self.mode,
                "key_columns": list(self.key_columns),
                "current": self.current,
                "epochs": [
                    {
                        "checkpoint_id": e.checkpoint_id,
                        "base_checkpoint_id": e.base_checkpoint_id,
                        "files": [f.to_json() for f in e.files],
                    }
                    for e in sorted(self.epochs.values(), key=lambda e: e.checkpoint_id)
                ],
            },
        )

    @classmethod
    def decode(cls, key: str, data: bytes) -> SinkManifest:
        _, body = records.decode(key, data, cls.KIND, (cls.VERSION,))
        epochs: dict[int, PublishedEpoch] = {}
        for entry in records.field(key, body, "epochs", list):
            if not isinstance(entry, dict):
                raise CorruptRecord(key, f"bad epoch entry {entry!r}")
            epoch = PublishedEpoch(
                records.field(key, entry, "checkpoint_id", int),
                entry.get("base_checkpoint_id"),
                tuple(FileHandle.from_json(key, f) for f in entry.get("files", [])),
            )
            epochs[epoch.checkpoint_id] = epoch
        return cls(
            records.field(key, body, "sink", str),
            records.field(key, body, "mode", str),
            tuple(body.get("key_columns", [])),
            body.get("current"),
            epochs,
        )


class SinkPublisher:
    def __init__(self, store: ObjectStore, layout: PipelineLayout) -> None:
        self._store = store
        self._layout = layout

    def manifest(self, sink: str) -> SinkManifest | None:
        found = read_record(self._store, self._layout.sink_manifest(sink), SinkManifest.decode)
        return found[0] if found else None

    def publish(
        self,
        completed: CompletedCheckpoint,
        sink: str,
        mode: str,
        key_columns: Iterable[str],
        parents: Mapping[int, int | None] | None = None,
    ) -> bool:
        """Commit a completed checkpoint's staged output of `sink`; False if it was
        published already. `parents` lets a caller publish a chain in one go."""
        files = tuple(
            h for ack in completed.acks if split_task_name(ack.task)[0] == sink for h in ack.handles
        )
        epoch = PublishedEpoch(completed.checkpoint_id, completed.pending.base_checkpoint_id, files)
        keys = tuple(key_columns)
        published = []

        def add(current: SinkManifest | None) -> SinkManifest | None:
            published.clear()
            manifest = current or SinkManifest(sink, mode, keys, None, {})
            if epoch.checkpoint_id in manifest.epochs:
                return None
            published.append(True)
            newest = manifest.current
            if newest is None or epoch.checkpoint_id > newest:
                newest = epoch.checkpoint_id
            epochs = {**manifest.epochs, epoch.checkpoint_id: epoch}
            return SinkManifest(sink, mode, keys, newest, epochs)

        update_record(
            self._store, self._layout.sink_manifest(sink), SinkManifest.decode, _encode, add
        )
        return bool(published)

    def rewind(self, sink: str, checkpoint_id: int | None) -> None:
        """After a restore: readers see the sink as of the restored checkpoint."""

        def move(current: SinkManifest | None) -> SinkManifest | None:
            if current is None or current.current == checkpoint_id:
                return None
            target = checkpoint_id if checkpoint_id in current.epochs else None
            return SinkManifest(
                current.sink, current.mode, current.key_columns, target, current.epochs
            )

        update_record(
            self._store, self._layout.sink_manifest(sink), SinkManifest.decode, _encode, move
        )

    def sink_names(self) -> list[str]:
        prefix = self._layout.root + "sinks/"
        return [p[len(prefix) :].rstrip("/") for p in self._store.list_dirs(prefix)]

    def referenced_files(self, sinks: Iterable[str] | None = None) -> set[str]:
        """Every published file (of the named sinks, or of all): GC must keep them while
        a manifest lists them."""
        out: set[str] = set()
        for sink in self.sink_names() if sinks is None else sinks:
            manifest = self.manifest(sink)
            if manifest is not None:
                out.update(f.path for e in manifest.epochs.values() for f in e.files)
        return out


def visible_files(manifest: SinkManifest, as_of: int | None = None) -> list[FileHandle]:
    """The files a reader of the sink sees, as of a published checkpoint (or now)."""
    chain = manifest.chain(as_of)
    if not chain:
        return []
    if manifest.mode == "snapshot":
        return list(chain[-1].files)
    return [f for epoch in chain for f in epoch.files]


def read_sink_table(
    store: ObjectStore, pipeline: str, sink: str, as_of: int | None = None
) -> pa.Table:
    """A sink's published content as one Arrow table (for checks and small sinks; Spark
    readers use the same `visible_files`)."""
    manifest = SinkPublisher(store, PipelineLayout(pipeline)).manifest(sink)
    if manifest is None:
        raise CheckpointError(f"sink '{sink}' of pipeline '{pipeline}' has published nothing")
    tables = []
    for handle in visible_files(manifest, as_of):
        table = pq.read_table(io.BytesIO(store.get(handle.path).data))
        tables.append(table.drop_columns([c for c in table.column_names if c.startswith("_")]))
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables, promote_options="permissive")


def _encode(manifest: SinkManifest) -> bytes:
    return manifest.encode()


def describe(manifest: SinkManifest) -> dict[str, Any]:
    chain = manifest.chain()
    return {
        "sink": manifest.sink,
        "current": manifest.current,
        "epochs": [e.checkpoint_id for e in chain],
        "rows": sum(e.rows for e in chain),
    }
