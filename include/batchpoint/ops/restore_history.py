"""Restores as Flink's web UI shows them: the pipeline's latest restore (when, to which
checkpoint, its restore generation; here also whether a gate passed the target, what
it passed over and quarantined on the way, and whether its sinks are still being
rewound), and the recent restores, so that the history marks the checkpoints a restore
went back to.

The latest restore is the control record's `restore`, the one that moved the head; the
earlier ones are the restore records `restores/gen-G.json` (one per finished restore).
Read-only, and bounded: the control record plus at most `limit` restore records, however
many restores the pipeline has had.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from batchpoint.errors import RecordError
from batchpoint.protocol.control import ControlRecord, RestoreInFlight
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.protocol.restores import RestoreRecord

#: How many restores the history looks back over (newest first).
RECENT_RESTORES = 20


@dataclass(frozen=True)
class RestoreEvent:
    """One restore: the head moved to `checkpoint_id` at `restored_at`, starting
    `restore_generation`; `previous_head` is where it was."""

    restore_generation: int
    checkpoint_id: int
    previous_head: int | None
    restored_at: float
    #: The gate that passed the target ("quality gate"); None: an ungated restore.
    gate: str | None
    gated: bool
    #: The candidates passed over on the way to the target, newest first, and which of
    #: them the restore quarantined (the gate failed them, or they proved damaged).
    passed_over: list[int] = field(default_factory=list)
    quarantined: list[int] = field(default_factory=list)
    #: Its sinks are still being rewound (the next trigger or restore rolls it forward).
    in_progress: bool = False

    @classmethod
    def in_flight(cls, r: RestoreInFlight) -> RestoreEvent:
        return cls(
            r.generation,
            r.target,
            r.previous,
            r.at,
            r.gate,
            r.gate is not None,
            list(r.passed_over),
            list(r.quarantined),
            not r.sinks_rewound,
        )

    @classmethod
    def recorded(cls, r: RestoreRecord) -> RestoreEvent:
        return cls(
            r.restore_generation,
            r.checkpoint_id,
            r.previous_head,
            r.restored_at,
            r.gate,
            r.gate is not None,
            list(r.passed_over),
            list(r.quarantined),
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        gated = f"passed by the {self.gate}" if self.gated else "ungated"
        pending = ", its sinks still being rewound" if self.in_progress else ""
        return (
            f"restore generation {self.restore_generation}, to checkpoint "
            f"{self.checkpoint_id} (head was {self.previous_head}), {gated}"
            f"{passed_over_text(self.passed_over, self.quarantined)}{pending}"
        )


def passed_over_text(passed_over: Sequence[int], quarantined: Sequence[int]) -> str:
    """What a restore passed over on the way to its target, in words ("" for nothing):
    `; passed over checkpoints 5, 4 (quarantined 5)`."""
    if not passed_over:
        return ""
    ids = ", ".join(map(str, passed_over))
    text = f"; passed over checkpoint{'s' if len(passed_over) > 1 else ''} {ids}"
    return text + (f" (quarantined {', '.join(map(str, quarantined))})" if quarantined else "")


def latest_restore(control: ControlRecord | None) -> RestoreEvent | None:
    """The restore that last moved the head, from the control record; None: none yet."""
    if control is None or control.restore is None:
        return None
    return RestoreEvent.in_flight(control.restore)


def recent_restores(
    c: PipelineHistory, control: ControlRecord | None, limit: int = RECENT_RESTORES
) -> list[RestoreEvent]:
    """The latest restore and up to `limit` - 1 before it, newest first. Generations
    with no readable record (a restore record is written as its sinks are rewound; a
    damaged one is another finding) are left out, not guessed."""
    latest = latest_restore(control)
    if latest is None:
        return []
    events = [latest]
    generation = latest.restore_generation - 1
    while generation > 0 and len(events) < limit:
        with contextlib.suppress(RecordError):
            if stored := c.reports.restore_record(generation):
                events.append(RestoreEvent.recorded(RestoreRecord.decode(stored.key, stored.data)))
        generation -= 1
    return events
