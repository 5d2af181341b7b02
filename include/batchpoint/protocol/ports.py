"""The small callables the protocol's collaborators take where they must ask for one
decision they do not own (instead of a `CheckpointCoordinator` to reach through).

The coordinator (protocol/coordinator.py) is the composition root: it builds each
collaborator from the parts it needs (the records or files port, the control store, a
clock) and from these, bound to the one collaborator that owns the rule.
"""

from __future__ import annotations

from collections.abc import Callable

from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointOutcome

#: Seconds since the epoch (time.time, or a test's fake clock).
Clock = Callable[[], float]

#: Finish a restore whose sinks are not rewound yet (`CheckpointRestorer.finish`): every
#: actor that reads the sinks or the retained set rolls it forward first.
RollForward = Callable[[], None]

#: Abort a pending checkpoint, returning the outcome that holds
#: (`CheckpointFinalizer.abort`): a restore aborts the checkpoints it abandoned.
AbortCheckpoint = Callable[[int, CheckpointFailureReason, str], CheckpointOutcome]

#: Abort a checkpoint its trigger admitted and refused before writing its pending record,
#: with the trigger's time (`CheckpointFinalizer.abort`): the outcome then says when it
#: was triggered, which no other record holds.
AbortAtTrigger = Callable[[int, CheckpointFailureReason, str, float], CheckpointOutcome]

#: One line of progress for a person (the CLI prints it, a task logs it). A `Count` line
#: also says how far a long step is: the CLI draws it as a bar in a terminal.
ProgressFn = Callable[[str], None]


class Count(str):
    """A line of progress that counts (`gc: 3/10 checkpoint folder(s) examined`): `done`
    of `total` units of the step named `step`. A str, so every ProgressFn that logs
    lines logs it as it is."""

    step: str
    done: int
    total: int

    def __new__(cls, step: str, done: int, total: int, line: str) -> Count:
        self = super().__new__(cls, line)
        self.step, self.done, self.total = step, done, total
        return self

    def __reduce__(self) -> tuple[type[Count], tuple[str, int, int, str]]:
        return (Count, (self.step, self.done, self.total, str(self)))


def count_due(done: int, total: int) -> bool:
    """Whether a step `done` of `total` is worth a line: about every tenth, and the
    last, so that a task log gets a dozen lines for a thousand files."""
    return done == total or done % max(1, total // 10) == 0
