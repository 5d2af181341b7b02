"""The sink manifest: a sink's published epochs, each with its base, so the sink reads
as of any published checkpoint by following the chain (see protocol/sinks.py).

A manifest is the sink's by uid (invariant 17): it is stored at the uid's key and
`sink` is the uid. A release before issue 36 kept it at the sink's name; `moved_to`
marks such a manifest while it is adopted at the uid's key (protocol/sink_keys.py):
from then on nobody changes it, and `merged` folds it into the uid's manifest.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from batchpoint import codec
from batchpoint.errors import CheckpointError
from batchpoint.protocol.checkpoint import CompletedCheckpoint, FileHandle
from batchpoint.protocol.sink_timeline import Timeline, reaches
from batchpoint.protocol.table_pins import TablePin


@dataclass(frozen=True)
class PublishedEpoch(codec.Value):
    checkpoint_id: int
    base_checkpoint_id: int | None = codec.field(missing=None)
    files: tuple[FileHandle, ...] = codec.field(missing=())
    # an imported savepoint standing for its original epoch
    alias_of: int | None = codec.field(default=None, omit=None)
    # the checkpoint's ancestry (protocol/sink_timeline.py); empty: published by a
    # release before it was recorded, or on a base whose epoch was gone
    timeline: Timeline = codec.field(default=(), omit=(), missing=())

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)


class SinkMode(enum.StrEnum):
    APPEND = "append"  # readers see every published epoch's rows
    SNAPSHOT = "snapshot"  # readers see the newest published epoch's rows only


@dataclass(frozen=True)
class SinkManifest(codec.Record):
    KIND = "sink-manifest"
    VERSION = 1

    sink: str  # the uid (a release before issue 36 wrote the name: the uid by default)
    mode: SinkMode
    key_columns: tuple[str, ...] = codec.field(missing=())
    current: int | None = codec.field(missing=None)
    # stored as the list of the epochs, oldest first
    epochs: Mapping[int, PublishedEpoch] = codec.field(keyed_by="checkpoint_id")
    generation: int = 0
    #: Epochs a table sync is about to commit to the sink's table (see TablePin); only
    #: while a sync is under way, so a manifest without pins reads and writes as before.
    pins: tuple[TablePin, ...] = codec.field(default=(), omit=(), missing=())
    #: A manifest kept under the sink's name by an older release, while it is adopted
    #: at this uid's key: final from then on, and removed once adopted.
    moved_to: str | None = codec.field(
        default=None, omit=None, doc="the uid a manifest under a name is adopted by"
    )

    def reachable(
        self, keep: Iterable[int], base_of: Callable[[int], int | None] | None = None
    ) -> set[int]:
        """The epochs a reader as of any of `keep` (or of `current`) needs: the whole
        chain in append mode, the epoch itself in snapshot mode. A kept checkpoint not
        published yet (a restore target, a completed one whose publish is pending) needs
        its nearest published ancestor's chain, found through `base_of`."""
        out: set[int] = set()
        for start in {*keep, self.current}:
            cid = nearest_published(start, self.epochs, base_of)
            if cid is None:
                continue
            chain = self.chain(cid)
            needed = chain[-1:] if self.mode is SinkMode.SNAPSHOT else chain
            out.update(e.checkpoint_id for e in needed)
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


def nearest_published(
    checkpoint_id: int | None,
    epochs: Mapping[int, PublishedEpoch],
    base_of: Callable[[int], int | None] | None,
) -> int | None:
    """`checkpoint_id` if it is among `epochs`, else its nearest ancestor that is (by
    `base_of`, a checkpoint's published base), else None."""
    seen: set[int] = set()
    found = checkpoint_id
    while found is not None and found not in epochs and base_of is not None:
        if found in seen:
            return None
        seen.add(found)
        found = base_of(found)
    return found if found in epochs else None


def merged(current: SinkManifest | None, adopted: SinkManifest, uid: str) -> SinkManifest | None:
    """`current` (the manifest at `uid`'s key) with what the adopted one has and it
    lacks; None when it lacks nothing. Absent, it becomes the adopted one. Present, it
    keeps its own position (current, generation): it only gains epochs and pins, so
    adopting the same final manifest twice changes nothing, and an epoch the adopted one
    adds is either on the chain `current` builds on (a history cut by a rename before
    issue 36, made whole) or unreachable, for GC to drop."""
    if current is None:
        return replace(adopted, sink=uid, moved_to=None)
    epochs = {c: e for c, e in adopted.epochs.items() if c not in current.epochs}
    pins = tuple(p for p in adopted.pins if p not in current.pins)
    if not epochs and not pins:
        return None
    everything = {**current.epochs, **epochs}
    return replace(current, epochs=dict(sorted(everything.items())), pins=current.pins + pins)


def visible_files(manifest: SinkManifest, as_of: int | None = None) -> list[FileHandle]:
    """The files a reader of the sink sees, as of a published checkpoint (or now)."""
    chain = manifest.chain(as_of)
    if not chain:
        return []
    if manifest.mode is SinkMode.SNAPSHOT:
        return list(chain[-1].files)
    return [f for epoch in chain for f in epoch.files]


def descends(manifest: SinkManifest, lineage: set[int], generation: int) -> bool:
    """Whether an epoch of the manifest descends from the first of `lineage` (an epoch's
    id, named in `generation` on timelines, and the ids the caller knows build on it): a
    known descendant is published, a published epoch is built on one of them, or a
    published epoch's timeline reaches it (through epochs GC dropped since: seed 7738)."""
    first = min(lineage)
    return any(
        e.checkpoint_id in lineage
        or e.base_checkpoint_id in lineage
        or (e.checkpoint_id != first and reaches(e.timeline, generation, first))
        for e in manifest.epochs.values()
    )


def supersedes(manifest: SinkManifest, completed: CompletedCheckpoint) -> bool:
    """Whether the sink has published the checkpoint, or an epoch that descends from it
    (a publish of it is then refused): GC need not keep its staged files for it."""
    cid = completed.checkpoint_id
    if cid in manifest.epochs:
        return True
    # an import's timeline step is named in the generation of the restore to it, which
    # only its publish knows: judged by the base links alone
    imported = completed.pending.properties.is_imported
    generation = -1 if imported else completed.pending.restore_generation
    return descends(manifest, {cid}, generation)


def encode(manifest: SinkManifest) -> bytes:
    return manifest.encode()
