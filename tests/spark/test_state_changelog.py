"""Changelog layers of keyed state: what `changelog` keeps, and what a layered read
merges back, for states with one row per key, several rows per key, and key-only rows.

Each test writes a full snapshot of an old state and one or more changelogs computed by
Spark, then checks that reading all the layers gives exactly the newest state (and
nothing of it is written twice)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from batchpoint.state.format import (
    CHANGE_COLUMN,
    CHANGE_GONE,
    StateCoverageError,
    StateHandle,
    state_rows,
)
from batchpoint.storage.base import ObjectStore

pytestmark = pytest.mark.spark

MAX_PAR = 16
BALANCES = "account string, balance bigint, tags array<string>"
ENTRIES = "account string, entry bigint, note string"


def _write(spark: Any, store: ObjectStore, df: Any, key: list[str], layer: int) -> list:
    from batchpoint.spark.state_io import WriteSpec, write_keyed_state

    spec = WriteSpec(f"chk-{layer}/data", "s", f"a{layer}", tuple(key), MAX_PAR, 3, layer=layer)
    return write_keyed_state(df, store, spec)


def _chain(
    spark: Any,
    store: ObjectStore,
    versions: list[list[tuple]],
    schema: str,
    key: list,
    diff: Callable[[Any, Any, list], Any] | None = None,
):
    """Write versions[0] in full and each later version as a changelog on the one
    before (by `diff`, `changelog` unless given); returns every layer's handles and the
    changelogs' rows."""
    from batchpoint.spark.state_changelog import changelog

    frames = [spark.createDataFrame(v, schema).repartition(2) for v in versions]
    handles = _write(spark, store, frames[0], key, 0)
    logs = []
    for layer, (old, new) in enumerate(itertools.pairwise(frames), start=1):
        changes = (diff or changelog)(new, old, key)
        logs.append(changes.collect())
        handles += _write(spark, store, changes, key, layer)
    return handles, logs


def _read(spark: Any, store: ObjectStore, handles: list, schema: str, **kw: Any) -> list:
    from batchpoint.spark.state_io import ReadSpec, read_keyed_state

    return read_keyed_state(spark, store, handles, ReadSpec(schema=schema, **kw)).collect()


def _bag(rows: list) -> Counter:
    return Counter(tuple(tuple(v) if isinstance(v, list) else v for v in r) for r in rows)


def _task_rows(spark: Any, store: ObjectStore, handles: list, batch_rows: int) -> tuple:
    """The read's task spec (cut into batches of `batch_rows`) and its task table's rows,
    each as a dict, to run the tasks' merge in this process."""
    from batchpoint.spark.state_reader import TASK_COLUMNS, plan_keyed_read

    plan = plan_keyed_read(spark, store, handles)
    names = [column.split()[0] for column in TASK_COLUMNS.split(", ")]
    rows = [dict(zip(names, values, strict=True)) for values in plan.rows]
    return dataclasses.replace(plan.task, batch_rows=batch_rows), rows


def test_a_changelog_holds_only_changed_keys_and_the_layers_merge_back(
    spark: Any, state_store: ObjectStore
) -> None:
    old = [(f"acc{i}", i, [f"t{i % 3}"]) for i in range(600)]
    new = [r for r in old if not 100 <= int(r[0][3:]) < 120]  # 20 accounts closed
    new = [(a, b + 1, t) if int(a[3:]) % 50 == 0 else (a, b, t) for a, b, t in new]  # updates
    new = [(a, b, [*t, "vip"]) if a == "acc7" else (a, b, t) for a, b, t in new]  # array
    new += [(f"new{i}", i, []) for i in range(15)]
    handles, [log] = _chain(spark, state_store, [old, new], BALANCES, ["account"])

    updated = {a for a, _, _ in new if a.startswith("acc") and int(a[3:]) % 50 == 0}
    gone = {f"acc{i}" for i in range(100, 120)}
    assert {r.account for r in log} == updated | gone | {"acc7"} | {f"new{i}" for i in range(15)}
    assert {r.account for r in log if r[CHANGE_COLUMN] == CHANGE_GONE} == gone
    assert _bag(_read(spark, state_store, handles, BALANCES)) == _bag(new)
    assert state_rows(handles) == len(new)
    assert sum(h.rows for h in handles if h.layer == 1) == len(log)


def test_keys_with_several_rows_and_key_only_states_chain_through_layers(
    spark: Any, state_store: ObjectStore
) -> None:
    v0 = [(f"a{i % 40}", i, "x") for i in range(200)]  # 5 entries per account
    v1 = [r for r in v0 if r[0] != "a3"] + [("a5", 1000, "late"), ("a9", 7, None)]
    v2 = [r for r in v1 if r[0] != "a5"] + [("a3", 1, "back")]  # a3 returns, a5 leaves
    handles, logs = _chain(spark, state_store, [v0, v1, v2], ENTRIES, ["account"])
    assert {r.account for r in logs[0]} == {"a3", "a5", "a9"}
    assert {r.account for r in logs[1]} == {"a3", "a5"}
    assert _bag(_read(spark, state_store, handles, ENTRIES)) == _bag(v2)
    assert state_rows(handles) == len(v2)
    # Only the first two layers: the state as of v1.
    assert _bag(_read(spark, state_store, [h for h in handles if h.layer < 2], ENTRIES)) == (
        _bag(v1)
    )

    keys0 = [(f"e{i}",) for i in range(300)]
    keys1 = [k for k in keys0 if k[0] != "e4"] + [("e4x",), ("e4x",)]
    keyed, [log] = _chain(spark, state_store, [keys0, keys1], "event string", ["event"])
    assert sorted(r.event for r in log) == ["e4", "e4x", "e4x"]
    assert _bag(_read(spark, state_store, keyed, "event string")) == _bag(keys1)


@pytest.mark.parametrize("diff", ["rows", "value"])
def test_float_keys_merge_through_the_layers_as_spark_compares_them(
    spark: Any, state_store: ObjectStore, diff: str
) -> None:
    """Spark groups and joins -0.0 with 0.0 and any NaN with NaN, and its group by
    writes the key as 0.0, so a changelog's key and the full file's may differ in their
    bits. Every history of a zero key (absent, -0.0 or 0.0 in each of three versions)
    and of a NaN key, its value changed or not, read back through the layers must give
    the newest version: the full file's -0.0 row stayed beside the 0.0 row that
    replaced it."""
    from batchpoint.spark.value_changelog import value_changelog

    histories = [(0.0, forms) for forms in itertools.product([None, -0.0, 0.0], repeat=3)]
    histories += [(math.nan, forms) for forms in itertools.product([None, math.nan], repeat=3)]
    versions: list[list[tuple]] = [[(1.5, -1, 0)] for _ in range(3)]
    for i, ((_, forms), changes) in enumerate(itertools.product(histories, [False, True])):
        for version, form in enumerate(forms):
            if form is not None:
                versions[version].append((form, i, 10 * i + (version if changes else 0)))
    pick = {"rows": None, "value": lambda new, old, key: value_changelog(new, old, key, "s")}
    schema = "k double, i int, v bigint"
    handles, _ = _chain(spark, state_store, versions, schema, ["k", "i"], pick[diff])

    def same(rows: Any) -> Counter:
        return Counter(("nan" if math.isnan(k) else k, i, v) for k, i, v in rows)

    assert same(_read(spark, state_store, handles, schema)) == same(versions[2])
    assert same(_read(spark, state_store, [h for h in handles if h.layer < 2], schema)) == (
        same(versions[1])
    )


@pytest.mark.parametrize("batch_rows", [1, 7, 10_000])
def test_a_layered_read_in_batches_drops_exactly_the_changed_keys_of_each(
    spark: Any, state_store: ObjectStore, batch_rows: int
) -> None:
    """The tasks' merge, run in this process with the full files cut into batches of
    `batch_rows`: each batch is matched against the changes of its key groups only, so
    a change must drop its key's old rows in whichever batch they fall, and a key group
    with changes but no old rows (or old rows but no changes) must come out whole."""
    import json
    import random

    from batchpoint.spark.state_read_tasks import read_row

    rng = random.Random(batch_rows)
    v0 = [(f"a{i % 90}", i, "x") for i in range(240)]  # one to three entries per account
    v1 = [r for r in v0 if rng.random() < 0.6] + [(f"b{i}", i, None) for i in range(30)]
    v2 = [(a, e + 1, n) if rng.random() < 0.3 else (a, e, n) for a, e, n in v1]
    v2 += [(f"a{i}", -i, "back") for i in range(0, 90, 7)]
    handles, _ = _chain(spark, state_store, [v0, v1, v2], ENTRIES, ["account"])
    task, task_rows = _task_rows(spark, state_store, handles, batch_rows)
    rows = []
    for row in task_rows:
        assert json.loads(row["changelogs"])  # every full file is read merged
        for batch in read_row(task, state_store, row):
            rows += [tuple(r[c] for c in ("account", "entry", "note")) for r in batch.to_pylist()]
    assert _bag(rows) == _bag(v2)


def test_a_layered_read_holds_the_changes_of_the_key_groups_at_hand_only(
    spark: Any, state_store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a changelog that rewrote every key, a task's first batch comes out when
    only the changes of its first key groups have been read: holding every change of
    the subtask made a large state's read workers the largest processes of an epoch.
    The reads are the real ones, counted as they pass."""
    import json

    from batchpoint.spark import state_read_tasks

    old = [(f"a{i}", i, "x") for i in range(3000)]
    new = [(a, e + 1, n) for a, e, n in old]
    handles, _ = _chain(spark, state_store, [old, new], ENTRIES, ["account"])
    read_rows = Counter[str]()
    real = state_read_tasks._raw_tables

    def counted(spec: Any, store: Any, handle: Any, wanted: Any, extra: Any = ()) -> Any:
        for table in real(spec, store, handle, wanted, extra):
            read_rows["changes" if extra else "full"] += table.num_rows
            yield table

    monkeypatch.setattr(state_read_tasks, "_raw_tables", counted)
    task, task_rows = _task_rows(spark, state_store, handles, 50)
    rows = []
    for row in task_rows:
        read_rows.clear()
        subtask_changes = sum(h["rows"] for h in json.loads(row["changelogs"]))
        batches = state_read_tasks.read_row(task, state_store, row)
        first = next(batches)
        # A subtask has 5 or 6 of the 16 key groups; its first run needs the changes of
        # its first group, and a cursor reads at most one batch past what it gives.
        assert subtask_changes > 500
        assert 0 < read_rows["changes"] < subtask_changes / 2
        rows += first.to_pylist()
        rows += [r for batch in batches for r in batch.to_pylist()]
        assert read_rows["changes"] == subtask_changes  # and all of them by the end
    assert _bag(tuple(r[c] for c in ("account", "entry", "note")) for r in rows) == _bag(new)


def test_a_corrupt_changelog_file_is_refused_wherever_its_key_groups_fall(
    spark: Any, state_store: ObjectStore
) -> None:
    """The read reaches a changelog file only when its walk reaches the file's key
    groups: a file whose bytes changed is still refused, the last one of a subtask's
    range as much as the first, before the read gives a result."""
    from pyspark.errors import PythonException

    old = [(f"acc{i}", i, ["a"]) for i in range(400)]
    new = [(a, b + 1, t) for a, b, t in old]
    handles, _ = _chain(spark, state_store, [old, new], BALANCES, ["account"])
    changelogs = sorted((h for h in handles if h.layer == 1), key=lambda h: h.key_group_range.start)
    for victim in (changelogs[0], changelogs[-1]):
        original = state_store.get(victim.path).data
        data = bytearray(original)
        data[len(data) // 2] ^= 0xFF
        state_store.put(victim.path, bytes(data))
        with pytest.raises(PythonException, match="is corrupt: sha256"):
            _read(spark, state_store, handles, BALANCES)
        state_store.put(victim.path, original)
    assert _bag(r[:3] for r in _read(spark, state_store, handles, BALANCES)) == _bag(new)


@pytest.mark.parametrize("reversed_file", ["full", "changelog"])
def test_a_file_out_of_key_group_order_is_refused_by_the_layered_read(
    spark: Any, state_store: ObjectStore, monkeypatch: pytest.MonkeyPatch, reversed_file: str
) -> None:
    """The merge walks the files by key group; a file whose rows come out of that order
    (the writer never writes one: a file from elsewhere) would keep a changed key's old
    rows, so it is refused by name. The real reads, with one file's batches reversed."""
    import json

    from batchpoint.spark import state_read_tasks
    from batchpoint.state.format import StateFileCorrupt

    old = [(f"a{i}", i, "x") for i in range(600)]
    new = [(a, e + 1, n) for a, e, n in old]
    handles, _ = _chain(spark, state_store, [old, new], ENTRIES, ["account"])
    real = state_read_tasks._raw_tables

    def reversed_tables(spec: Any, store: Any, handle: Any, wanted: Any, extra: Any = ()) -> Any:
        tables = list(real(spec, store, handle, wanted, extra))
        yield from reversed(tables) if (reversed_file == "changelog") == bool(extra) else tables

    monkeypatch.setattr(state_read_tasks, "_raw_tables", reversed_tables)
    task, (row, *_) = _task_rows(spark, state_store, handles, 50)
    victim = json.loads(row["handle"]) if reversed_file == "full" else None
    with pytest.raises(StateFileCorrupt, match="not sorted by key group") as refused:
        for _ in state_read_tasks.read_row(task, state_store, row):
            pass
    if victim is not None:
        assert refused.value.path == victim["path"]
    else:
        assert refused.value.path in {h["path"] for h in json.loads(row["changelogs"])}


def test_layered_state_restores_at_another_parallelism(
    spark: Any, state_store: ObjectStore
) -> None:
    from batchpoint.spark.state_io import ReadSpec, read_keyed_state_for_parallelism

    old = [(f"acc{i}", i, ["a"]) for i in range(400)]
    new = [(a, b * 2 if b % 3 == 0 else b, t) for a, b, t in old if b % 11]
    handles, _ = _chain(spark, state_store, [old, new], BALANCES, ["account"])
    for parallelism in (1, 5):
        df = read_keyed_state_for_parallelism(
            spark, state_store, handles, parallelism, ReadSpec(schema=BALANCES)
        )
        rows = df.collect()
        assert _bag(r[:3] for r in rows) == _bag(new)
        assert {r._subtask for r in rows} == set(range(parallelism))


def test_a_changelog_layer_with_a_gap_is_refused(spark: Any, state_store: ObjectStore) -> None:
    old = [(f"acc{i}", i, ["a"]) for i in range(100)]
    new = [(a, b + 1, t) for a, b, t in old]
    handles, _ = _chain(spark, state_store, [old, new], BALANCES, ["account"])
    holed = [h for h in handles if not (h.layer == 1 and h.subtask == 1)]
    with pytest.raises(StateCoverageError, match="changelog layer 1"):
        _read(spark, state_store, holed, BALANCES)
    # The handles' JSON round-trips every layer field a reader relies on.
    changelog = next(h for h in handles if h.layer == 1)
    assert StateHandle.from_json(changelog.to_json()) == changelog
    assert dataclasses.replace(changelog, layer=0).to_json().get("layer") is None
