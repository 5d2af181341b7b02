"""Every record batchpoint stores, one class per kind, and the JSON values stored inside
records or beside state files: the catalog the JSON schemas under docs/records/ are
generated from (`python -m batchpoint.ops.records docs/records/`).

A new record kind joins RECORDS; a new version of a kind is declared on its class
(`VERSION`, and `READS` for the versions before), and its schema follows from it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from batchpoint import codec
from batchpoint.codec.schema import all_schemas, write_schemas
from batchpoint.protocol.cascade import CascadeRecord
from batchpoint.protocol.checkpoint import (
    AckRecord,
    CheckpointOutcome,
    DeclineRecord,
    PendingCheckpoint,
)
from batchpoint.protocol.control import ControlRecord
from batchpoint.protocol.failures import FailureState
from batchpoint.protocol.head import HeadPointer
from batchpoint.protocol.ids import NextCheckpointId
from batchpoint.protocol.migration import RetainedMarker
from batchpoint.protocol.pipeline import PipelineSpec
from batchpoint.protocol.quarantine import QuarantineRecord
from batchpoint.protocol.restore_intents import RestoreIntent
from batchpoint.protocol.restores import RestoreRecord
from batchpoint.protocol.savepoints import SavepointMetadata
from batchpoint.protocol.sinks import SinkManifest
from batchpoint.quality.report import CandidateReport
from batchpoint.runtime.restore_plan import RestorePlan
from batchpoint.sources.barrier import SourceBarrier
from batchpoint.sources.files import SourceSplit
from batchpoint.state.format import StateHandle
from batchpoint.state.keygroups import KeyGroupRange

RECORDS: tuple[type[codec.Record], ...] = (
    PipelineSpec,
    NextCheckpointId,
    ControlRecord,
    FailureState,
    PendingCheckpoint,
    AckRecord,
    DeclineRecord,
    CheckpointOutcome,
    SinkManifest,
    RestoreRecord,
    RestoreIntent,
    CascadeRecord,
    QuarantineRecord,
    CandidateReport,
    SavepointMetadata,
    # the old layout's, read once by the migration to the control record
    HeadPointer,
    RetainedMarker,
)

#: JSON values stored outside any record, by name: a barrier's offsets (also inside the
#: pending record), a state handle (inside acks, and beside Spark's state writes), a key
#: group range (a state file's Parquet metadata), a source split (a Spark task's input),
#: a restore plan (the restore DAG's check task hands it to its restore task).
VALUES: dict[str, type[codec.Value]] = {
    "source-barrier": SourceBarrier,
    "state-handle": StateHandle,
    "key-group-range": KeyGroupRange,
    "source-split": SourceSplit,
    "restore-plan": RestorePlan,
}


def schemas() -> dict[str, dict[str, Any]]:
    """file name -> JSON schema, for every record kind and version and every value."""
    return all_schemas(RECORDS, VALUES)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m batchpoint.ops.records <folder>", file=sys.stderr)
        return 2
    for path in write_schemas(Path(argv[0]), schemas()):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
