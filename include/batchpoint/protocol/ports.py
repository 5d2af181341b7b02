"""The small callables the protocol's collaborators take where they must ask for one
decision they do not own (instead of a `CheckpointCoordinator` to reach through).

The coordinator (protocol/coordinator.py) is the composition root: it builds each
collaborator from the parts it needs (the store, the layout, the read port, the control
store, a clock) and from these, bound to the one collaborator that owns the rule.
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

#: One line of progress for a person (the CLI prints it, a task logs it).
ProgressFn = Callable[[str], None]
