"""What a stack records: the events done to it or by it, and each service's state."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from batchpoint.errors import BatchpointError


class StackError(BatchpointError):
    """A service of the stack did not come up, or an operation on it failed."""


@dataclass(frozen=True)
class StackEvent:
    """Something done to the stack (a fault, a deploy) or by it (a restart)."""

    at: float  # wall clock, when it began
    kind: str
    target: str
    detail: str = ""

    def __str__(self) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(self.at))
        return f"{stamp} {self.kind} {self.target}{': ' + self.detail if self.detail else ''}"


@dataclass
class ServiceState:
    started_at: float | None = None
    healthy_at: float | None = None
    completed: bool = False
    #: stopped by a user (compose stop): the restart policy leaves it down
    stopped: bool = False
    #: restarts by the policy since it last ran for a while
    crashes: int = 0
    restart_due: float | None = None
    checks: list[str] = field(default_factory=list)


__all__ = ["ServiceState", "StackError", "StackEvent"]
