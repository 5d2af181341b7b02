"""The one status vocabulary a checkpoint is shown with (the CLI, its JSON, the plugin's
pages and the DAG's tab alike), like Flink's web UI: the outcome record says only
whether a checkpoint completed; what it is now also depends on the pipeline's control
record (the head, the retained) and on the quarantine marks.

`history_status` is the one rule that combines them: a pure function, so every front end
shows the same word for the same records, and a test can hold it to every combination.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.protocol.control import ControlRecord


class HistoryStatus(enum.Enum):
    """Each member is (value, meaning): the value is what the JSON and the pages say."""

    PENDING = ("pending", "triggered; its tasks have not all acknowledged it yet")
    HEAD = ("head", "completed, the newest of the current timeline: the next epoch builds on it")
    RETAINED = ("retained", "completed and still retained: a restore can go back to it")
    QUARANTINED = (
        "quarantined",
        "completed, but found unfit for a restore: none is offered until someone "
        "releases it with `batchpoint quarantine release`",
    )
    DISCARDED = (
        "discarded",
        "completed, no longer retained (newer checkpoints subsumed it, or it was disposed): "
        "its files are collected, so no restore can go back to it",
    )
    ABORTED = ("aborted", "it never completed: its failure reason says why")
    COMPLETED = (
        "completed",
        "completed; whether it is still retained cannot be told, because the pipeline's "
        "control record cannot be read, or is missing (`batchpoint repair`)",
    )
    UNREADABLE = ("unreadable", "its records cannot be read: the problem is named")

    def __init__(self, label: str, meaning: str) -> None:
        self.label = label
        self.meaning = meaning

    @property
    def restorable(self) -> bool:
        """Whether a restore to it may be offered (the restore itself checks again)."""
        return self in (HistoryStatus.HEAD, HistoryStatus.RETAINED)

    @classmethod
    def of_label(cls, label: str) -> HistoryStatus:
        return next(s for s in cls if s.label == label)


@dataclass(frozen=True)
class Standing:
    """What the pipeline holds at one read: its head, the retained checkpoints and the
    quarantined ones. `known` False: the control record could not be read, so the head
    and the retained are unknown (a completed checkpoint then reads COMPLETED)."""

    head: int | None = None
    retained: frozenset[int] = frozenset()
    quarantined: frozenset[int] = frozenset()
    known: bool = True

    @classmethod
    def of(cls, control: ControlRecord | None, quarantined: Iterable[int]) -> Standing:
        """From the control record (None: none written yet, nothing retained)."""
        if control is None:
            return cls(quarantined=frozenset(quarantined))
        return cls(
            control.head,
            frozenset(e.checkpoint_id for e in control.retained),
            frozenset(quarantined),
        )

    @classmethod
    def unknown(cls, quarantined: Iterable[int]) -> Standing:
        return cls(quarantined=frozenset(quarantined), known=False)


def history_status(
    checkpoint_id: int, outcome: CheckpointStatus, standing: Standing
) -> HistoryStatus:
    """The status shown for a checkpoint whose records say `outcome`. A quarantine mark
    outranks the head and retention (a restore refuses it whatever else holds); it says
    nothing new about a checkpoint that never completed, whose reason is shown."""
    if outcome is not CheckpointStatus.COMPLETED:
        return {
            CheckpointStatus.PENDING: HistoryStatus.PENDING,
            CheckpointStatus.ABORTED: HistoryStatus.ABORTED,
            CheckpointStatus.UNREADABLE: HistoryStatus.UNREADABLE,
        }[outcome]
    if checkpoint_id in standing.quarantined:
        return HistoryStatus.QUARANTINED
    if not standing.known:
        return HistoryStatus.COMPLETED
    if checkpoint_id == standing.head:
        return HistoryStatus.HEAD
    if checkpoint_id in standing.retained:
        return HistoryStatus.RETAINED
    return HistoryStatus.DISCARDED
