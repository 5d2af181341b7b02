"""The reports a pipeline keeps beside its checkpoints (a gate's quality report, its Data
Docs site, the restore records): read by the UI and ops/ through this port, so that the
keys they live under are the layout's alone."""

from __future__ import annotations

from dataclasses import dataclass

from batchpoint.errors import ObjectNotFound
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.storage.base import ObjectStore


@dataclass(frozen=True)
class StoredReport:
    """One stored report as written: its key (decoders name it in their errors) and bytes.
    The protocol does not decode them: their types belong to the layers that write them."""

    key: str
    data: bytes


class StoredReports:
    def __init__(self, store: ObjectStore, layout: PipelineLayout) -> None:
        self._store = store
        self._layout = layout

    def quality_report_key(self, checkpoint_id: int) -> str:
        """Where the gate's report of a checkpoint is (a task returns it to say so)."""
        return self._layout.quality_report(checkpoint_id)

    def quality_report(self, checkpoint_id: int) -> StoredReport | None:
        return self._read(self._layout.quality_report(checkpoint_id))

    def restore_record(self, generation: int) -> StoredReport | None:
        return self._read(self._layout.restore(generation))

    def data_docs_file(self, checkpoint_id: int, path: str) -> bytes | None:
        """A file of the Data Docs site a gate stored beside the checkpoint, or None."""
        found = self._read(self._layout.data_docs_prefix(checkpoint_id) + path)
        return found.data if found else None

    def _read(self, key: str) -> StoredReport | None:
        try:
            return StoredReport(key, self._store.get(key).data)
        except ObjectNotFound:
            return None
