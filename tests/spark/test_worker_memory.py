"""A task wrapped by `releasing` hands the worker's free Arrow memory back when it ends,
however it ends, and is otherwise the task itself."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from batchpoint.spark import worker_memory


class _CountingPool:
    """The real default pool, with its releases counted."""

    def __init__(self) -> None:
        self.real, self.released = pa.default_memory_pool(), 0

    def release_unused(self) -> None:
        self.released += 1
        self.real.release_unused()


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> _CountingPool:
    counting = _CountingPool()
    monkeypatch.setattr(worker_memory.pa, "default_memory_pool", lambda: counting)
    return counting


def _task(rows: int, fail_after: int | None = None) -> Iterator[pa.RecordBatch]:
    for i in range(rows):
        if i == fail_after:
            raise RuntimeError("task failed")
        yield pa.record_batch({"x": pa.array(range(1000))})


def test_a_task_releases_once_when_it_ends_however_it_ends(pool: _CountingPool) -> None:
    task = worker_memory.releasing(_task)
    assert task.__name__ == "_task"  # pickled by reference, as Spark ships it
    out = list(task(3))
    assert [b.num_rows for b in out] == [1000] * 3 and pool.released == 1

    with pytest.raises(RuntimeError, match="task failed"):
        list(task(3, fail_after=1))
    assert pool.released == 2

    started = task(5)
    next(started)
    assert pool.released == 2  # not while it runs
    started.close()  # Spark stops reading a task's output early (a limit)
    assert pool.released == 3
