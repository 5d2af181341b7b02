"""Hooks into an operator attempt, for tests: the points an attempt passes, and what its
Spark tasks may call. The production runner has no hooks and calls nothing here; the
fault-injecting hooks (runtime.faults.InjectedFaults) are installed only by the tests, the
soak and the demo, and by the job entry point when BATCHPOINT_FAULT is set."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from batchpoint.spark.state_writer import SubtaskHooks


class AttemptPoint(StrEnum):
    """The points of an attempt a hook is told about, in order (their values are the
    point names BATCHPOINT_FAULT uses)."""

    BEFORE_SNAPSHOT = "before-snapshot"  # input processed, nothing written
    AFTER_SNAPSHOT = "after-snapshot"  # state and output files written, no ack
    AFTER_ACK = "after-ack"  # acknowledged, the attempt has not returned


class AttemptHooks(Protocol):
    def at(self, point: AttemptPoint, operator: str, checkpoint_id: int) -> None:
        """The attempt of `operator` in `checkpoint_id` reached `point`."""

    def spark_tasks(self, operator: str, checkpoint_id: int) -> SubtaskHooks:
        """What the attempt's Spark write tasks call (shipped with them: picklable)."""
