"""How the demo talks: a step's heading, a line under it, a timed piece of work."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def step(message: str) -> None:
    print(f"\n\033[1m== {message}\033[0m", flush=True)


def say(message: str) -> None:
    print(f"   {message}", flush=True)


def timed(label: str, fn: Callable[[], T]) -> T:
    started = time.monotonic()
    result = fn()
    say(f"{label} in {time.monotonic() - started:.1f}s")
    return result
