"""A sink stages its input channel's files by reference when they are already its output.

A channel is written keyed by its consumer's key columns and max parallelism, split into
the producer's subtasks. A sink with no function of its own and that one input would
rehash and rewrite the same rows into files of the same format; when every channel file
lies inside one sink subtask's key-group range, the sink acknowledges those very files
instead (no Spark job). The files stay in the producer's folder of the same checkpoint:
GC keeps them while anything references them, and a sink attempt that learns DUPLICATE
deletes only files under its own operator's folder, never these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from batchpoint.protocol.checkpoint import ADOPTED_FROM_META, FileHandle
from batchpoint.state.keygroups import key_group_range_for_subtask

#: Handle metadata of a file a task references but another task wrote: the stream it was
#: written as. Such a file adds nothing to the referencing task's state size.
_CHANNEL_ONLY_META = ("consumers",)


def adopt_channel(
    files: Sequence[FileHandle], stream: str, max_parallelism: int, parallelism: int
) -> dict[int, list[FileHandle]] | None:
    """`files` (one channel) as stream `stream` of a consumer with `parallelism` subtasks,
    or None when some file spans two of its subtasks (or the files do not say how they
    were keyed): then the consumer must write its own."""
    if not files:
        return None
    ranges = [
        key_group_range_for_subtask(max_parallelism, parallelism, i) for i in range(parallelism)
    ]
    out: dict[int, list[FileHandle]] = {i: [] for i in range(parallelism)}
    for handle in files:
        if handle.key_group_range is None or handle.meta.get("max_parallelism") != max_parallelism:
            return None
        start, end = handle.key_group_range
        owner = next((i for i, r in enumerate(ranges) if start in r and end in r), None)
        if owner is None:
            return None
        meta = {k: v for k, v in handle.meta.items() if k not in _CHANNEL_ONLY_META}
        out[owner].append(
            replace(handle, name=stream, meta={**meta, ADOPTED_FROM_META: handle.name})
        )
    for handles in out.values():
        handles.sort(key=lambda h: h.key_group_range or (0, 0))
    return out
