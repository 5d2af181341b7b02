"""What a Python worker gives back when one of batchpoint's Spark tasks ends.

pyarrow's allocator (mimalloc) keeps the pages of freed buffers for reuse, so a worker
that read or wrote a subtask's state stays at that task's peak while it idles in
Spark's pool, beside the JVM's own peak in the stages that follow (the shuffle, the
aggregation). A task that ends hands the pages back; the next task's buffers are
allocated again, at a cost far below a task's."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

import pyarrow as pa

P = ParamSpec("P")
T = TypeVar("T")


def releasing(task: Callable[P, Iterator[T]]) -> Callable[P, Iterator[T]]:
    """`task` (a mapInArrow body), with the worker's free Arrow memory released when it
    ends, whether it ran out, failed or was closed."""

    @functools.wraps(task)
    def run(*args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        try:
            yield from task(*args, **kwargs)
        finally:
            pa.default_memory_pool().release_unused()

    return run
