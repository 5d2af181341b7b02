"""Where a keyed write puts its files: the keys below a write's base key (a checkpoint's
``data/<operator>/``, a savepoint folder's ``data/<operator>/``).

    <base>/<hh>/<stream>/subtask-<i>/<attempt>/part-<n>-t<task attempt>.parquet

``<hh>`` is the subtask's spread folder: two hex digits of the sha256 of
``<stream>/<subtask>``. S3 throttles requests per key prefix (about 3,500 PUT/s and
5,500 GET/s each), and without it every file of a checkpoint shares the prefix
``.../chk-N/data/<operator>/``; with it, one operator's subtasks and streams write and
restore under up to 256 prefixes S3 can split its load across. The folder is a function
of (stream, subtask) alone, so a retried or speculative task writes beside the first, and
the driver finds a subtask's folder without asking anyone (`unreferenced_files`). It
stays inside the base key, so GC, which deletes a checkpoint's folder as a whole, and
the savepoint format, which keeps the path below ``data/``, need no change.

Files written before issue 42 have no spread folder
(``<base>/<stream>/subtask-<i>/<attempt>/...``). Nothing recomputes a stored file's key
(a handle carries its full path), so they still restore, verify, export and are
collected as they are; `SubtaskFolder.of_key` reads a key of either layout.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from batchpoint.state.format import StateError

FILE_SUFFIX = ".parquet"
#: Hex digits of a spread folder: 256 folders, each still holding many subtasks' files at
#: a high parallelism, which is what lets S3 split a hot one further.
SPREAD_DIGITS = 2

_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=-]{0,127}$")
_SUBTASK = re.compile(r"subtask-(\d+)")


def check_segment(value: str, what: str) -> str:
    """State names and attempt ids become key segments: keep them path- and S3-safe."""
    if not isinstance(value, str) or not _SEGMENT.match(value):
        raise StateError(
            f"{what} {value!r} is invalid: use letters, digits, '.', '_', '=' or '-' "
            "(starting with a letter or digit, at most 128 characters)"
        )
    return value


def check_base_key(base_key: str) -> str:
    base = base_key.strip("/")
    if not base or ".." in base.split("/"):
        raise StateError(f"state base key {base_key!r} is invalid: give a relative key prefix")
    return base


def spread_folder(stream: str, subtask: int) -> str:
    """The spread folder of a stream's subtask: the same for every attempt and run."""
    digest = hashlib.sha256(f"{stream}/{subtask}".encode()).hexdigest()
    return digest[:SPREAD_DIGITS]


@dataclass(frozen=True)
class SubtaskFolder:
    """The folder one write attempt of one subtask of a stream puts its files in, below
    the write's base key. `spread` is False for the layout before issue 42, which is
    read (a stored handle names such a folder) but never written."""

    stream: str
    subtask: int
    attempt: str
    spread: bool = True

    def relative(self) -> str:
        """The folder below the base key (ends with '/')."""
        head = f"{spread_folder(self.stream, self.subtask)}/" if self.spread else ""
        return f"{head}{self.stream}/subtask-{self.subtask}/{self.attempt}/"

    @classmethod
    def of_key(cls, relative_key: str) -> SubtaskFolder | None:
        """The folder of a file key below its base key, in either layout; None for a key
        no keyed write made (a test's, or a task's file of another shape)."""
        *folders, _name = relative_key.split("/")
        spread = len(folders) == 4
        head = folders.pop(0) if spread else ""
        if len(folders) != 3 or (match := _SUBTASK.fullmatch(folders[1])) is None:
            return None
        found = cls(folders[0], int(match.group(1)), folders[2], spread)
        # Two hex digits that are not this subtask's spread folder are some other
        # folder: the key is not one a keyed write made.
        if spread and head != spread_folder(found.stream, found.subtask):
            return None
        return found


def subtask_prefix(base_key: str, state_name: str, subtask: int, attempt_id: str) -> str:
    """The folder one write attempt of one subtask puts its files in (ends with '/')."""
    return f"{check_base_key(base_key)}/{SubtaskFolder(state_name, subtask, attempt_id).relative()}"


def state_file_key(
    base_key: str, state_name: str, subtask: int, attempt_id: str, part: int, task_attempt: str
) -> str:
    """`task_attempt` (the Spark task attempt id) keeps a retried or speculative copy of
    a task from overwriting a file another attempt's handle already points at."""
    prefix = subtask_prefix(base_key, state_name, subtask, attempt_id)
    return f"{prefix}part-{part:05d}-{task_attempt}{FILE_SUFFIX}"
