"""Bounded retries with full-jitter exponential backoff.

The S3 backend turns botocore's own retries off and uses this instead, so that the
number of attempts, the delays and the final error are ours to test and to explain.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """`max_attempts` counts the first try: 1 means no retry at all.

    Delay before retry n (n = 1, 2, ...) is uniform in [0, min(max_delay, base_delay * 2**(n-1))]
    ("full jitter"), so that many workers throttled at once do not retry in lock-step.
    """

    max_attempts: int = 5
    base_delay: float = 0.1
    max_delay: float = 5.0
    # Injectable so tests can record delays instead of waiting them out.
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, not {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("retry delays must not be negative")

    def cap(self, retry: int) -> float:
        """Upper bound of the delay before retry number `retry` (1-based)."""
        # min() first on the exponent keeps 2**n from overflowing on silly attempt counts.
        return min(self.max_delay, self.base_delay * 2 ** min(retry - 1, 62))

    def delay(self, retry: int) -> float:
        return self.rng.uniform(0.0, self.cap(retry))


def call_with_retry(
    fn: Callable[[int], T],
    policy: RetryPolicy,
    is_retryable: Callable[[BaseException], bool],
    on_retry: Callable[[int, BaseException, float], None] | None = None,
) -> T:
    """Run ``fn(attempt)`` (attempt is 1-based) until it returns, retrying only the
    exceptions `is_retryable` accepts. After the last attempt the last exception is
    re-raised unchanged: the caller knows best how to explain it."""
    attempt = 1
    while True:
        try:
            return fn(attempt)
        except Exception as exc:
            if attempt >= policy.max_attempts or not is_retryable(exc):
                raise
            delay = policy.delay(attempt)
            if on_retry is not None:
                on_retry(attempt, exc, delay)
            policy.sleep(delay)
            attempt += 1
