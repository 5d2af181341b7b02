"""The streams an operator attempt writes (its states, a channel per group of
consumers, a sink's staged output) and how their files are named."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa

from batchpoint.protocol.checkpoint import FileHandle

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class StreamWrite(NamedTuple):
    """One stream an operator attempt writes: a state, a channel, a sink. A channel is
    read by every consumer in `consumers` (those that key it alike)."""

    df: DataFrame
    stream: str
    key_columns: tuple[str, ...]
    max_parallelism: int
    consumers: tuple[str, ...] = ()
    layer: int = 0  # a state's changelog layer (0: written in full)
    plain: bool = False  # no `_key_group` column: a table sink's data files
    declared: pa.Schema | None = None  # a state's declared schema: its files get it exactly
    what: str = ""  # a state's name for messages: "operator 'o', state 's'"


def state_stream(name: str) -> str:
    return f"state-{name}"


def channel_stream(consumer: str) -> str:
    return f"channel-{consumer}"


#: Handle metadata naming every consumer of a channel written once for several.
CONSUMERS_META = "consumers"


def reads_channel(handle: FileHandle, consumer: str) -> bool:
    """Whether `handle` is a file of a channel `consumer` reads: its own, or one written
    once for several consumers that key the output alike."""
    if handle.name == channel_stream(consumer):
        return True
    return handle.name.startswith("channel-") and consumer in handle.meta.get(CONSUMERS_META, ())


SINK_STREAM = "sink"
