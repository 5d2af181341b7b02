"""Two-phase-commit sinks (Flink's TwoPhaseCommitSinkFunction, notifyCheckpointComplete).

A sink task stages its output as files under the checkpoint and acknowledges them like
state. When the checkpoint completes, `publish` records those files in the sink's
manifest; that is the commit, it is idempotent, and readers see nothing else. When a
checkpoint aborts, nothing publishes its staged files and GC removes them.

The manifest keeps the published epochs with their base, so the sink can be read as of
any published checkpoint by following the chain; a restore rewinds `current`, and the
next publication continues the chain from the restored checkpoint.

A sink is its uid (invariant 17): its manifest is stored at the uid's key, and its
output is what the acks of that uid staged as the sink stream, whatever the tasks were
called when they ran (a publish may cover an older checkpoint, written under an older
name). Callers name a sink by uid, or by a `SinkRef` that also names the keys an older
release may have kept its manifest under (protocol/sink_keys.py adopts them).

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

from batchpoint.errors import CheckpointError, RecordError
from batchpoint.protocol.checkpoint import CompletedCheckpoint, FileHandle, PendingCheckpoint
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.sink_keys import ManifestKeys, SinkRef
from batchpoint.protocol.sink_manifest import (
    PublishedEpoch,
    SinkManifest,
    SinkMode,
    descends,
    nearest_published,
    supersedes,
    visible_files,
)
from batchpoint.protocol.sink_timeline import extend
from batchpoint.protocol.table_pins import TablePin, live_pins
from batchpoint.protocol.timeline import is_stale
from batchpoint.protocol.topology import SINK_STREAM_NAME
from batchpoint.storage.base import ObjectStore

__all__ = [
    "PublishResult",
    "PublishedEpoch",
    "SinkManifest",
    "SinkPins",
    "SinkPublisher",
    "SinkRef",
    "describe",
    "read_sink_table",
    "staged_output",
    "supersedes",
    "visible_files",
]

Sink = str | SinkRef  # a uid, or a ref with the sink's label and older keys


class PublishResult(enum.StrEnum):
    """What `publish` did; truthy only when this call published."""

    PUBLISHED = "PUBLISHED"
    ALREADY_PUBLISHED = "ALREADY_PUBLISHED"
    STALE = "STALE"  # decided in an older restore generation: refused

    def __bool__(self) -> bool:
        return self is PublishResult.PUBLISHED


def staged_output(completed: CompletedCheckpoint, uid: str) -> tuple[FileHandle, ...]:
    """What the sink `uid` staged in a checkpoint: the sink stream of its acks, found by
    the acks' operator uid (an operator may share the uid: its streams are others)."""
    return tuple(
        h
        for ack in completed.acks
        if ack.operator_uid == uid
        for h in ack.handles
        if h.name == SINK_STREAM_NAME
    )


def rewound(
    current: SinkManifest | None,
    checkpoint_id: int | None,
    generation: int | None = None,
    alias_of: int | None = None,
    base_of: Callable[[int], int | None] | None = None,
) -> SinkManifest | None:
    """The manifest as a restore to `checkpoint_id` in `generation` leaves it (None: as
    it is). It writes nothing (`base_of` may read records): the rewind writes it; a
    reader of another pipeline's sink sees a restore committed but not rewound yet
    through it. A target never published leaves readers at its nearest published
    ancestor (`base_of`), as before it completed."""
    if current is None:
        return None
    if generation is not None and not is_stale(current.generation, generation):
        # Rewound into this generation already (or a newer one): a roll-forward that
        # read the restore late must not move the sink back over epochs published since.
        return None
    gen = current.generation if generation is None else generation
    epochs = dict(current.epochs)
    if checkpoint_id is not None and checkpoint_id not in epochs and alias_of in epochs:
        original = epochs[alias_of]
        alias = PublishedEpoch(checkpoint_id, original.base_checkpoint_id, original.files, alias_of)
        # named in the restore's generation, as an import is when published
        epochs[checkpoint_id] = _with_timeline(current, alias, gen)
    target = nearest_published(checkpoint_id, epochs, base_of)
    if target == current.current and gen == current.generation and epochs == current.epochs:
        return None
    return replace(current, current=target, epochs=epochs, generation=gen)


class SinkPublisher:
    def __init__(self, store: ObjectStore, layout: PipelineLayout) -> None:
        self._store = store
        self._layout = layout
        self._keys = ManifestKeys(store, layout)

    def read_table(self, sink: Sink, as_of: int | None = None) -> pa.Table:
        """The sink's published content as one Arrow table (`read_sink_table`)."""
        return read_sink_table(self._store, self._layout.pipeline, sink, as_of)

    def manifest(self, sink: Sink) -> SinkManifest | None:
        """The sink's manifest (before its adoption, what its older keys hold)."""
        return self._keys.read(sink)

    def publish(
        self,
        completed: CompletedCheckpoint,
        sink: Sink,
        mode: SinkMode | str,
        key_columns: Iterable[str],
        parents: Mapping[int, int | None] | None = None,
        *,
        generation: int | None = None,
        descendants: Iterable[int] = (),
        confirm: Callable[[], bool] | None = None,
    ) -> PublishResult:
        """Commit a completed checkpoint's staged output of `sink`. `generation` is the
        restore generation the caller decided in (it checked that the checkpoint is on
        that generation's timeline); a manifest already in a newer one refuses (STALE).
        Without it, the checkpoint's own generation is used. `descendants`: checkpoints
        the caller knows build on this one (the newer part of the chain it publishes).

        `confirm` says whether `generation` still holds (the control record read again).
        With it, a manifest that holds no epoch yet is first created empty (or found so:
        another publisher's, maybe not confirmed yet) and `confirm` asked before an epoch
        goes into it: a restore listed the manifests to rewind before it existed only if
        that restore committed before the answer, which then says STALE (invariant 10)."""
        uid = SinkRef.of(sink).uid
        epoch = PublishedEpoch(
            completed.checkpoint_id, self._published_base(completed), staged_output(completed, uid)
        )
        decided = completed.pending.restore_generation if generation is None else generation
        empty = SinkManifest(uid, SinkMode(mode), tuple(key_columns), None, {}, decided)
        result = [PublishResult.ALREADY_PUBLISHED]
        unconfirmed, confirmed = [False], [confirm is None]
        lineage = {epoch.checkpoint_id, *descendants}
        step = _timeline_generation(completed, decided)

        def add(current: SinkManifest | None) -> SinkManifest | None:
            manifest = empty if current is None else current
            unconfirmed[0] = False
            if is_stale(decided, manifest.generation):
                result[0] = PublishResult.STALE
                return None
            if epoch.checkpoint_id in manifest.epochs or descends(manifest, lineage, step):
                # An epoch that descends from this one is published only after it (a
                # notify publishes the chain oldest first), so it was here and GC
                # dropped it: its files may be gone, it never comes back.
                result[0] = PublishResult.ALREADY_PUBLISHED
                return None
            if not manifest.epochs and not confirmed[0]:
                unconfirmed[0] = True  # created (or found) empty: confirm, then publish
                return empty if current is None else None
            result[0] = PublishResult.PUBLISHED
            return _with_epoch(manifest, empty, epoch, step)

        self._keys.update(sink, add)
        if unconfirmed[0] and confirm is not None:
            if not confirm():
                return PublishResult.STALE
            confirmed[0] = True
            self._keys.update(sink, add)
        return result[0]

    def _published_base(self, completed: CompletedCheckpoint) -> int | None:
        return published_base(completed.pending, self._store.uri)

    def rewind(
        self,
        sink: Sink,
        checkpoint_id: int | None,
        generation: int | None = None,
        alias_of: int | None = None,
        base_of: Callable[[int], int | None] | None = None,
    ) -> bool:
        """After a restore: readers see the sink as of the restored checkpoint, and the
        manifest enters the restore's generation. A restore to a checkpoint imported from
        a savepoint of this pipeline keeps the original epoch's chain (an alias epoch).
        False when the sink has no manifest."""

        def move(current: SinkManifest | None) -> SinkManifest | None:
            return rewound(current, checkpoint_id, generation, alias_of, base_of)

        return self._keys.update(sink, move) is not None

    def unreadable(self) -> list[str]:
        """The manifests a rewind could not read (each with why): a restore checks them
        before its head moves, which it cannot take back once the rewind fails."""
        return self._keys.unreadable()

    def rewind_all(
        self,
        checkpoint_id: int | None,
        generation: int,
        alias_of: int | None = None,
        base_of: Callable[[int], int | None] | None = None,
    ) -> None:
        """Rewind every stored manifest (a sink's under an older key too: an adoption
        after this copies it rewound, one during it is followed to its uid)."""
        self._keys.each_key(
            lambda key: self.rewind(key, checkpoint_id, generation, alias_of, base_of)
        )

    def prune_unreachable(
        self,
        sink: Sink,
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

        self._keys.update(sink, prune)
        return dropped

    def pin(self, sink: Sink, pin: TablePin, release: Iterable[TablePin] = ()) -> bool:
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

        self._keys.update(sink, add)
        return pinned[0]

    def unpin(self, sink: Sink, pins: Iterable[TablePin]) -> None:
        """Drop a sync's pins once its commits are in the table (or it gave up)."""
        drop = set(pins)

        def remove(current: SinkManifest | None) -> SinkManifest | None:
            if current is None or not drop & set(current.pins):
                return None
            return replace(current, pins=tuple(p for p in current.pins if p not in drop))

        if drop:
            self._keys.update(sink, remove)

    def sink_names(self) -> list[str]:
        """The keys of the stored manifests: sinks' uids (and, until adopted, a name an
        older release kept a manifest under)."""
        return self._keys.keys()

    def stored(self) -> list[tuple[str, SinkManifest | RecordError]]:
        """Every stored manifest by key (or why it cannot be read), each read after a
        listing that shows every manifest adopted meanwhile (see `each_key`)."""
        out: list[tuple[str, SinkManifest | RecordError]] = []

        def read(key: str) -> bool:
            try:
                manifest = self._keys.read(key)
            except RecordError as exc:
                out.append((key, exc))
                return True
            if manifest is not None:
                out.append((key, manifest))
            return manifest is not None

        self._keys.each_key(read)
        return out

    def referenced_files(self, sinks: Iterable[Sink] | None = None) -> set[str]:
        """Every published file (of the given sinks, or of all): GC must keep them while
        a manifest lists them."""
        if sinks is None:
            manifests = [m for _, m in self.stored() if isinstance(m, SinkManifest)]
        else:
            manifests = [m for m in map(self.manifest, sinks) if m is not None]
        return {f.path for m in manifests for e in m.epochs.values() for f in e.files}


@dataclass(frozen=True)
class SinkPins:
    """One sink's pins, as its table sync uses them."""

    publisher: SinkPublisher
    sink: Sink

    def pin(self, pin: TablePin, release: Iterable[TablePin] = ()) -> bool:
        return self.publisher.pin(self.sink, pin, release)

    def unpin(self, pins: Iterable[TablePin]) -> None:
        self.publisher.unpin(self.sink, pins)


def read_sink_table(
    store: ObjectStore, pipeline: str, sink: Sink, as_of: int | None = None
) -> pa.Table:
    """A sink's published content as one Arrow table (for checks and small sinks; Spark
    readers use the same `visible_files`)."""
    manifest = SinkPublisher(store, PipelineLayout(pipeline)).manifest(sink)
    if manifest is None or not manifest.epochs:  # a first publish creates it empty
        label = SinkRef.of(sink).label
        raise CheckpointError(f"sink '{label}' of pipeline '{pipeline}' has published nothing")
    tables = []
    for handle in visible_files(manifest, as_of):
        table = pq.read_table(io.BytesIO(store.get(handle.path).data))
        tables.append(table.drop_columns([c for c in table.column_names if c.startswith("_")]))
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables, promote_options="permissive")


def describe(manifest: SinkManifest) -> dict[str, Any]:
    chain = manifest.chain()
    return {
        "sink": manifest.sink,
        "current": manifest.current,
        "epochs": [e.checkpoint_id for e in chain],
        "rows": sum(e.rows for e in chain),
    }


def _with_timeline(
    manifest: SinkManifest, epoch: PublishedEpoch, generation: int
) -> PublishedEpoch:
    """The epoch with its checkpoint's timeline, built on its base epoch's; left empty
    (unknown) when the base epoch is gone or recorded none (readers then walk the base
    links, sources/upstream.py)."""
    cid = epoch.checkpoint_id
    found = manifest.epochs.get(epoch.base_checkpoint_id or -1)
    if found is None and not any(c < cid for c in manifest.epochs):
        # nothing of this sink before it (a first checkpoint, a sink new in this
        # deploy): no reader can have read an ancestor it would have to answer for
        return replace(epoch, timeline=extend((), generation, cid))
    if found is None or not found.timeline:
        return epoch
    return replace(epoch, timeline=extend(found.timeline, generation, cid))


def _with_epoch(
    manifest: SinkManifest, declared: SinkManifest, epoch: PublishedEpoch, step: int
) -> SinkManifest:
    """The manifest with the epoch published (its timeline step named in `step`), in
    the declared sink's mode, key columns and decided generation. `current` only moves
    forward: a restore's rewind moves it back."""
    newest = manifest.current
    if newest is None or epoch.checkpoint_id > newest:
        newest = epoch.checkpoint_id
    epochs = {**manifest.epochs, epoch.checkpoint_id: _with_timeline(manifest, epoch, step)}
    return replace(
        manifest, sink=declared.sink, mode=declared.mode, key_columns=declared.key_columns,
        current=newest, epochs=epochs, generation=declared.generation,
    )  # fmt: skip


def _timeline_generation(completed: CompletedCheckpoint, decided: int) -> int:
    """The generation whose chain the checkpoint's timeline step names. An import is
    admitted beside its generation's chain (it follows its savepoint's base), so it is
    named in the generation it is published in, that of the restore to it: nothing
    else of that generation precedes it."""
    pending = completed.pending
    return decided if pending.properties.is_imported else pending.restore_generation


def published_base(pending: PendingCheckpoint, store_uri: str) -> int | None:
    """The epoch a checkpoint's output follows. A savepoint of this storage imported
    (and restored to) follows the epoch its savepoint was taken on: with the
    savepoint's own epoch gone from the manifest (disposed of and collected), an
    append sink read as of the import still holds the history before it."""
    props = pending.properties
    imported_here = props.is_imported and props.savepoint_taken_from == store_uri
    if pending.base_checkpoint_id is None and imported_here:
        return props.savepoint_base_checkpoint_id
    return pending.base_checkpoint_id
