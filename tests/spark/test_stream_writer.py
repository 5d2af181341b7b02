"""Several streams written in one Spark action (spark/stream_writer, issue 28): each
stream's files are those its own keyed write would write, and a Spark task that fails
in the middle of the pass leaves no file of any stream behind."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle
from pyspark.sql import functions as F

from batchpoint.spark.aligned_writes import units
from batchpoint.spark.state_reader import ReadSpec, read_keyed_state
from batchpoint.spark.state_writer import (
    SubtaskHooks,
    WriteSpec,
    unreferenced_files,
    write_keyed_state,
)
from batchpoint.spark.stream_writer import write_streams
from batchpoint.state.format import StateHandle
from batchpoint.state.keygroups import key_group_range_for_subtask, subtask_for_key
from batchpoint.storage.base import ObjectStore
from batchpoint.storage.local import LocalObjectStore

pytestmark = [pytest.mark.spark]


def _frames(spark: Any) -> tuple[Any, Any]:
    """A state keyed by `k` and a channel keyed by `account` (another key, another max
    parallelism, other columns), the second with a subtask that gets no row."""
    state = spark.range(400).selectExpr("id AS k", "id * 3 AS v", "CAST(id AS STRING) AS s")
    accounts = [a for a in map(str, range(40)) if subtask_for_key(a, 16, 3) != 2][:7]
    channel = spark.range(30).selectExpr(
        f"element_at(array({', '.join(repr(a) for a in accounts)}), CAST(id % 7 AS INT) + 1)"
        " AS account",
        "id AS amount",
    )
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


# -- aligned writes: rows already partitioned by the key are written where they are --------


@pytest.fixture
def shuffle_partitions(spark: Any) -> Iterator[Callable[[int], None]]:
    """Sets the session's shuffle partitions (read when a plan is made) for one test.
    Adaptive execution would merge these small partitions into one task, which holds
    every subtask whatever the key groups: its coalescing is off, so that each partition
    is its own task and the placement is what is tested."""
    coalesce = "spark.sql.adaptive.coalescePartitions.enabled"
    before = spark.conf.get("spark.sql.shuffle.partitions"), spark.conf.get(coalesce)
    spark.conf.set(coalesce, "false")
    yield lambda n: spark.conf.set("spark.sql.shuffle.partitions", str(n))
    spark.conf.set("spark.sql.shuffle.partitions", before[0])
    spark.conf.set(coalesce, before[1])


def _aggregated(spark: Any, key_type: str = "string", keys: int = 500) -> Any:
    """A keyed aggregation's output: Spark's hash partitioning by `k`."""
    events = spark.range(3000).selectExpr(
        f"CAST(id % {keys} AS {key_type}) AS k"
        if key_type != "string"
        else f"CONCAT('k', id % {keys}) AS k",
        "id AS amount",
    )
    return events.groupBy("k").agg({"amount": "sum"}).withColumnRenamed("sum(amount)", "total")


@pytest.mark.parametrize(
    ("partitions", "parallelism", "max_parallelism", "keys"),
    [
        (2, 2, 128, 500),
        (1, 4, 128, 500),
        (4, 2, 128, 500),
        (8, 4, 64, 500),
        (2, 8, 8, 500),
        (16, 1, 16, 500),
        (16, 2, 32, 3),  # most parts of the key groups get no row: the driver fills them
    ],
)
def test_an_aggregations_output_is_written_where_it_sits_as_the_shuffled_write_would(
    spark: Any,
    tmp_path: Path,
    shuffle_partitions: Callable[[int], None],
    caplog: pytest.LogCaptureFixture,
    partitions: int,
    parallelism: int,
    max_parallelism: int,
    keys: int,
) -> None:
    """Every combination of hash partitions, parallelism and max parallelism that the key
    hash lines up with: the files cover each subtask's range as a shuffled write's do,
    with the same rows in each key group, and no exchange is added to the plan."""
    store = LocalObjectStore(tmp_path / "store")
    shuffle_partitions(partitions)
    df = _aggregated(spark, keys=keys)
    spec = WriteSpec("chk-1/data", "totals", "a1", ("k",), max_parallelism, parallelism)
    assert units(df, spec) == max(partitions, parallelism)
    with caplog.at_level("WARNING", logger="batchpoint.spark.stream_writer"):
        (aligned,) = write_streams([(df, spec)], store)
    assert caplog.messages == []  # written where the rows sat, not again
    shuffled = write_keyed_state(df, store, replace(spec, base_key="chk-2/data"))
    assert sorted(_grouped(spark, store, aligned)) == sorted(_grouped(spark, store, shuffled))
    assert _rows(spark, store, aligned) == sorted(tuple(r) for r in df.collect())
    for subtask in range(parallelism):
        own = key_group_range_for_subtask(max_parallelism, parallelism, subtask)
        ranges = sorted(h.key_group_range for h in aligned if h.subtask == subtask)
        assert (ranges[0].start, ranges[-1].end) == (own.start, own.end)
    assert unreferenced_files(store, spec, aligned) == []


def _grouped(spark: Any, store: ObjectStore, handles: list[StateHandle]) -> list[tuple[Any, ...]]:
    spec = ReadSpec(keep_key_group=True)
    return [tuple(r) for r in read_keyed_state(spark, store, handles, spec).collect()]


@pytest.mark.parametrize(
    ("why", "partitions", "parallelism", "max_parallelism", "key_type", "keys"),
    [
        ("parallelism not a power of two", 2, 3, 128, "string", ("k",)),
        ("max parallelism not a power of two", 2, 2, 96, "string", ("k",)),
        ("hash partitions not a power of two", 6, 2, 128, "string", ("k",)),
        ("an int key hashes as bigint", 2, 2, 128, "int", ("k",)),
        ("partitioned by another column", 2, 2, 128, "string", ("total",)),
    ],
)
def test_rows_not_lined_up_with_the_key_hash_take_the_shuffled_write(
    spark: Any,
    tmp_path: Path,
    shuffle_partitions: Callable[[int], None],
    why: str,
    partitions: int,
    parallelism: int,
    max_parallelism: int,
    key_type: str,
    keys: tuple[str, ...],
) -> None:
    store = LocalObjectStore(tmp_path / "store")
    shuffle_partitions(partitions)
    df = _aggregated(spark, key_type)
    spec = WriteSpec("chk-1/data", "totals", "a1", keys, max_parallelism, parallelism)
    assert units(df, spec) is None, why
    (written,) = write_streams([(df, spec)], store)
    assert _rows(spark, store, written) == sorted(tuple(r) for r in df.collect())


def test_a_plan_that_splits_a_subtask_after_all_is_written_again_shuffled(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The coverage check is the guard: rows that only claim to sit by subtask (the plan
    check is made to lie) give overlapping files, which are deleted, and the write is
    done through repartitionById."""
    import batchpoint.spark.stream_writer as stream_writer

    monkeypatch.setattr(stream_writer, "units", lambda df, spec: spec.parallelism)
    store = LocalObjectStore(tmp_path / "store")
    df = spark.range(400).selectExpr("CAST(id AS STRING) AS k", "id AS v").repartition(3)
    spec = WriteSpec("chk-1/data", "s", "a1", ("k",), 128, 2)
    with caplog.at_level("WARNING", logger="batchpoint.spark.stream_writer"):
        (written,) = write_streams([(df, spec)], store)
    assert "written again through repartitionById" in caplog.text
    assert _rows(spark, store, written) == sorted(tuple(r) for r in df.collect())
    assert unreferenced_files(store, spec, written) == []


def test_a_full_outer_join_on_the_key_is_written_where_it_sits(
    spark: Any,
    tmp_path: Path,
    shuffle_partitions: Callable[[int], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A changelog's comparison: the new state (an aggregation) against the base, full
    outer joined on the key, the key coming out as their coalesce. Spark says nothing of
    that output's partitioning, but each key's rows meet in the partition its hash names;
    a column that is not the join key, named as the key, is not taken."""
    store = LocalObjectStore(tmp_path / "store")
    shuffle_partitions(4)
    new = _aggregated(spark)
    base = spark.range(700).selectExpr("CONCAT('k', id) AS k", "id AS old")
    joined = new.join(base, on="k", how="full_outer")
    spec = WriteSpec("chk-1/data", "totals", "a1", ("k",), 128, 2)
    assert units(joined, spec) == 4
    with caplog.at_level("WARNING", logger="batchpoint.spark.stream_writer"):
        (written,) = write_streams([(joined, spec)], store)
    assert caplog.messages == []
    assert _rows(spark, store, written) == sorted(tuple(r) for r in joined.collect())
    renamed = new.join(base.withColumnRenamed("k", "b"), new.k == F.col("b"), "full_outer")
    assert units(renamed.select(F.col("old").cast("string").alias("k"), "total"), spec) is None
