"""What a table sync must commit: the table's position (the newest checkpoint it was
synced to, and in which restore generation) against the sink manifest. Pure: the
pyiceberg adapter reads both, commits the steps, and plans again after a conflict.

A table at a checkpoint on the manifest's chain gets the later epochs one commit each
(one table snapshot per checkpoint); a table anywhere else (after a restore, or behind
epochs GC dropped) gets one commit that makes it equal to the current checkpoint's
content. A table ahead of the manifest read (a newer generation, or a later checkpoint
of the same one) means the read is stale and a newer sync is at work: nothing to do.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from batchpoint.protocol.checkpoint import FileHandle
from batchpoint.protocol.sink_manifest import SinkMode
from batchpoint.protocol.sinks import SinkManifest, visible_files
from batchpoint.protocol.timeline import is_stale, on_timeline


class Operation(enum.StrEnum):
    PUBLISH = "publish"  # one published epoch
    REWIND = "rewind"  # the whole content as of a checkpoint (after a restore)


@dataclass(frozen=True)
class TablePosition:
    checkpoint_id: int | None  # None: synced to "nothing published"
    generation: int
    # False: the table has content but the history that would say from which commit is
    # gone (another engine expired it): only a commit of the whole content is safe.
    known: bool = True


#: A table whose batchpoint commits another engine's expiry removed from below its head.
UNKNOWN_POSITION = TablePosition(None, 0, known=False)


@dataclass(frozen=True)
class SyncStep:
    operation: Operation
    checkpoint_id: int | None
    files: tuple[FileHandle, ...]  # data files to add (empty ones left out)
    replace: bool  # remove every data file of the table first


@dataclass(frozen=True)
class SyncPlan:
    steps: tuple[SyncStep, ...]
    why: str
    stale: bool = False


def _rows(files: list[FileHandle] | tuple[FileHandle, ...]) -> tuple[FileHandle, ...]:
    return tuple(f for f in files if f.rows)


def plan_sync(position: TablePosition | None, manifest: SinkManifest) -> SyncPlan:
    target, generation = manifest.current, manifest.generation
    if position is not None and not position.known:
        # Appending the chain from its start could add every row the table holds again.
        files = _rows(visible_files(manifest, target)) if target is not None else ()
        step = SyncStep(Operation.REWIND, target, files, replace=True)
        why = "the table's history below its current snapshot was expired: one commit of"
        return SyncPlan((step,), f"{why} the content of checkpoint {target}")
    if position is not None:
        if is_stale(generation, position.generation):
            why = f"the table is in generation {position.generation}, the manifest read in "
            return SyncPlan((), f"{why}{generation}: stale read", stale=True)
        same = on_timeline(position.generation, generation)
        if same and position.checkpoint_id == target:
            return SyncPlan((), f"the table is at checkpoint {target} already")
        ahead = target is not None and (position.checkpoint_id or 0) > target
        if same and ahead:
            why = f"the table is at checkpoint {position.checkpoint_id}, past the manifest read"
            return SyncPlan((), f"{why} ({target}): stale read", stale=True)
    chain = manifest.chain(target) if target is not None else []
    ids = [e.checkpoint_id for e in chain]
    snapshot = manifest.mode is SinkMode.SNAPSHOT
    if position is None or position.checkpoint_id is None:
        start = 0  # an empty table: every epoch of the chain in turn
    elif position.checkpoint_id in ids:
        start = ids.index(position.checkpoint_id) + 1
    else:
        files = _rows(visible_files(manifest, target)) if target is not None else ()
        step = SyncStep(Operation.REWIND, target, files, replace=True)
        where = "nothing published" if target is None else f"checkpoint {target}"
        why = f"the table is at checkpoint {position.checkpoint_id}, off the chain of {where}"
        return SyncPlan((step,), f"{why}: one commit of its content")
    steps = tuple(
        SyncStep(Operation.PUBLISH, e.checkpoint_id, _rows(e.files), replace=snapshot)
        for e in chain[start:]
    )
    if not steps and position is not None and position.checkpoint_id is not None:
        # At an epoch of the chain but in an older generation: stamp the new one.
        files = _rows(visible_files(manifest, target)) if target is not None else ()
        steps = (SyncStep(Operation.REWIND, target, files, replace=True),)
    first = ids[start] if start < len(ids) else target
    return SyncPlan(steps, f"{len(steps)} commit(s) from checkpoint {first}")


def lag(position: TablePosition | None, manifest: SinkManifest) -> str | None:
    """How a table lags its manifest (a sync would commit something: it is behind the
    manifest's current checkpoint, or in an older restore generation), or None."""
    plan = plan_sync(position, manifest)
    if plan.stale or not plan.steps:
        return None
    at = (
        "has no batchpoint commit left in its history"
        if position is not None and not position.known
        else "has no batchpoint commit"
        if position is None or position.checkpoint_id is None
        else f"is at checkpoint {position.checkpoint_id} (generation {position.generation})"
    )
    return (
        f"the table {at}, the manifest at checkpoint {manifest.current} "
        f"(generation {manifest.generation})"
    )
