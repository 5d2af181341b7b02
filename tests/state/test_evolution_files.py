"""The evolution rules applied to real state files (issue 26): a random state written as
a Parquet state file by the format's own writer (the header, `_key_group`, the handle
with its size and sha256), then a random deploy read through the executors' read path
(`state_read_tasks.read_task`, as Spark runs it, with the task spec the driver builds):
- for a deploy the rules call compatible, the rows read are what a reference migration
  gives, written here with pandas, apart from the rules (values of every stored column
  kept, an added column null or its default, dropped columns gone, the declared order),
  in the Arrow schema Spark was promised;
- for any other deploy, the read is refused with the state, the column and the verdict,
  and the file is never read in the declared schema without a verdict either.
Types are those a Spark-written state file holds.
"""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.types as pt
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

from batchpoint.runtime.base_schemas import BaseStateSchema, comparable_stored, stored_state_schema
from batchpoint.spark.shipping import ship_store
from batchpoint.spark.state_read_tasks import TaskRead, read_task
from batchpoint.state.evolution import SchemaVerdict, VerdictKind, resolve_schema_compatibility
from batchpoint.state.format import (
    FORMAT_VERSION,
    StateError,
    StateFileWriter,
    StateHandle,
    StateSchemaMismatch,
    file_schema,
)
from batchpoint.state.keygroups import KeyGroupRange
from batchpoint.state.schemas import _digest, schema_fingerprint, types_fingerprint
from batchpoint.storage.local import LocalObjectStore

MAX_PARALLELISM = 8
WHAT = "operator 'aggregate', state 'totals'"
INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
PLAIN = [*INTS, pa.float32(), pa.float64(), pa.string(), pa.bool_(), pa.date32()]
PLAIN += [pa.timestamp("us", tz="UTC"), pa.binary()]
PROPERTY = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def decimals() -> st.SearchStrategy[pa.DataType]:
    return st.integers(2, 18).flatmap(
        lambda p: st.integers(0, min(4, p - 1)).map(lambda s: pa.decimal128(p, s))
    )


def narrower_decimals(t: pa.DataType) -> list[pa.DataType]:
    if pt.is_decimal(t) and t.precision - 1 > t.scale:
        return [pa.decimal128(t.precision - 1, t.scale)]
    return []


TYPES = st.one_of(st.sampled_from(PLAIN), decimals())


def wider(t: pa.DataType) -> list[pa.DataType]:
    """Written apart from the rules: the types every value of `t` is a value of."""
    if t in INTS:
        return INTS[INTS.index(t) + 1 :]
    if t == pa.float32():
        return [pa.float64()]
    if pt.is_decimal(t):
        return [pa.decimal128(q, t.scale) for q in (t.precision + 1, 38)]
    return []


def values(t: pa.DataType) -> st.SearchStrategy[Any]:
    if pt.is_integer(t):
        return st.integers(-(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1)
    if pt.is_floating(t):
        return st.floats(width=t.bit_width, allow_nan=False)
    if pt.is_decimal(t):
        digits = st.integers(-(10**t.precision - 1), 10**t.precision - 1)
        return digits.map(lambda i: decimal.Decimal(i).scaleb(-t.scale))
    if pt.is_timestamp(t):
        bounds = datetime.datetime(1900, 1, 1), datetime.datetime(2200, 1, 1)
        return st.datetimes(*bounds, timezones=st.just(datetime.UTC))
    return {
        "string": st.text(max_size=4),
        "binary": st.binary(max_size=4),
        "bool": st.booleans(),
        "date32[day]": st.dates(),
    }[str(t)]


@st.composite
def stored_states(draw: st.DrawFn) -> tuple[pa.Schema, dict[str, list[Any]]]:
    """A state: key `k` (int64) and 1..4 value columns, all nullable as Spark writes
    them, with a few rows."""
    fields = [pa.field("k", pa.int64())]
    fields += [pa.field(f"c{i}", draw(TYPES)) for i in range(draw(st.integers(1, 4)))]
    rows = draw(st.integers(1, 6))
    columns = {"k": list(range(rows))}
    for f in fields[1:]:
        columns[f.name] = draw(st.lists(values(f.type) | st.none(), min_size=rows, max_size=rows))
    return pa.schema(fields), columns


@st.composite
def compatible(draw: st.DrawFn) -> tuple[pa.Schema, dict[str, list[Any]], dict[str, Any]]:
    stored, columns = draw(stored_states())
    deploy: dict[str, Any] = {"defaults": {}, "dropped": []}
    fields = []
    for f in stored:
        if f.name != "k" and draw(st.integers(0, 3)) == 0:
            deploy["dropped"].append(f.name)
            continue
        if f.name != "k" and wider(f.type) and draw(st.booleans()):
            f = f.with_type(draw(st.sampled_from(wider(f.type))))
        fields.append(f)
    for i in range(draw(st.integers(0, 2))):
        added = pa.field(f"added{i}", draw(TYPES))
        default = draw(st.none() | values(added.type))
        if default is not None:
            deploy["defaults"][added.name] = default
        fields.append(added)
    deploy["declared"] = pa.schema(draw(st.permutations(fields)))
    return stored, columns, deploy


def write_state_file(
    store: LocalObjectStore, tmp: Path, stored: pa.Schema, columns, fingerprint: str = ""
) -> StateHandle:
    """One state file of every key group, as a subtask of parallelism 1 writes it (with
    `fingerprint` in its header and handle: this release's by default)."""
    fingerprint = fingerprint or schema_fingerprint(stored)
    header = {
        "format": FORMAT_VERSION,
        "state": "state-totals",
        "key_columns": ["k"],
        "max_parallelism": MAX_PARALLELISM,
        "parallelism": 1,
        "schema_fingerprint": fingerprint,
    }
    schema = file_schema(stored, header)
    rows = len(columns["k"])
    groups = sorted(k % MAX_PARALLELISM for k in columns["k"])
    arrays = [pa.array(columns[f.name], f.type) for f in stored]
    arrays.append(pa.array(groups, pa.int32()))
    local = tmp / "state.parquet"
    writer = StateFileWriter(local, schema)
    writer.write(pa.RecordBatch.from_arrays(arrays, schema=schema))
    written = writer.close()
    key = f"data/state-totals-{fingerprint}.parquet"
    store.upload_file(key, local)
    local.unlink()
    struct = from_arrow_schema(stored)
    return StateHandle(
        path=key,
        size=written.size,
        sha256=written.sha256,
        rows=rows,
        key_group_range=KeyGroupRange(0, MAX_PARALLELISM - 1),
        name="state-totals",
        schema_fingerprint=fingerprint,
        subtask=0,
        parallelism=1,
        max_parallelism=MAX_PARALLELISM,
        spark_schema=struct.json(),
    )


def read(
    store: LocalObjectStore,
    handle: StateHandle,
    requested: pa.Schema,
    verdict: SchemaVerdict | None,
) -> pa.Table:
    """The file through the executors' read path, with the task spec the driver builds
    (state_reader._task_read): Spark's arrow types of the declared schema out."""
    promised = verdict.declared if verdict is not None else requested
    out = to_arrow_schema(from_arrow_schema(promised), timezone="UTC")
    task = TaskRead(
        store=ship_store(store),
        out_schema=out,
        state_columns=tuple(requested.names),
        max_parallelism=MAX_PARALLELISM,
        new_parallelism=None,
        subtask_column=None,
        verify=True,
        batch_rows=2,  # several batches per file: migrated one at a time
        requested=requested,
        key_columns=("k",),
        verdict=verdict,
    )
    row = {"handle": json.dumps(handle.to_json()), "lo": 0, "hi": MAX_PARALLELISM - 1}
    tasks = pa.RecordBatch.from_pylist([{**row, "changelogs": "[]"}])
    batches: Iterator[pa.RecordBatch] = read_task(task, iter([tasks]))
    return pa.Table.from_batches(list(batches), schema=out)


def reference(columns: dict[str, list[Any]], deploy: dict[str, Any]) -> pd.DataFrame:
    """What the stored rows must read as, built with pandas from the drawn values."""
    rows = len(columns["k"])
    frame = pd.DataFrame(index=range(rows))
    for f in deploy["declared"]:
        if f.name in columns:
            frame[f.name] = pd.Series(columns[f.name], dtype=object)
        else:
            frame[f.name] = pd.Series([deploy["defaults"].get(f.name)] * rows, dtype=object)
    return frame.sort_values("k", ignore_index=True)


def as_frame(table: pa.Table) -> pd.DataFrame:
    frame = pd.DataFrame(
        {n: pd.Series(table.column(n).to_pylist(), dtype=object) for n in table.column_names}
    )
    return frame.sort_values("k", ignore_index=True)


def verdict_of(stored_schema: pa.Schema, deploy: dict[str, Any], migrate: bool = False):
    declared = deploy["declared"]
    return resolve_schema_compatibility(
        comparable_stored(BaseStateSchema(stored_schema), declared),
        declared,
        ["k"],
        defaults=deploy["defaults"],
        dropped=deploy["dropped"],
        migrate=migrate,
        what=WHAT,
    )


@PROPERTY
@given(drawn=compatible())
def test_a_compatible_deploy_reads_stored_files_as_a_reference_migration(
    drawn, tmp_path_factory: pytest.TempPathFactory
) -> None:
    stored, columns, deploy = drawn
    tmp = tmp_path_factory.mktemp("files")
    store = LocalObjectStore(tmp / "store")
    handle = write_state_file(store, tmp, stored, columns)
    # The schema the base holds, as the runtime finds it (the handle's Spark schema).
    found = stored_state_schema(store, [handle])
    assert types_fingerprint(found) == types_fingerprint(stored)
    verdict = verdict_of(found, deploy)
    event(verdict.kind.value)
    assert verdict.kind in (VerdictKind.UNCHANGED, VerdictKind.MIGRATED), verdict.messages
    if verdict.kind is VerdictKind.UNCHANGED:
        got = read(store, handle, deploy["declared"], None)
    else:
        got = read(store, handle, verdict.stored, verdict)
    assert got.column_names == deploy["declared"].names
    pd.testing.assert_frame_equal(as_frame(got), reference(columns, deploy))


@st.composite
def refused(draw: st.DrawFn) -> tuple[pa.Schema, dict[str, list[Any]], dict[str, Any], str]:
    """One change no rule migrates: a narrowing, another type, a column removed
    without a drop mark, a non-nullable column added without a default, a key retyped."""
    stored, columns = draw(stored_states())
    kind = draw(st.sampled_from(["narrow", "retype", "remove", "add-non-null", "key"]))
    fields = list(stored)
    deploy: dict[str, Any] = {"defaults": {}, "dropped": []}
    at = draw(st.integers(1, len(fields) - 1))
    old = fields[at]
    if kind == "narrow":  # a column of a type with narrower ones, stored first
        old = old.with_type(
            draw(st.sampled_from([*INTS[1:], pa.float64()]) | decimals().filter(narrower_decimals))
        )
        rows = len(columns["k"])
        columns[old.name] = draw(st.lists(values(old.type), min_size=rows, max_size=rows))
        stored = stored.set(at, old)
        narrower = [t for t in [*PLAIN, *narrower_decimals(old.type)] if old.type in wider(t)]
        fields[at] = old.with_type(draw(st.sampled_from(narrower)))
    elif kind == "retype":
        others = [t for t in PLAIN if t != old.type and t not in wider(old.type)]
        fields[at] = old.with_type(draw(st.sampled_from(others)))
    elif kind == "remove":
        del fields[at]
    elif kind == "add-non-null":
        fields.append(pa.field("added", draw(TYPES), nullable=False))
    else:
        fields[0] = fields[0].with_type(
            draw(st.sampled_from([t for t in PLAIN if t != pa.int64()]))
        )
        old = stored.field("k")
    deploy["declared"] = pa.schema(fields)
    deploy["column"] = old.name if kind != "add-non-null" else "added"
    return stored, columns, deploy, kind


@PROPERTY
@given(drawn=refused(), migrate=st.booleans())
def test_any_other_deploy_is_refused_by_the_reader(
    drawn, migrate: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    stored, columns, deploy, kind = drawn
    event(kind)
    tmp = tmp_path_factory.mktemp("files")
    store = LocalObjectStore(tmp / "store")
    handle = write_state_file(store, tmp, stored, columns)
    verdict = verdict_of(stored_state_schema(store, [handle]), deploy, migrate)
    user = migrate and kind != "key"
    assert verdict.kind is (VerdictKind.USER_MIGRATION if user else VerdictKind.INCOMPATIBLE)
    assert any(f"{WHAT}: " in m and f"'{deploy['column']}'" in m for m in verdict.messages)
    # The reader refuses the verdict: it never reads rows the rules do not migrate.
    with pytest.raises(StateError, match=verdict.kind.value):
        read(store, handle, verdict.stored, verdict)
    # Nor does a read in the declared schema, without a verdict, get past the header.
    if types_fingerprint(deploy["declared"]) != types_fingerprint(stored):
        with pytest.raises(StateSchemaMismatch):
            read(store, handle, deploy["declared"], None)


def test_a_file_whose_fingerprint_an_earlier_release_computed_reads_by_its_own_schema(
    tmp_path: Path,
) -> None:
    """Releases before the node-by-node canonical form fingerprinted the type's text with
    `large_` taken out, nested names included: the file of a struct with a field
    `is_large_order` carries the fingerprint of one with `is_order`."""
    inner = pa.struct([("is_large_order", pa.bool_()), ("n", pa.int64())])
    stored = pa.schema([pa.field("k", pa.int64(), False), pa.field("v", inner)])
    textual = str(inner).replace("large_", "")
    earlier = _digest([("k", "int64"), ("v", textual)], 16) + ".0000abcd"
    assert earlier.split(".")[0] != types_fingerprint(stored)
    columns = {"k": [1, 2], "v": [{"is_large_order": True, "n": 3}, None]}
    store = LocalObjectStore(tmp_path / "store")
    handle = write_state_file(store, tmp_path, stored, columns, earlier)
    assert read(store, handle, stored, None).to_pydict() == columns
    renamed = pa.struct([("is_order", pa.bool_()), ("n", pa.int64())])
    with pytest.raises(StateSchemaMismatch, match="v"):
        read(store, handle, pa.schema([stored.field("k"), pa.field("v", renamed)]), None)
