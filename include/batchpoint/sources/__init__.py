"""Sources: where an epoch's input comes from, and how far it reads (its barrier)."""

from __future__ import annotations

from batchpoint.sources.barrier import PartitionOffset, SourceBarrier
from batchpoint.sources.errors import SourceDataError, SourceOffsetError
from batchpoint.sources.files import PartitionedFileSource, SourceSplit
from batchpoint.sources.readers import FORMATS

__all__ = [
    "FORMATS",
    "PartitionOffset",
    "PartitionedFileSource",
    "SourceBarrier",
    "SourceDataError",
    "SourceOffsetError",
    "SourceSplit",
]
