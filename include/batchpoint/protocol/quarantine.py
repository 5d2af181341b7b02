"""Quarantine: a checkpoint found unfit for a restore is never offered for one again,
until someone releases it on purpose (`batchpoint quarantine release`).

The mark is a write-once record, `pipelines/<p>/quarantine/chk-N.json`; its existence
is what every restore path (and `repair`) checks. Two actors write it, each with its
reason: a restore that found the checkpoint damaged (an unreadable or unknown-version
outcome record, a missing file, a size or sha256 mismatch), with that finding; and the
quality gate (quality/quarantine.py), with its full report, which this package keeps as
opaque JSON. The record is created once, so restores that find the same damage at the
same time agree: the first record, and its reason, stand. The checkpoint itself is not
touched: it stays retained (or is subsumed as usual), and its files stay where they are.

A restore or repair decides on what it read before its compare-and-swap on the control
record, so a mark made in between would go unseen: every mark is followed by a bump of
that record (`quarantine_marks`), which makes such a swap lose and its next read see the
mark. A control record that is missing or cannot be read takes no bump; a repair that
rebuilds it reads the marks once, before its write.

Version 1 (the quality gate's, before restores quarantined) holds only the report;
version 2 names who quarantined and why. Both are read.
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from batchpoint import codec
from batchpoint.codec import to_iso
from batchpoint.errors import ObjectAlreadyExists, ObjectNotFound, RecordError
from batchpoint.protocol.control import ControlRecord, ControlUnreadable
from batchpoint.protocol.control_store import ControlStore
from batchpoint.protocol.layout import PipelineLayout, parse_checkpoint_dir_name
from batchpoint.storage.base import ObjectStore


class QuarantineCause(enum.StrEnum):
    """Who found the checkpoint unfit."""

    RESTORE = "restore"  # damage a restore found in its records or files
    QUALITY_GATE = "quality-gate"  # the gate's verdict, its report in the record
    UNKNOWN = "unknown"  # the record itself cannot be read: the mark still holds

    @property
    def label(self) -> str:
        return self.value.replace("-", " ")


#: The reason of a version-1 record, which held only the gate's report.
GATE_V1_REASON = "failed the quality gate"


@dataclass(frozen=True)
class QuarantineV1(codec.Value):
    """Version 1, the quality gate's before restores quarantined: only the report."""

    checkpoint_id: int
    quarantined_at: float = codec.time()
    report: Mapping[str, Any] = codec.field()


def _from_v1(old: QuarantineV1) -> QuarantineRecord:
    return QuarantineRecord(
        old.checkpoint_id,
        old.quarantined_at,
        QuarantineCause.QUALITY_GATE,
        GATE_V1_REASON,
        old.report,
    )


@dataclass(frozen=True)
class QuarantineRecord(codec.Record):
    KIND = "quarantine"
    VERSION = 2
    READS = {1: codec.Upgrade(QuarantineV1, _from_v1)}

    checkpoint_id: int
    quarantined_at: float = codec.time()  # 0.0 when the record cannot be read (`unreadable`)
    found_by: QuarantineCause = codec.field(
        choices=(QuarantineCause.RESTORE, QuarantineCause.QUALITY_GATE)
    )
    reason: str = codec.field()  # one line: the restore's finding, or the gate's first finding
    # the quality gate's report (quality/report.py)
    report: Mapping[str, Any] | None = codec.field(default=None, omit=None)

    def describe(self, reason: str | None = None) -> str:
        """`quarantined since <when> by <whom>: <why>`, for refusals and listings (`reason`
        in place of the record's, e.g. the first finding of the gate's report)."""
        if self.found_by is QuarantineCause.UNKNOWN:
            return f"quarantined ({self.reason})"
        by = "a restore" if self.found_by is QuarantineCause.RESTORE else "the quality gate"
        return f"quarantined since {to_iso(self.quarantined_at)} by {by}: {reason or self.reason}"

    @classmethod
    def unreadable(cls, checkpoint_id: int, error: RecordError) -> QuarantineRecord:
        """A mark whose record cannot be read: it holds all the same (its existence is the
        mark), and says why it cannot tell more."""
        return cls(checkpoint_id, 0.0, QuarantineCause.UNKNOWN, f"unreadable record: {error}")


class QuarantineStore:
    def __init__(self, store: ObjectStore, layout: PipelineLayout) -> None:
        self._store = store
        self._layout = layout

    def mark(self, record: QuarantineRecord) -> bool:
        """Quarantine the record's checkpoint; False if it was quarantined already (the
        first record, and its reason, stand). Either way the control record's fence is
        bumped after the mark exists (`_fence`)."""
        try:
            self._store.create(self._layout.quarantine(record.checkpoint_id), record.encode())
            created = True
        except ObjectAlreadyExists:
            created = False  # its writer may have died before its bump: bump again
        self._fence()
        return created

    def _fence(self) -> None:
        """Change the control record once the mark exists. A restore or repair reads the
        marks after the record it swaps on: a mark it did not see was created after its
        read, so this bump lands before its swap (which then fails, and the next read
        sees the mark) or after it (the restore came first). A record that is missing or
        cannot be read has nothing to swap on but a repair's (module doc)."""
        control = ControlStore(self._store, self._layout, time.time)

        def bumped(current: ControlRecord | None) -> ControlRecord | None:
            if current is None:
                return None
            return replace(current, quarantine_marks=current.quarantine_marks + 1)

        with contextlib.suppress(ControlUnreadable):
            control.update(bumped)

    def mark_damaged(self, checkpoint_id: int, finding: str, now: float) -> bool:
        """Quarantine a checkpoint a restore found damaged, the finding as the reason."""
        return self.mark(QuarantineRecord(checkpoint_id, now, QuarantineCause.RESTORE, finding))

    def ids(self) -> list[int]:
        found = []
        for info in self._store.list(self._layout.quarantine_prefix):
            cid = parse_checkpoint_dir_name(info.key.rsplit("/", 1)[-1])
            if cid is not None:
                found.append(cid)
        return sorted(found)

    def is_quarantined(self, checkpoint_id: int) -> bool:
        return self._store.exists(self._layout.quarantine(checkpoint_id))

    def get(self, checkpoint_id: int) -> QuarantineRecord | None:
        """The record, None when not quarantined; RecordError when it cannot be read."""
        key = self._layout.quarantine(checkpoint_id)
        try:
            return QuarantineRecord.decode(key, self._store.get(key).data)
        except ObjectNotFound:
            return None

    def held(self, checkpoint_id: int) -> QuarantineRecord | None:
        """Like `get`, but a record that cannot be read still holds the checkpoint, with
        that as its reason (damage is a finding, never a way out of quarantine)."""
        try:
            return self.get(checkpoint_id)
        except RecordError as exc:
            return QuarantineRecord.unreadable(checkpoint_id, exc)

    def records(self) -> list[QuarantineRecord]:
        """Every quarantined checkpoint, oldest id first."""
        return [r for r in (self.held(i) for i in self.ids()) if r is not None]

    def release(self, checkpoint_id: int) -> bool:
        """Make the checkpoint eligible again; False if it was not quarantined."""
        key = self._layout.quarantine(checkpoint_id)
        existed = self._store.exists(key)
        with contextlib.suppress(ObjectNotFound):
            self._store.delete(key)
        return existed
