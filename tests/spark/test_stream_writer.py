"""Several streams written in one Spark action (spark/stream_writer, issue 28): each
stream's files are those its own keyed write would write, and a Spark task that fails
in the middle of the pass leaves no file of any stream behind."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle

from batchpoint.spark.state_reader import ReadSpec, read_keyed_state
from batchpoint.spark.state_writer import (
    SubtaskHooks,
    WriteSpec,
    unreferenced_files,
    write_keyed_state,
)
from batchpoint.spark.stream_writer import write_streams
from batchpoint.state.format import StateHandle
from batchpoint.storage.base import ObjectStore
from batchpoint.storage.local import LocalObjectStore

pytestmark = [pytest.mark.spark]


def _frames(spark: Any) -> tuple[Any, Any]:
    """A state keyed by `k` and a channel keyed by `account` (another key, another max
    parallelism, other columns), the second with a subtask that gets no row."""
    state = spark.range(400).selectExpr("id AS k", "id * 3 AS v", "CAST(id AS STRING) AS s")
    channel = spark.range(30).selectExpr("CAST(id % 7 AS STRING) AS account", "id AS amount")
    return state, channel


def _specs(prefix: str, attempt: str, hooks: SubtaskHooks | None = None) -> list[WriteSpec]:
    hooks = hooks or SubtaskHooks()
    return [
        WriteSpec(prefix, "state-s", attempt, ("k",), 128, 3, hooks=hooks),
        WriteSpec(prefix, "channel-c", attempt, ("account",), 16, 3, hooks=hooks),
    ]


def _shape(handles: list[StateHandle]) -> list[tuple[Any, ...]]:
    """What a handle says beyond where its file lies and which Spark task wrote it."""
    return [
        (h.name, h.subtask, h.key_group_range, h.rows, h.schema_fingerprint, h.spark_schema,
         h.parallelism, h.max_parallelism, h.layer, h.key_columns)
        for h in handles
    ]  # fmt: skip


def _rows(spark: Any, store: ObjectStore, handles: list[StateHandle]) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in read_keyed_state(spark, store, handles, ReadSpec()).collect())


def test_one_pass_writes_each_stream_as_its_own_write_would(spark: Any, tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "store")
    state, channel = _frames(spark)
    together = write_streams(
        list(zip((state, channel), _specs("chk-1/data", "a1"), strict=True)), store
    )
    alone = [
        write_keyed_state(df, store, spec)
        for df, spec in zip((state, channel), _specs("chk-2/data", "a1"), strict=True)
    ]
    assert [_shape(h) for h in together] == [_shape(h) for h in alone]
    for mine, theirs in zip(together, alone, strict=True):
        assert _rows(spark, store, mine) == _rows(spark, store, theirs)
        assert all(h.path.startswith("chk-1/data/") for h in mine)
    assert _rows(spark, store, together[0]) == sorted(tuple(r) for r in state.collect())
    # every subtask of every stream wrote a file, an empty one included
    assert {h.subtask for h in together[1]} == {0, 1, 2}
    assert any(h.rows == 0 for h in together[1]), _shape(together[1])


class _FailFirst:
    """After a subtask's files of `stream` are uploaded, the first Spark attempt of
    subtask 1 fails (every stream before it in the pass has uploaded its files too)."""

    def __init__(self, seen_dir: Path, stream: int) -> None:
        self.seen_dir = seen_dir
        self.stream = stream
        self.calls_dir = seen_dir / "calls"

    def __call__(self, subtask: int, task_attempt: str, handles: list[StateHandle]) -> None:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        if subtask != 1:
            return
        self.calls_dir.mkdir(parents=True, exist_ok=True)
        calls = len(list(self.calls_dir.glob(f"{ctx.attemptNumber()}-*")))
        (self.calls_dir / f"{ctx.attemptNumber()}-{calls}").touch()
        if ctx.attemptNumber() == 0 and calls == self.stream:
            (self.seen_dir / "failed").touch()
            raise RuntimeError("injected failure after upload, before ack")


def test_a_task_failing_mid_pass_leaves_no_file_of_any_stream(spark: Any, tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "store")
    seen = tmp_path / "seen"
    seen.mkdir()
    specs = _specs("chk-3/data", "a1", SubtaskHooks(after=_FailFirst(seen, stream=1)))
    frames = _frames(spark)
    # the hook travels by value: Spark's Python workers cannot import this test module
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        written = write_streams(list(zip(frames, specs, strict=True)), store)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert (seen / "failed").exists()  # the retry, not the first attempt, wrote subtask 1
    for df, spec, handles in zip(frames, specs, written, strict=True):
        assert unreferenced_files(store, spec, handles) == []
        assert _rows(spark, store, handles) == sorted(tuple(r) for r in df.collect())
        assert len({h.task_attempt for h in handles if h.subtask == 1}) == 1
