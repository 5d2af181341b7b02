"""The integrity check of a checkpoint's source offsets: along its base chain each link
starts where its base ended, no offset goes backwards, and the sources still hold what
the barrier names (Flink's source split state, checked before a restore trusts it).

An Iceberg table's offsets are compared only where they count one thing that only grows
(`iceberg_table.offsets_ordered`): an earlier release recorded a snapshot's depth, which
a routine expiry of old snapshots lowers, so two such offsets say nothing about order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from batchpoint.errors import ConfigError, ObjectNotFound, RecordError
from batchpoint.protocol.checkpoint import (
    CheckpointOutcome,
    CheckpointStatus,
    PendingCheckpoint,
)
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.quality.findings import Check, Finding
from batchpoint.runtime.api import SourceDef
from batchpoint.sources.barrier import PartitionOffset
from batchpoint.sources.errors import SourceOffsetError
from batchpoint.sources.iceberg_table import PARTITION as ICEBERG_PARTITION
from batchpoint.sources.iceberg_table import offsets_ordered
from batchpoint.storage.base import ObjectStore

#: How many base links to follow: enough for any real chain, bounded for a looping one.
MAX_CHAIN = 1000


def check_source_offsets(
    store: ObjectStore,
    layout: PipelineLayout,
    pending: PendingCheckpoint,
    sources: Mapping[str, SourceDef] | None = None,
) -> list[Finding]:
    """Walk the base chain while its records exist: each link's base_barrier must be
    its base's barrier, and no offset may go backwards along it. Then check that the
    source still holds exactly the files the checkpoint's barrier covers."""
    findings = []
    current, steps = pending, 0
    while True:
        findings += _backwards(current)
        if current.base_checkpoint_id is None or steps >= MAX_CHAIN:
            break
        base = _outcome_or_none(store, layout, current.base_checkpoint_id)
        if base is None:
            break  # pruned from history, or unreadable: nothing left to compare with
        what = f"checkpoint {current.checkpoint_id}"
        if base.status is not CheckpointStatus.COMPLETED:
            findings.append(
                Finding(
                    what,
                    Check.SOURCE_OFFSETS,
                    f"builds on checkpoint {base.checkpoint_id}, which is {base.status.value}",
                )
            )
            break
        if _normal(current.base_barrier) != _normal(base.pending.barrier):
            findings.append(
                Finding(
                    what,
                    Check.SOURCE_OFFSETS,
                    f"its base_barrier is not the barrier of its base checkpoint "
                    f"{base.checkpoint_id}: "
                    + _barrier_difference(current.base_barrier, base.pending.barrier),
                )
            )
        current, steps = base.pending, steps + 1
    findings += _source_files(store, pending, sources or {})
    return findings


def _outcome_or_none(
    store: ObjectStore, layout: PipelineLayout, checkpoint_id: int
) -> CheckpointOutcome | None:
    key = layout.outcome(checkpoint_id)
    try:
        return CheckpointOutcome.decode(key, store.get(key).data)
    except (ObjectNotFound, RecordError):
        return None


def _offsets(barrier: Mapping[str, Any], source: str) -> dict[str, PartitionOffset]:
    partitions = barrier.get(source) or {}
    return {p: PartitionOffset.coerce(v) for p, v in partitions.items()}


def _normal(barrier: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Barriers compared by offsets: the name and digest follow from them on one source."""
    try:
        return {s: {p: o.offset for p, o in _offsets(barrier, s).items()} for s in barrier}
    except (ConfigError, AttributeError, TypeError, ValueError):
        return {"<unparseable>": {repr(barrier): -1}}


def _barrier_difference(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> str:
    a, b = _normal(ours), _normal(theirs)
    parts = []
    for source in sorted(set(a) | set(b)):
        for partition in sorted(set(a.get(source, {})) | set(b.get(source, {}))):
            x, y = a.get(source, {}).get(partition), b.get(source, {}).get(partition)
            if x != y:
                parts.append(f"{source}/{partition} at {x}, the base read up to {y}")
    return "; ".join(parts) or "they differ"


def _backwards(pending: PendingCheckpoint) -> list[Finding]:
    findings = []
    for source in sorted(set(pending.base_barrier) | set(pending.barrier)):
        what = f"source {source} (checkpoint {pending.checkpoint_id})"
        try:
            start = _offsets(pending.base_barrier, source)
            end = _offsets(pending.barrier, source)
        except (ConfigError, AttributeError, TypeError, ValueError) as exc:
            findings.append(Finding(what, Check.SOURCE_OFFSETS, f"unreadable barrier: {exc}"))
            continue
        for partition, offset in sorted(start.items()):
            reached = end[partition].offset if partition in end else 0
            iceberg = partition == ICEBERG_PARTITION and partition in end
            if iceberg and not offsets_ordered(offset, end[partition]):
                continue  # a depth, or another table's: no order to check
            if reached < offset.offset:
                findings.append(
                    Finding(
                        f"{what} partition {partition}",
                        Check.SOURCE_OFFSETS,
                        f"the offset goes backwards: {offset.offset} in its base, {reached} "
                        "in its barrier",
                    )
                )
    return findings


def _source_files(
    store: ObjectStore, pending: PendingCheckpoint, sources: Mapping[str, SourceDef]
) -> list[Finding]:
    findings = []
    for name, source in sorted(sources.items()):
        if source.uid not in pending.barrier:  # keyed by uid (the name by default)
            continue
        files = source.files(store)
        try:
            files.verify_barrier(pending.barrier[source.uid])
        except (SourceOffsetError, ConfigError) as exc:
            findings.append(Finding(f"source {name}", Check.SOURCE_OFFSETS, str(exc)))
    return findings
