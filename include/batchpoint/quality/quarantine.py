"""Quarantine: a checkpoint that failed the quality gate is never offered for a restore
again, until someone releases it on purpose.

The mark is a write-once record beside the pipeline's other records,
`pipelines/<p>/quarantine/chk-N.json`, holding the full report that condemned the
checkpoint (so whoever releases it can see why it was held). The checkpoint itself is not
touched: it stays retained (or is subsumed as usual), and its files stay where they are.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from batchpoint.errors import ObjectAlreadyExists, ObjectNotFound
from batchpoint.protocol import records
from batchpoint.protocol.layout import PipelineLayout, parse_checkpoint_dir_name
from batchpoint.protocol.records import from_iso, to_iso
from batchpoint.quality.report import CandidateReport
from batchpoint.storage.base import ObjectStore


@dataclass(frozen=True)
class QuarantineRecord:
    KIND = "quarantine"
    VERSION = 1

    checkpoint_id: int
    quarantined_at: float
    report: CandidateReport

    def encode(self) -> bytes:
        return records.encode(
            self.KIND,
            self.VERSION,
            {
                "checkpoint_id": self.checkpoint_id,
                "quarantined_at": to_iso(self.quarantined_at),
                "report": self.report.to_body(),
            },
        )

    @classmethod
    def decode(cls, key: str, data: bytes) -> QuarantineRecord:
        _, body = records.decode(key, data, cls.KIND, (cls.VERSION,))
        return cls(
            records.field(key, body, "checkpoint_id", int),
            from_iso(key, body.get("quarantined_at")),
            CandidateReport.from_body(key, records.field(key, body, "report", dict)),
        )


class QuarantineStore:
    def __init__(self, store: ObjectStore, layout: PipelineLayout) -> None:
        self._store = store
        self._layout = layout

    def add(self, report: CandidateReport, now: float) -> bool:
        """Quarantine the report's checkpoint; False if it was quarantined already (the
        first record, and its report, stand)."""
        record = QuarantineRecord(report.checkpoint_id, now, report)
        try:
            self._store.create(self._layout.quarantine(report.checkpoint_id), record.encode())
            return True
        except ObjectAlreadyExists:
            return False

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
        key = self._layout.quarantine(checkpoint_id)
        try:
            return QuarantineRecord.decode(key, self._store.get(key).data)
        except ObjectNotFound:
            return None

    def release(self, checkpoint_id: int) -> bool:
        """Make the checkpoint eligible again; False if it was not quarantined."""
        key = self._layout.quarantine(checkpoint_id)
        existed = self._store.exists(key)
        with contextlib.suppress(ObjectNotFound):
            self._store.delete(key)
        return existed


def release(store: ObjectStore, pipeline: str, checkpoint_id: int) -> bool:
    """Release a quarantined checkpoint of `pipeline` (for the CLI and the restore DAG)."""
    return QuarantineStore(store, PipelineLayout(pipeline)).release(checkpoint_id)
