"""GC's port to a pipeline's table sinks: the protocol imports no table library, so the
tables package implements this and the use-case layer hands it to `GarbageCollector`.

A table is a reference holder of its own. Its snapshots read the staged files of the
checkpoints they published, in the checkpoints' folders, and a table can stand anywhere
against its manifest: behind it (its catalog was down while checkpoints published), in
an older restore generation, or holding snapshots of epochs the manifest has dropped.
So GC asks the table, not the manifest, which files its snapshots still read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from batchpoint.protocol.findings import Finding


@dataclass(frozen=True)
class TableReferences:
    """What GC learned from the table sinks in one pass."""

    #: Storage keys that some unexpired snapshot of some table sink reads.
    keys: frozenset[str] = frozenset()
    #: Tables that lag their manifests: reported; their files are kept through `keys`.
    findings: tuple[Finding, ...] = ()


class SinkTables(Protocol):
    """A pipeline's table sinks, as GC sees them. Both calls raise if a table cannot be
    reached or read: GC then records a finding and deletes nothing in that pass."""

    def expire(self) -> None:
        """Expire every snapshot of a checkpoint its manifest dropped (never a table's
        current snapshot), so time travel offers only what stays readable."""

    def references(self) -> TableReferences:
        """Read after `expire`: every storage key an unexpired snapshot reads, and the
        tables that lag their manifests."""

    def head(self, sink: str) -> int | None:
        """The id of the current snapshot of `sink`'s table (None: no table, or no
        snapshot yet), which tells a live table pin from a stale one (see
        `protocol/table_pins.py::TablePin`). Raises if the table cannot be read, or if
        `sink` is not a table sink of this port: its pins are then all kept."""
