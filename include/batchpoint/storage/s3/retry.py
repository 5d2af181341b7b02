"""Retries: botocore's own, plus the three cases it cannot see.

Every request goes through botocore's retry mode ('standard' or 'adaptive', with
`max_attempts` counting the first try): throttling, 5xx, timeouts and dropped
connections are retried there, with jittered exponential backoff and a retry quota.

botocore decides on one HTTP exchange, so a few failures never reach it; `again` retries
those, with the same bound:
- a 409 ConditionalRequestConflict on a conditional PUT (a concurrent write of the same
  key; AWS says to retry, and botocore's standard mode does not retry a 409);
- per-key throttling inside a 200 DeleteObjects reply;
- a body that breaks off while it is read, after botocore has returned the response.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# Delay before our retry n is uniform in [0, min(_MAX_DELAY, _BASE_DELAY * 2**(n-1))], the
# "full jitter" botocore uses too, so that writers that collided do not collide again.
_BASE_DELAY = 0.05
_MAX_DELAY = 2.0


def botocore_retries(mode: str, max_attempts: int) -> dict[str, Any]:
    """The `retries` entry of a botocore Config."""
    # Not "max_attempts": in a Config that key counts *retries*; total_max_attempts
    # counts the first try, as our setting does.
    return {"mode": mode, "total_max_attempts": max_attempts}


def sleep(seconds: float) -> None:
    """Module-level so tests can record delays instead of waiting them out."""
    time.sleep(seconds)


def again(
    fn: Callable[[int], T], max_attempts: int, retryable: Callable[[BaseException], bool]
) -> T:
    """Run ``fn(attempt)`` (1-based) until it returns, retrying only what `retryable`
    accepts, at most `max_attempts` times in all; the last error is re-raised unchanged."""
    attempt = 1
    while True:
        try:
            return fn(attempt)
        except Exception as exc:
            if attempt >= max_attempts or not retryable(exc):
                raise
            sleep(random.uniform(0.0, min(_MAX_DELAY, _BASE_DELAY * 2 ** min(attempt - 1, 30))))
            attempt += 1
