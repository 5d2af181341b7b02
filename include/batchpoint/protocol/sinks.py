"""Two-phase-commit sinks (Flink's TwoPhaseCommitSinkFunction, notifyCheckpointComplete).

A sink task stages its output as files under the checkpoint and acknowledges them like
state. When the checkpoint completes, `publish` records those files in the sink's
manifest; that is the commit, it is idempotent, and readers see nothing else. When a
checkpoint aborts, nothing publishes its staged files and GC removes them.

The manifest keeps the published epochs with their base, so the sink can be read as of
any published checkpoint by following the chain; a restore rewinds `current`, and the
next publication continues the chain from the restored checkpoint.

The manifest records the restore generation it is in: a restore's rewind raises it, and
a publish decided in an older generation is refused (STALE), so a publish decided
before a restore never takes effect after it. GC drops epochs no retained checkpoint,
head or current epoch reaches (`prune_unreachable`).

Table pins fence a table sink's sync against GC: before committing an epoch to its
table, the sync pins it in the manifest (a CAS, only while the epoch is still there),
and GC's pruning never drops a pinned epoch while the pin can still become a commit
(the table's current snapshot is the one the sync planned on). See
`protocol/table_pins.py`.
"""

from __future__ import annotations

import enum
import io
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from batchpoint import codec
from batchpoint.errors import CheckpointError
from batchpoint.protocol.cas import read_record, update_record
from batchpoint.protocol.checkpoint import CompletedCheckpoint, FileHandle
from batchpoint.protocol.layout import PipelineLayout, split_task_name
from batchpoint.protocol.table_pins import TablePin, live_pins
from batchpoint.protocol.timeline import is_stale
from batchpoint.storage.base import ObjectStore


class PublishResult(enum.StrEnum):
    """What `publish` did; truthy only when this call published."""

    PUBLISHED = "PUBLISHED"
    ALREADY_PUBLISHED = "ALREADY_PUBLISHED"
    STALE = "STALE"  # decided in an older restore generation: refused

    def __bool__(self) -> bool:
        return self is PublishResult.PUBLISHED


@dataclass(frozen=True)
class PublishedEpoch(codec.Value):
    checkpoint_id: int
    base_checkpoint_id: int | None = codec.field(missing=None)
    files: tuple[FileHandle, ...] = codec.field(missing=())
    # an imported savepoint standing for its original epoch
    alias_of: int | None = codec.field(default=None, omit=None)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)


@dataclass(frozen=True)
class SinkManifest(codec.Record):
    KIND = "sink-manifest"
    VERSION = 1

    sink: str
    mode: str
    key_columns: tuple[str, ...] = codec.field(missing=())
    current: int | None = codec.field(missing=None)
    # stored as the list of the epochs, oldest first
    epochs: Mapping[int, PublishedEpoch] = codec.field(keyed_by="checkpoint_id")
    generation: int = 0
    #: Epochs a table sync is about to commit to the sink's table (see TablePin); only
    #: while a sync is under way, so a manifest without pins reads and writes as before.
    pins: tuple[TablePin, ...] = codec.field(default=(), omit=(), missing=())

    def reachable(
        self, keep: Iterable[int], base_of: Callable[[int], int | None] | None = None
    ) -> set[int]:
        """The epochs a reader as of any of `keep` (or of `current`) needs: the whole
        chain in append mode, the epoch itself in snapshot mode. A kept checkpoint not
        published yet (a restore target, a completed one whose publish is pending) needs
        its nearest published ancestor's chain, found through `base_of`."""
        out: set[int] = set()
        for start in {*keep, self.current}:
            cid = start
            for _ in range(10_000):
                if cid is None or cid in self.epochs or base_of is None:
                    break
                cid = base_of(cid)
            if cid is None or cid not in self.epochs:
                continue
            chain = self.chain(cid)
            out.update(e.checkpoint_id for e in (chain if self.mode != "snapshot" else chain[-1:]))
        return out

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
        *,
        generation: int | None = None,
        descendants: Iterable[int] = (),
    ) -> PublishResult:
        """Commit a completed checkpoint's staged output of `sink`. `generation` is the
        restore generation the caller decided in (it checked that the checkpoint is on
        that generation's timeline); a manifest already in a newer one refuses (STALE).
        Without it, the checkpoint's own generation is used. `descendants`: checkpoints
        the caller knows build on this one (the newer part of the chain it publishes)."""
        files = tuple(
            h for ack in completed.acks if split_task_name(ack.task)[0] == sink for h in ack.handles
        )
        epoch = PublishedEpoch(completed.checkpoint_id, completed.pending.base_checkpoint_id, files)
        keys = tuple(key_columns)
        decided = completed.pending.restore_generation if generation is None else generation
        result = [PublishResult.ALREADY_PUBLISHED]
        lineage = {epoch.checkpoint_id, *descendants}

        def add(current: SinkManifest | None) -> SinkManifest | None:
            manifest = current or SinkManifest(sink, mode, keys, None, {}, decided)
            if is_stale(decided, manifest.generation):
                result[0] = PublishResult.STALE
                return None
            if epoch.checkpoint_id in manifest.epochs or _descends(manifest, lineage):
                # An epoch that descends from this one is published only after it (a
                # notify publishes the chain oldest first), so it was here and GC
                # dropped it: its files may be gone, it never comes back.
                result[0] = PublishResult.ALREADY_PUBLISHED
                return None
            result[0] = PublishResult.PUBLISHED
            newest = manifest.current
            if newest is None or epoch.checkpoint_id > newest:
                newest = epoch.checkpoint_id
            epochs = {**manifest.epochs, epoch.checkpoint_id: epoch}
            return SinkManifest(sink, mode, keys, newest, epochs, decided, manifest.pins)

        update_record(
            self._store, self._layout.sink_manifest(sink), SinkManifest.decode, _encode, add
        )
        return result[0]

    def rewind(
        self,
        sink: str,
        checkpoint_id: int | None,
        generation: int | None = None,
        alias_of: int | None = None,
    ) -> None:
        """After a restore: readers see the sink as of the restored checkpoint, and the
        manifest enters the restore's generation. A restore to a checkpoint imported from
        a savepoint of this pipeline keeps the original epoch's chain (an alias epoch)."""

        def move(current: SinkManifest | None) -> SinkManifest | None:
            if current is None:
                return None
            if generation is not None and not is_stale(current.generation, generation):
                # Rewound into this generation already (or a newer one): a roll-forward
                # that read the restore late must not move the sink back over epochs
                # published since.
                return None
            gen = current.generation if generation is None else generation
            epochs = dict(current.epochs)
            if checkpoint_id is not None and checkpoint_id not in epochs and alias_of in epochs:
                original = epochs[alias_of]
                epochs[checkpoint_id] = PublishedEpoch(
                    checkpoint_id, original.base_checkpoint_id, original.files, alias_of
                )
            target = checkpoint_id if checkpoint_id in epochs else None
            if target == current.current and gen == current.generation and epochs == current.epochs:
                return None
            return replace(current, current=target, epochs=epochs, generation=gen)

        update_record(
            self._store, self._layout.sink_manifest(sink), SinkManifest.decode, _encode, move
        )

    def rewind_all(
        self, checkpoint_id: int | None, generation: int, alias_of: int | None = None
    ) -> None:
        for sink in self.sink_names():
            self.rewind(sink, checkpoint_id, generation, alias_of)

    def prune_unreachable(
        self,
        sink: str,
        keep: Callable[[], Iterable[int]],
        base_of: Callable[[int], int | None] | None = None,
        table_head: Callable[[], int | None] | None = None,
    ) -> list[int]:
        """Drop the epochs no reader as of `keep()` (or current) needs. `keep` is read
        inside each CAS round, after the manifest: an epoch is published only after its
        checkpoint settled, so an epoch in the manifest read is judged by a retained set
        that already knows it. Returns the dropped checkpoint ids.

        The manifest speaks for batchpoint's readers only: a table sink's table may still
        read a dropped epoch's files (it lags, or keeps the snapshot until it is
        expired). Those files stay because GC takes the table's own snapshots as
        references (`protocol/sink_tables.py`), not because the epoch stays here.

        A pinned epoch (and, in append mode, its chain) is kept while its pin is live:
        `table_head()`, the table's current snapshot id, is read in each round after the
        manifest, so a pin put before that read is judged by a head at least as new as
        the one its sync planned on. Stale pins are dropped. Without `table_head`, or
        when it raises (the catalog is down), every pin counts as live."""
        dropped: list[int] = []

        def prune(current: SinkManifest | None) -> SinkManifest | None:
            dropped.clear()
            if current is None:
                return None
            pins = live_pins(current.pins, table_head)
            roots = set(keep()) | {p.checkpoint_id for p in pins}
            reachable = current.reachable(roots, base_of)
            gone = [c for c in current.epochs if c not in reachable]
            if not gone and pins == current.pins:
                return None
            dropped.extend(sorted(gone))
            epochs = {c: e for c, e in current.epochs.items() if c not in gone}
            return replace(current, epochs=epochs, pins=pins)

        update_record(
            self._store, self._layout.sink_manifest(sink), SinkManifest.decode, _encode, prune
        )
        return dropped

    def pin(self, sink: str, pin: TablePin, release: Iterable[TablePin] = ()) -> bool:
        """Pin an epoch for a table sync's commit (and drop the sync's earlier pins in
        `release`, in the same write). False, pinning nothing, when the epoch is no
        longer in the manifest: GC dropped it, and the sync must plan again."""
        drop = set(release)
        pinned = [False]

        def add(current: SinkManifest | None) -> SinkManifest | None:
            pinned[0] = current is not None and pin.checkpoint_id in current.epochs
            if current is None:
                return None
            pins = tuple(p for p in current.pins if p not in drop and p != pin)
            pins += (pin,) if pinned[0] else ()
            return replace(current, pins=pins) if pins != current.pins else None

        update_record(
            self._store, self._layout.sink_manifest(sink), SinkManifest.decode, _encode, add
        )
        return pinned[0]

    def unpin(self, sink: str, pins: Iterable[TablePin]) -> None:
        """Drop a sync's pins once its commits are in the table (or it gave up)."""
        drop = set(pins)

        def remove(current: SinkManifest | None) -> SinkManifest | None:
            if current is None or not drop & set(current.pins):
                return None
            return replace(current, pins=tuple(p for p in current.pins if p not in drop))

        if drop:
            update_record(
                self._store, self._layout.sink_manifest(sink), SinkManifest.decode, _encode, remove
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


def _descends(manifest: SinkManifest, lineage: set[int]) -> bool:
    """Whether an epoch of the manifest descends from the first of `lineage` (an epoch's
    id and the ids the caller knows build on it): a known descendant is published, or
    a published epoch is built on one of them."""
    return any(
        e.checkpoint_id in lineage or e.base_checkpoint_id in lineage
        for e in manifest.epochs.values()
    )


@dataclass(frozen=True)
class SinkPins:
    """One sink's pins, as its table sync uses them."""

    publisher: SinkPublisher
    sink: str

    def pin(self, pin: TablePin, release: Iterable[TablePin] = ()) -> bool:
        return self.publisher.pin(self.sink, pin, release)

    def unpin(self, pins: Iterable[TablePin]) -> None:
        self.publisher.unpin(self.sink, pins)


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
