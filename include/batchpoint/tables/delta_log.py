"""What a Delta table sink's log says beside its position (tables/delta.py): commits of
another writer on top of batchpoint's, and retained checkpoints whose versions read
files that are gone.

Another engine may append to, delete from or restore the table (nothing in Delta stops
it). A batchpoint commit over such a commit would either lose their rows (a snapshot
sink overwrites the table, a rewind replaces it) or claim them (an append sink's next
version, read as of its checkpoint, would hold them as that checkpoint's output). So the
sync commits nothing over them and says why; once their change is undone (the table
reads exactly what batchpoint's newest commit left: `DeltaTable.restore(version)`, or
their rows deleted), it goes on. A RESTORE to any batchpoint version is no such commit:
the table then reads what that version left, its position is that version's, and the
next sync goes on from there. A RESTORE by time names no version: it is one. A commit
that changes no data (OPTIMIZE's rewrites, VACUUM's markers, property changes) is not.

A VACUUM by someone else removes the files of older versions: time travel to the
checkpoints those versions hold fails, though the checkpoints' own files are intact.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from batchpoint.errors import ObjectNotFound
from batchpoint.protocol.sinks import SinkManifest
from batchpoint.tables.delta_location import table_key
from batchpoint.tables.iceberg import GENERATION, PIPELINE
from batchpoint.tables.sync import foreign_said

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from batchpoint.tables.delta import DeltaSinkTable


@dataclass(frozen=True)
class LogEntry:
    version: int
    info: dict[str, Any]  # its commitInfo
    changes_data: bool  # it adds or removes a data file with dataChange


@dataclass(frozen=True)
class Foreign:
    """Data commits of another writer on top of the newest batchpoint commit."""

    since: int | None  # that commit's version (None: no batchpoint commit in the log)
    commits: tuple[LogEntry, ...]  # newest first

    def said(self, sink: DeltaSinkTable) -> str:
        listed = ", ".join(
            f"version {e.version} ({e.info.get('operation', '?')})" for e in self.commits
        )
        since = "its creation" if self.since is None else f"batchpoint's version {self.since}"
        undo = "" if self.since is None else f" (DeltaTable.restore({self.since}))"
        return foreign_said(f"{sink.binding} at {sink.uri}", since, listed, undo)


def entry(sink: DeltaSinkTable, version: int) -> LogEntry | None:
    """The log's entry of `version` (None: cleaned up, or never written)."""
    key = f"{table_key(sink.binding)}_delta_log/{version:020d}.json"
    try:
        text = sink.store.get(key).data.decode()
    except ObjectNotFound:
        return None
    info: dict[str, Any] = {}
    changes = False
    for line in filter(None, map(str.strip, text.splitlines())):
        action = json.loads(line)
        info = action.get("commitInfo", info)
        for kind in ("add", "remove"):
            if kind in action and action[kind].get("dataChange", True):
                changes = True
    return LogEntry(version, info, changes)


def _mine(sink: DeltaSinkTable, info: dict[str, Any]) -> bool:
    return GENERATION in info and info.get(PIPELINE) == sink.pipeline


def _back(sink: DeltaSinkTable, table: DeltaTable) -> Iterator[LogEntry]:
    for version in range(table.version(), -1, -1):
        found = entry(sink, version)
        if found is None:
            return
        yield found


def foreign(sink: DeltaSinkTable, table: DeltaTable) -> Foreign | None:
    """The other writers' data commits on top of the newest batchpoint commit, unless
    the table reads exactly what that commit left (their change undone). Reads the log
    back from the head: one entry when the head is batchpoint's."""
    since, found = None, []
    for e in _back(sink, table):
        if _mine(sink, e.info):
            since = e.version
            break
        if _restores_mine(sink, e):  # the table read that batchpoint version's content
            since = restored_version(e)
            break
        if e.changes_data:
            found.append(e)
    if not found:
        return None
    left = sink.version_keys(since) if since is not None else set()
    if sink.version_keys(table.version()) == left:
        return None  # undone: a restore to batchpoint's version, their rows deleted
    return Foreign(since, tuple(found))


def restored_version(e: LogEntry) -> int | None:
    """The version a RESTORE commit took the table back to (None: not a RESTORE, or one
    by time, which says no version)."""
    if e.info.get("operation") != "RESTORE":
        return None
    restored = str((e.info.get("operationParameters") or {}).get("version", ""))
    return int(restored) if restored.isdigit() else None


def _restores_mine(sink: DeltaSinkTable, e: LogEntry) -> bool:
    """Whether `e` is a RESTORE to a batchpoint version: the table then read exactly what
    that commit left (the commits before it undone), and its position is that version's
    (DeltaSinkTable.position): a sync goes on from there."""
    version = restored_version(e)
    found = entry(sink, version) if version is not None else None
    return found is not None and _mine(sink, found.info)


def unreadable(sink: DeltaSinkTable, table: DeltaTable, manifest: SinkManifest) -> dict[int, int]:
    """The retained checkpoints (the manifest's epochs) whose table version reads a file
    that is gone, with that version: one listing of the table's folder."""
    present = {o.key for o in sink.store.list_sizes(table_key(sink.binding))}
    newest = {c.checkpoint_id: c.snapshot_id for c in sink.history(table) if c.checkpoint_id}
    return {
        cid: version
        for cid, version in sorted(newest.items())
        if cid in manifest.epochs and not sink.version_keys(version) <= present
    }


def unreadable_said(sink: DeltaSinkTable, gone: dict[int, int]) -> str:
    ids = ", ".join(map(str, gone))
    versions = ", ".join(map(str, gone.values()))
    return (
        f"{sink.binding} at {sink.uri}: the versions of retained checkpoint(s) {ids} "
        f"(version(s) {versions}) read files that are gone (a VACUUM removed them): time "
        "travel to them fails; the checkpoints' own files are intact, and a restore to "
        "one rewinds the table from them"
    )
