"""The files port: the objects in a pipeline's checkpoint folders that are not its
records (the state and output files tasks write), checked, listed and deleted by the
collaborators that judge or collect them (the finalizer, the ack accounting, repair,
GC). Keys come from the layout, inside the port; a handle's path is a key.
"""

from __future__ import annotations

from collections.abc import Iterable

from batchpoint.protocol.checkpoint import AckRecord, FileHandle
from batchpoint.protocol.layout import PipelineLayout
from batchpoint.protocol.ports import ProgressFn
from batchpoint.protocol.verify import FileProblem, check_handles
from batchpoint.state.keys import SubtaskFolder
from batchpoint.storage.base import ListedSize, ObjectStore


class CheckpointFiles:
    def __init__(self, store: ObjectStore, layout: PipelineLayout) -> None:
        self._store = store
        self._layout = layout

    def check(
        self,
        handles: Iterable[FileHandle],
        *,
        checksums: bool,
        progress: ProgressFn | None = None,
    ) -> list[FileProblem]:
        """Every file present with its size (and, with `checksums`, its sha256)."""
        return check_handles(self._store, handles, checksums=checksums, progress=progress)

    def data_prefix(self, checkpoint_id: int) -> str:
        return self._layout.data_prefix(checkpoint_id)

    def data_files(self, checkpoint_id: int) -> list[ListedSize]:
        """Every file in the checkpoint's data folder."""
        return list(self._store.list_sizes(self._layout.data_prefix(checkpoint_id)))

    def delete(self, keys: Iterable[str]) -> None:
        self._store.delete_many(keys)

    def delete_attempt_files(self, ack: AckRecord) -> None:
        """Delete the files an attempt brought that no checkpoint will reference.

        Only this attempt's own files: under its operator's data folder in this
        checkpoint, in a folder named by the attempt id. A handle pointing anywhere else
        is another checkpoint's, another attempt's or another task's file (a sink
        references its input channel's files), which is never ours to delete."""
        data = self._layout.operator_data_prefix(ack.checkpoint_id, ack.task.operator)
        own = [
            h.path
            for h in ack.handles
            if h.path.startswith(data) and _written_by(ack.attempt, h.path[len(data) :])
        ]
        self._store.delete_many(own)

    # -- a collected checkpoint's whole folder (GC's pruning of the history) ------------

    def folder(self, checkpoint_id: int) -> tuple[list[ListedSize], list[ListedSize]]:
        """Everything stored under the checkpoint's folder (its records and its files),
        and its data files among them."""
        found = list(self._store.list_sizes(self._layout.checkpoint(checkpoint_id)))
        data_prefix = self._layout.data_prefix(checkpoint_id)
        return found, [i for i in found if i.key.startswith(data_prefix)]

    def prune(self, checkpoint_id: int, keys: Iterable[str]) -> None:
        """Delete these keys of the checkpoint's folder and its quarantine mark (nothing
        can restore it any more: kept, marks would pile up), its outcome record last:
        while the outcome stands, the checkpoint is still in the history and a later
        pass prunes what is left."""
        outcome_key = self._layout.outcome(checkpoint_id)
        mark = self._layout.quarantine(checkpoint_id)
        self._store.delete_many([*(k for k in keys if k != outcome_key), mark])
        self._store.delete(outcome_key)


def _written_by(attempt: str, relative_key: str) -> bool:
    """Whether attempt `attempt` wrote this key below its operator's data folder. A
    keyed write's file (either layout) names its attempt in one place: its spread
    folder's two hex digits may read as an attempt id, and so may a stream's name. A
    key of another shape (a test's) is the attempt's when one of its folders is it."""
    folder = SubtaskFolder.of_key(relative_key)
    if folder is not None:
        return folder.attempt == attempt
    return attempt in relative_key.split("/")[:-1]
