"""Keyed state written and read by Spark tasks through an ObjectStore.

Every test takes `state_store`, so the same checks run on any backend the fixture
offers. The bounded-memory and task-retry tests need Spark settings that only apply when
a SparkContext starts, so they run a second Spark in a subprocess (this file, run as a
script).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import io
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from batchpoint.state.format import (
    KEY_GROUP_COLUMN,
    StateCoverageError,
    StateHandle,
    StateSchemaMismatch,
    read_header,
)
from batchpoint.state.keygroups import (
    KeyGroupRange,
    assign_to_key_group,
    key_group_range_for_subtask,
    subtask_for_key,
)
from batchpoint.state.keys import SubtaskFolder, spread_folder
from batchpoint.storage.base import ObjectStore

pytestmark = pytest.mark.spark

MAX_PAR = 32
SCHEMA = "user_id bigint, region string, balance double, day date, updated timestamp"
N_USERS = 2000


def make_rows(n: int = N_USERS) -> list[tuple[Any, ...]]:
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    return [
        (
            i,
            f"r{i % 7}",
            i * 1.5,
            dt.date(2024, 1, 1) + dt.timedelta(days=i % 30),
            base + dt.timedelta(minutes=i),
        )
        for i in range(n)
    ]


def state_df(spark: Any, rows: Sequence[tuple[Any, ...]] | None = None) -> Any:
    # Two input partitions, so the shuffle to subtasks really moves rows.
    data = make_rows() if rows is None else rows
    return spark.createDataFrame(list(data), SCHEMA).repartition(2)


def write(spark: Any, store: ObjectStore, parallelism: int = 4, **kwargs: Any) -> list[StateHandle]:
    from batchpoint.spark.state_io import WriteSpec, write_keyed_state

    df = kwargs.pop("df", None)
    df = state_df(spark) if df is None else df
    spec = WriteSpec(
        kwargs.pop("base_key", "chk-1/data"),
        kwargs.pop("state_name", "balances"),
        kwargs.pop("attempt_id", "a1"),
        ("user_id",),
        MAX_PAR,
        parallelism,
        **kwargs,
    )
    return write_keyed_state(df, store, spec)


def normalise(rows: Sequence[Any]) -> list[tuple[Any, ...]]:
    # Spark returns timestamps as naive datetimes in the session time zone (UTC).
    out = []
    for row in rows:
        values = list(row)
        if isinstance(values[4], dt.datetime) and values[4].tzinfo is None:
            values[4] = values[4].replace(tzinfo=dt.UTC)
        out.append(tuple(values))
    return sorted(out)


def test_round_trip(spark: Any, state_store: ObjectStore) -> None:
    from batchpoint.spark.state_io import ReadSpec, read_keyed_state

    handles = write(spark, state_store)
    assert sorted({h.subtask for h in handles}) == [0, 1, 2, 3]
    assert sum(h.rows for h in handles) == N_USERS
    back = read_keyed_state(spark, state_store, handles, ReadSpec(schema=SCHEMA))
    assert back.schema.simpleString() == spark.createDataFrame([], SCHEMA).schema.simpleString()
    assert normalise(back.collect()) == normalise(make_rows())
    # Without a schema, the one the handles record is used (no job reads a footer); a
    # handle from before it was recorded makes the reader fetch the first file's footer.
    from pyspark.sql.types import StructType

    wanted = back.schema.simpleString()
    for handle in handles:
        assert StructType.fromJson(json.loads(handle.spark_schema)).simpleString() == wanted
    assert normalise(read_keyed_state(spark, state_store, handles).collect()) == normalise(
        make_rows()
    )
    older = [dataclasses.replace(h, spark_schema="") for h in handles]
    assert read_keyed_state(spark, state_store, older).schema.simpleString() == wanted


def test_handles_cover_every_key_group_once_and_rows_sit_in_their_group(
    spark: Any, state_store: ObjectStore
) -> None:
    handles = write(spark, state_store, parallelism=3)
    covered = sorted(
        g for h in handles for g in range(h.key_group_range.start, h.key_group_range.end + 1)
    )
    assert covered == list(range(MAX_PAR))
    for handle in handles:
        assert (
            handle.key_group_range.start
            >= key_group_range_for_subtask(MAX_PAR, 3, handle.subtask).start
        )
        hh = spread_folder("balances", handle.subtask)
        assert handle.path.startswith(f"chk-1/data/{hh}/balances/subtask-{handle.subtask}/a1/part-")
        table = pq.read_table(io.BytesIO(state_store.get(handle.path).data))
        header = read_header(table.schema, handle.path)
        assert header["state"] == "balances" and header["key_columns"] == ["user_id"]
        for user, group in zip(
            table.column("user_id").to_pylist(),
            table.column(KEY_GROUP_COLUMN).to_pylist(),
            strict=True,
        ):
            assert group == assign_to_key_group(user, MAX_PAR)
            assert group in handle.key_group_range
            assert subtask_for_key(user, MAX_PAR, 3) == handle.subtask
        groups = table.column(KEY_GROUP_COLUMN).to_pylist()
        assert groups == sorted(groups)
    # Handles survive a JSON round trip (they are embedded in ack records).
    assert [StateHandle.from_json(json.loads(json.dumps(h.to_json()))) for h in handles] == handles


def test_each_streams_subtasks_write_under_prefixes_of_their_own(
    spark: Any, state_store: ObjectStore
) -> None:
    """Issue 42: S3 throttles per key prefix, so the files of one checkpoint's streams
    and subtasks go under spread folders (`state.keys`) instead of one shared folder."""
    handles = write(spark, state_store) + write(spark, state_store, state_name="totals")
    prefixes = set()
    for handle in handles:
        folder = SubtaskFolder.of_key(handle.path.removeprefix("chk-1/data/"))
        assert folder == SubtaskFolder(handle.name, handle.subtask, "a1")
        prefixes.add(handle.path.split("/")[2])
    # 2 streams x 4 subtasks; these eight pairs' folders happen to be all different
    assert prefixes == {spread_folder(s, i) for s in ("balances", "totals") for i in range(4)}
    assert len(prefixes) == 8


def test_files_at_the_keys_before_issue_42_still_restore(
    spark: Any, state_store: ObjectStore
) -> None:
    """A checkpoint written before the spread folder keeps its keys: a handle carries its
    full path, so its files restore from where they are, at any parallelism."""
    from batchpoint.spark.state_io import ReadSpec, read_keyed_state

    old = []
    for handle in write(spark, state_store):
        folder = SubtaskFolder.of_key(handle.path.removeprefix("chk-1/data/"))
        assert folder is not None
        unspread = dataclasses.replace(folder, spread=False).relative()
        key = f"chk-0/data/{unspread}{handle.path.rsplit('/', 1)[1]}"
        state_store.put(key, state_store.get(handle.path).data)
        state_store.delete(handle.path)
        old.append(dataclasses.replace(handle, path=key))
    assert not list(state_store.list("chk-1/"))
    back = read_keyed_state(spark, state_store, old, ReadSpec(schema=SCHEMA))
    assert normalise(back.collect()) == normalise(make_rows())
    rescaled = read_keyed_state(spark, state_store, old, ReadSpec(schema=SCHEMA, rescale_to=3))
    by_subtask = rescaled.groupBy("_subtask").count().collect()
    assert sorted(r["_subtask"] for r in by_subtask) == [0, 1, 2]
    assert sum(r["count"] for r in by_subtask) == N_USERS


def test_sha256_and_size_match_the_stored_files(spark: Any, state_store: ObjectStore) -> None:
    handles = write(spark, state_store)
    for handle in handles:
        data = state_store.get(handle.path).data
        assert len(data) == handle.size
        assert hashlib.sha256(data).hexdigest() == handle.sha256
    listed = {o.key for o in state_store.list("chk-1/data/")}
    assert listed == {h.path for h in handles}  # no stray temp or orphan files


def test_rescale_4_to_3_to_6(spark: Any, state_store: ObjectStore) -> None:
    from pyspark.sql import functions as F

    from batchpoint.spark.state_io import (
        ReadSpec,
        read_keyed_state,
        read_keyed_state_for_parallelism,
    )

    all_users = set(range(N_USERS))
    handles4 = write(spark, state_store, parallelism=4)

    # 4 -> 3: each new subtask reads only the old files overlapping its range.
    parts, seen = [], set()
    for subtask in range(3):
        own = key_group_range_for_subtask(MAX_PAR, 3, subtask)
        df = read_keyed_state(spark, state_store, handles4, ReadSpec(own, SCHEMA))
        users = {r.user_id for r in df.select("user_id").collect()}
        assert users == {u for u in all_users if subtask_for_key(u, MAX_PAR, 3) == subtask}
        parts.append(df)
        seen |= users
    assert seen == all_users

    # Write at 3 (from the restored rows), then restore all of it at 6 in one DataFrame.
    restored3 = parts[0].unionByName(parts[1]).unionByName(parts[2])
    handles3 = write(spark, state_store, parallelism=3, df=restored3, attempt_id="a2")
    assert {h.subtask for h in handles3} == {0, 1, 2}
    at6 = read_keyed_state_for_parallelism(spark, state_store, handles3, 6, ReadSpec(schema=SCHEMA))
    rows = at6.select("user_id", "_subtask", F.spark_partition_id().alias("pid")).collect()
    assert len(rows) == N_USERS
    for row in rows:
        assert row["_subtask"] == subtask_for_key(row["user_id"], MAX_PAR, 6)
        assert row["pid"] == row["_subtask"]
    assert normalise(at6.drop("_subtask").collect()) == normalise(make_rows())


def test_empty_subtasks_write_an_empty_file_with_the_schema(
    spark: Any, state_store: ObjectStore
) -> None:
    from batchpoint.spark.state_io import ReadSpec, read_keyed_state

    one_user = make_rows(1)
    handles = write(spark, state_store, parallelism=4, df=state_df(spark, one_user))
    assert sorted(h.subtask for h in handles) == [0, 1, 2, 3]
    empty = [h for h in handles if h.rows == 0]
    assert len(empty) == 3
    for handle in empty:
        table = pq.read_table(io.BytesIO(state_store.get(handle.path).data))
        assert table.num_rows == 0
        assert table.schema.names == [
            "user_id",
            "region",
            "balance",
            "day",
            "updated",
            "_key_group",
        ]
    assert read_keyed_state(spark, state_store, handles, ReadSpec(schema=SCHEMA)).count() == 1

    # An entirely empty input: adaptive execution runs no task, the driver fills in.
    adaptive = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "true")
    try:
        nothing = write(spark, state_store, parallelism=2, df=state_df(spark, []), attempt_id="a3")
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", adaptive)
    assert [(h.subtask, h.rows, h.task_attempt) for h in nothing] == [
        (0, 0, "driver"),
        (1, 0, "driver"),
    ]
    assert read_keyed_state(spark, state_store, nothing, ReadSpec(schema=SCHEMA)).count() == 0


def test_schema_mismatch_names_the_file_and_the_columns(
    spark: Any, state_store: ObjectStore
) -> None:
    from batchpoint.spark.state_io import ReadSpec, read_keyed_state

    handles = write(spark, state_store, parallelism=2)
    wrong = "user_id bigint, region string, balance decimal(10,2), day date, note string"
    with pytest.raises(StateSchemaMismatch) as caught:
        read_keyed_state(spark, state_store, handles, ReadSpec(schema=wrong))
    message = str(caught.value)
    assert handles[0].path in message
    assert "'note'" in message and "missing" in message
    assert "'updated'" in message and "not requested" in message
    assert "'balance' is double, requested decimal128(10, 2)" in message


def test_rolling_files_tile_each_subtask_range(spark: Any, state_store: ObjectStore) -> None:
    from batchpoint.spark.state_io import ReadSpec, read_keyed_state

    rows = make_rows(20_000)
    handles = write(
        spark,
        state_store,
        parallelism=2,
        df=state_df(spark, rows),
        target_file_bytes=16 << 10,
        row_group_bytes=8 << 10,
    )
    assert len(handles) > 4, "small targets must roll to several files per subtask"
    for subtask in (0, 1):
        own = [h for h in handles if h.subtask == subtask]
        assert (
            own[0].key_group_range.start == key_group_range_for_subtask(MAX_PAR, 2, subtask).start
        )
        for before, after in itertools.pairwise(own):
            assert after.key_group_range.start == before.key_group_range.end + 1
    back = read_keyed_state(spark, state_store, handles, ReadSpec(KeyGroupRange(5, 20), SCHEMA))
    expected = {r[0] for r in rows if 5 <= assign_to_key_group(r[0], MAX_PAR) <= 20}
    assert {r.user_id for r in back.select("user_id").collect()} == expected


def test_gaps_and_corruption_are_refused(spark: Any, state_store: ObjectStore) -> None:
    from pyspark.errors import PythonException

    from batchpoint.spark.state_io import ReadSpec, read_keyed_state

    handles = write(spark, state_store, parallelism=2)
    with pytest.raises(StateCoverageError, match=r"no state file covers key groups \[0, 15\]"):
        read_keyed_state(spark, state_store, handles[1:], ReadSpec(schema=SCHEMA))
    victim = handles[0]
    data = bytearray(state_store.get(victim.path).data)
    data[len(data) // 2] ^= 0xFF
    state_store.put(victim.path, bytes(data))
    with pytest.raises(PythonException, match="is corrupt: sha256"):
        read_keyed_state(spark, state_store, handles, ReadSpec(schema=SCHEMA)).count()


def test_missing_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from batchpoint.errors import ConfigError
    from batchpoint.spark.session import find_java

    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ConfigError, match="openjdk-17-jre-headless"):
        find_java()


# --- tests that need their own Spark (settings fixed at SparkContext start) ------------


def run_script(*args: str, timeout: int = 600) -> dict[str, Any]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, __file__, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-5000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(result))
    return result


@pytest.mark.slow
def test_task_retry_writes_new_files_and_leaves_no_orphans(tmp_path: Path) -> None:
    result = run_script("retry", str(tmp_path / "store"))
    assert result["attempts_seen"] == [0, 1]
    assert result["rows"] == 5000
    assert result["orphans"] == []
    assert result["subtask1_attempt"] != result["subtask0_attempt"]


@pytest.mark.slow
def test_state_larger_than_python_worker_memory(tmp_path: Path) -> None:
    result = run_script("bounded-memory", str(tmp_path / "store"))
    assert result["worker_limit_mb"] == 600
    assert result["state_arrow_mb"] > result["worker_limit_mb"]
    assert result["read_rows"] == result["rows"]
    assert result["read_checksum"] == result["source_checksum"]
    assert result["files"] >= 2  # one subtask, rolled past the 256 MiB target


def _retry_main(root: str) -> dict[str, Any]:
    """local[2,2]: each task may run twice. Subtask 1's first attempt fails after its
    files are uploaded; the retry must write new files and the failed ones be removed."""
    from batchpoint.spark.session import spark_session
    from batchpoint.spark.state_io import (
        ReadSpec,
        SubtaskHooks,
        WriteSpec,
        read_keyed_state,
        unreferenced_files,
        write_keyed_state,
    )
    from batchpoint.storage.local import LocalObjectStore

    spark = spark_session("retry-test", "local[2,2]")
    store = LocalObjectStore(root)
    seen_dir = Path(root) / "_attempts"
    seen_dir.mkdir(parents=True)
    df = spark.range(5000).withColumnRenamed("id", "k").selectExpr("k", "k * 2 AS v")
    spec = WriteSpec(
        "chk-7/data", "s", "a1", ("k",), 16, 2, hooks=SubtaskHooks(after=_FailFirst(seen_dir))
    )
    handles = write_keyed_state(df, store, spec)
    back = read_keyed_state(spark, store, handles, ReadSpec(schema="k bigint, v bigint"))
    return {
        "attempts_seen": sorted(int(p.name) for p in seen_dir.iterdir()),
        "rows": back.count(),
        "orphans": unreferenced_files(store, spec, handles),
        "subtask0_attempt": handles[0].task_attempt,
        "subtask1_attempt": next(h.task_attempt for h in handles if h.subtask == 1),
    }


class _FailFirst:
    def __init__(self, seen_dir: Path) -> None:
        self.seen_dir = seen_dir

    def __call__(self, subtask: int, task_attempt: str, handles: list[StateHandle]) -> None:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        if subtask == 1:
            (self.seen_dir / str(ctx.attemptNumber())).touch()
            if ctx.attemptNumber() == 0:
                raise RuntimeError("injected failure after upload, before ack")


def _bounded_memory_main(root: str) -> dict[str, Any]:
    """~690 MiB of state (700k rows of 1 KiB of hex) written by ONE subtask and read
    back, by Python workers whose address space is capped at 600 MiB
    (spark.executor.pyspark.memory sets RLIMIT_AS in each worker, local mode included;
    pyarrow and pyspark alone take ~450 MiB of it)."""
    from pyspark.sql import functions as F

    from batchpoint.spark.session import spark_session
    from batchpoint.spark.state_io import ReadSpec, WriteSpec, read_keyed_state, write_keyed_state
    from batchpoint.storage.local import LocalObjectStore

    rows = 700_000
    spark = spark_session(
        "bounded-memory-test",
        "local[2]",
        {"spark.executor.pyspark.memory": "600m", "spark.driver.memory": "1g"},
    )
    store = LocalObjectStore(root)
    payload = F.concat(
        *[F.sha2(F.concat(F.col("k").cast("string"), F.lit(str(i))), 512) for i in range(8)]
    )
    df = (
        spark.range(0, rows, numPartitions=4)
        .withColumnRenamed("id", "k")
        .withColumn("payload", payload)
    )
    checksum = F.sum(F.crc32(F.concat(F.col("k").cast("string"), F.col("payload"))))
    source_checksum = df.select(checksum).first()[0]
    started = time.monotonic()
    spec = WriteSpec("big", "s", "a1", ("k",), 128, 1, target_file_bytes=256 << 20)
    handles = write_keyed_state(df, store, spec)
    write_s = time.monotonic() - started
    started = time.monotonic()
    back = read_keyed_state(spark, store, handles, ReadSpec(schema="k bigint, payload string"))
    read_rows, read_checksum = back.select(F.count("*"), checksum).first()
    read_s = time.monotonic() - started
    probe = spark.range(1).mapInArrow(_probe_limit, "limit_mb long").first()
    return {
        "rows": rows,
        "state_arrow_mb": rows * (8 + 1024 + 4) // (1 << 20),
        "files_mb": sum(h.size for h in handles) // (1 << 20),
        "files": len(handles),
        "worker_limit_mb": probe[0],
        "write_s": round(write_s, 1),
        "read_s": round(read_s, 1),
        "read_rows": read_rows,
        "read_checksum": read_checksum,
        "source_checksum": source_checksum,
    }


def _probe_limit(batches: Any) -> Any:
    import resource

    import pyarrow as pa

    for _ in batches:
        pass
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    yield pa.RecordBatch.from_pydict({"limit_mb": [soft // (1 << 20) if soft > 0 else -1]})


if __name__ == "__main__":
    mode, root = sys.argv[1], sys.argv[2]
    main = {"retry": _retry_main, "bounded-memory": _bounded_memory_main}[mode]
    print(json.dumps(main(root)))
