"""State schema evolution rules (issue 26): one example per rule, then the rules as
properties: any compatible change reads stored rows as a reference migration built from
plain Python values gives them; any other change is refused (or left to migrate=)."""

from __future__ import annotations

import datetime
import decimal
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from batchpoint.errors import PipelineSpecError
from batchpoint.state.evolution import (
    ChangeKind,
    SchemaVerdict,
    StateSchemaIncompatible,
    VerdictKind,
    check_deployable,
    migrate_batch,
    resolve_schema_compatibility,
)
from batchpoint.state.format import KEY_GROUP_COLUMN, StateError

WHAT = "operator 'balances', state 'totals'"

STORED = pa.schema(
    [
        pa.field("account", pa.string(), nullable=False),
        pa.field("count", pa.int32(), nullable=False),
        pa.field("total", pa.decimal128(10, 2)),
        pa.field("note", pa.string()),
    ]
)
ROWS = pa.table(
    {
        "account": ["a", "b", "c"],
        "count": pa.array([1, 2_000_000_000, -7], pa.int32()),
        "total": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-99999999.99")]),
        "note": ["x", None, ""],
    },
    schema=STORED,
)


def resolve(declared: pa.Schema, **kwargs: Any) -> SchemaVerdict:
    kwargs.setdefault("what", WHAT)
    stored = kwargs.pop("stored", STORED)
    keys = kwargs.pop("keys", ["account"])
    return resolve_schema_compatibility(stored, declared, keys, **kwargs)


def with_field(schema: pa.Schema, name: str, field: pa.Field) -> pa.Schema:
    return schema.set(schema.get_field_index(name), field)


def only_change(verdict: SchemaVerdict, kind: ChangeKind, column: str) -> str:
    assert [(c.kind, c.column) for c in verdict.changes] == [(kind, column)]
    message = verdict.changes[0].message
    assert message.startswith(f"{WHAT}: ") and f"'{column}'" in message
    return message


# --- compatible: migrate on read --------------------------------------------------------


def test_an_unchanged_schema_reads_the_stored_rows_as_they_are() -> None:
    verdict = resolve(STORED, defaults={"count": 0}, dropped=["gone"], migrate=True)
    assert verdict.kind is VerdictKind.UNCHANGED and verdict.changes == ()
    assert migrate_batch(ROWS, verdict) is ROWS  # no copy, no look
    batch = ROWS.to_batches()[0]
    assert migrate_batch(batch, verdict) is batch


def test_an_added_nullable_column_reads_null() -> None:
    declared = STORED.append(pa.field("seen", pa.timestamp("us", tz="UTC")))
    verdict = resolve(declared)
    message = only_change(verdict, ChangeKind.ADDED_NULLABLE, "seen")
    assert "timestamp[us, tz=UTC]" in message and "read null" in message
    migrated = migrate_batch(ROWS, verdict)
    assert migrated.schema.equals(declared, check_metadata=True)
    assert migrated.column("seen").to_pylist() == [None, None, None]
    assert migrated.drop_columns(["seen"]).equals(ROWS)


@pytest.mark.parametrize(
    ("field", "default"),
    [
        (pa.field("fee", pa.decimal128(6, 3), nullable=False), decimal.Decimal("0.250")),
        (pa.field("flag", pa.bool_(), nullable=False), False),
        (pa.field("day", pa.date32()), datetime.date(2026, 1, 31)),
        (pa.field("tag", pa.binary(), nullable=False), b"\x00\xff"),
        (pa.field("ratio", pa.float32()), 2),
    ],
)
def test_an_added_column_with_a_default_reads_the_default(field: pa.Field, default: Any) -> None:
    declared = STORED.append(field)
    verdict = resolve(declared, defaults={field.name: default})
    message = only_change(verdict, ChangeKind.ADDED_WITH_DEFAULT, field.name)
    assert str(field.type) in message and repr(default) in message
    migrated = migrate_batch(ROWS, verdict)
    assert migrated.schema.equals(declared)
    assert migrated.column(field.name).to_pylist() == [default] * 3
    body = json.loads(json.dumps(verdict.to_json(), allow_nan=False))
    assert body["changes"][0]["default"] is not None


def test_a_column_marked_dropped_is_discarded() -> None:
    declared = STORED.remove(STORED.get_field_index("note"))
    verdict = resolve(declared, dropped=["note"])
    message = only_change(verdict, ChangeKind.DROPPED, "note")
    assert "(string)" in message and "discarded" in message
    migrated = migrate_batch(ROWS, verdict)
    assert migrated.schema.equals(declared) and migrated.equals(ROWS.drop_columns(["note"]))


WIDENINGS = [
    (pa.int8(), pa.int16(), [-128, 127, None]),
    (pa.int8(), pa.int64(), [-128, 0, None]),
    (pa.int16(), pa.int32(), [-32768, 32767, None]),
    (pa.int32(), pa.int64(), [-(2**31), 2**31 - 1, None]),
    (pa.uint8(), pa.uint16(), [0, 255, None]),
    (pa.uint8(), pa.int16(), [0, 255, None]),
    (pa.uint16(), pa.int32(), [0, 65535, None]),
    (pa.uint32(), pa.uint64(), [0, 2**32 - 1, None]),
    (pa.uint32(), pa.int64(), [0, 2**32 - 1, None]),
    (pa.float32(), pa.float64(), [0.1, -3.4028234663852886e38, float("inf")]),
    (pa.decimal128(5, 2), pa.decimal128(12, 2), [decimal.Decimal("-999.99"), None, 0]),
    (pa.decimal128(38, 4), pa.decimal256(40, 4), [decimal.Decimal("1" * 34 + ".1234"), None]),
    (pa.string(), pa.large_string(), ["", "€uro", None]),
    (pa.binary(), pa.large_binary(), [b"", b"\x00", None]),
]


@pytest.mark.parametrize(("old", "new", "values"), WIDENINGS, ids=str)
def test_a_widened_column_reads_every_stored_value(
    old: pa.DataType, new: pa.DataType, values: list[Any]
) -> None:
    stored = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", old)])
    declared = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", new)])
    verdict = resolve(declared, stored=stored, keys=["k"])
    message = only_change(verdict, ChangeKind.WIDENED, "v")
    assert f"from {old} to {new}" in message
    rows = pa.table({"k": list(range(len(values))), "v": pa.array(values, old)}, schema=stored)
    migrated = migrate_batch(rows, verdict)
    assert migrated.schema.equals(declared)
    assert migrated.column("v").to_pylist() == rows.column("v").to_pylist()


def test_a_column_relaxed_to_nullable_reads_as_it_was() -> None:
    declared = with_field(STORED, "count", pa.field("count", pa.int32()))
    verdict = resolve(declared)
    message = only_change(verdict, ChangeKind.NULLABILITY_RELAXED, "count")
    assert "non-nullable to nullable" in message and "int32" in message
    migrated = migrate_batch(ROWS, verdict)
    assert migrated.schema.equals(declared) and migrated.to_pylist() == ROWS.to_pylist()


def test_reordered_columns_read_in_the_new_order() -> None:
    declared = pa.schema([STORED.field(n) for n in ("note", "account", "total", "count")])
    verdict = resolve(declared)
    assert verdict.kind is VerdictKind.MIGRATED
    assert {c.kind for c in verdict.changes} == {ChangeKind.REORDERED}
    assert {c.column for c in verdict.changes} == {"note", "account", "count"}  # total: 3rd
    note = next(c for c in verdict.changes if c.column == "note")
    assert "position 4 to 1" in note.message
    migrated = migrate_batch(ROWS, verdict)
    assert migrated.column_names == ["note", "account", "total", "count"]
    assert migrated.to_pylist() == ROWS.to_pylist()  # same rows, as dicts


def test_several_compatible_changes_at_once_keep_the_declared_metadata() -> None:
    declared = pa.schema(
        [
            pa.field("score", pa.float64(), nullable=False),
            pa.field("count", pa.int64()),
            pa.field("account", pa.string(), nullable=False),
            pa.field("total", pa.decimal128(20, 2)),
        ],
        metadata={"owner": "payments"},
    )
    verdict = resolve(declared, defaults={"score": 1.5}, dropped=["note"])
    assert verdict.kind is VerdictKind.MIGRATED and verdict.deployable
    assert {(c.column, c.kind) for c in verdict.changes} == {
        ("score", ChangeKind.ADDED_WITH_DEFAULT),
        ("count", ChangeKind.WIDENED),
        ("count", ChangeKind.NULLABILITY_RELAXED),
        ("count", ChangeKind.REORDERED),
        ("account", ChangeKind.REORDERED),
        ("total", ChangeKind.WIDENED),
        ("note", ChangeKind.DROPPED),
    }
    migrated = migrate_batch(ROWS, verdict)
    assert migrated.schema.equals(declared, check_metadata=True)
    assert migrated.to_pylist() == [
        {"score": 1.5, "count": r["count"], "account": r["account"], "total": r["total"]}
        for r in ROWS.to_pylist()
    ]


def test_equal_nested_types_are_unchanged_and_changed_ones_refused() -> None:
    point = pa.struct([pa.field("x", pa.int32()), pa.field("y", pa.int32())])
    stored = pa.schema([pa.field("k", pa.string()), pa.field("p", point)])
    assert resolve(stored, stored=stored, keys=["k"]).kind is VerdictKind.UNCHANGED
    wider = pa.struct([*point, pa.field("z", pa.int32())])
    declared = pa.schema([pa.field("k", pa.string()), pa.field("p", wider)])
    verdict = resolve(declared, stored=stored, keys=["k"])
    message = only_change(verdict, ChangeKind.TYPE_CHANGED, "p")
    assert verdict.kind is VerdictKind.INCOMPATIBLE
    assert str(point) in message and str(wider) in message and "nested" in message
    listed = pa.schema([pa.field("k", pa.string()), pa.field("p", pa.list_(pa.int64()))])
    stored_list = listed.set(1, pa.field("p", pa.list_(pa.int32())))
    assert resolve(listed, stored=stored_list, keys=["k"]).kind is VerdictKind.INCOMPATIBLE


def test_reserved_format_columns_pass_through_and_are_not_state_columns() -> None:
    stored = STORED.append(pa.field(KEY_GROUP_COLUMN, pa.int32(), nullable=False))
    declared = STORED.append(pa.field("seen", pa.int64()))
    verdict = resolve(declared, stored=stored)
    only_change(verdict, ChangeKind.ADDED_NULLABLE, "seen")
    rows = ROWS.append_column(stored.field(KEY_GROUP_COLUMN), pa.array([3, 3, 9], pa.int32()))
    migrated = migrate_batch(rows, verdict)
    assert migrated.column_names == [*declared.names, KEY_GROUP_COLUMN]
    assert migrated.column(KEY_GROUP_COLUMN).to_pylist() == [3, 3, 9]


def test_a_state_file_migrates_row_group_by_row_group(tmp_path: Path) -> None:
    path = tmp_path / "state.parquet"
    rows = pa.concat_tables([ROWS] * 5)
    pq.write_table(rows, path, row_group_size=4)
    declared = with_field(STORED, "count", pa.field("count", pa.int64(), nullable=False))
    declared = declared.append(pa.field("seen", pa.int64()))
    verdict = resolve(declared, defaults={"seen": -1})
    file = pq.ParquetFile(path)
    assert file.num_row_groups == 4
    batches = [migrate_batch(b, verdict) for b in file.iter_batches(batch_size=4)]
    assert all(isinstance(b, pa.RecordBatch) and b.schema.equals(declared) for b in batches)
    assert pa.Table.from_batches(batches).equals(migrate_batch(rows, verdict))
    assert pa.Table.from_batches(batches).column("seen").to_pylist() == [-1] * 15
    empty = migrate_batch(rows.slice(0, 0), verdict)
    assert empty.num_rows == 0 and empty.schema.equals(declared)


def test_declarations_left_in_the_code_after_their_deploy_change_nothing() -> None:
    verdict = resolve(STORED, defaults={"note": "-", "gone": 1}, dropped=["old"])
    assert verdict.kind is VerdictKind.UNCHANGED


def test_a_compatible_change_needs_no_migrate_function_even_when_one_is_declared() -> None:
    verdict = resolve(STORED.append(pa.field("seen", pa.int64())), migrate=True)
    assert verdict.kind is VerdictKind.MIGRATED


def test_a_key_column_may_become_nullable() -> None:
    declared = with_field(STORED, "account", pa.field("account", pa.string()))
    verdict = resolve(declared)
    only_change(verdict, ChangeKind.NULLABILITY_RELAXED, "account")
    assert verdict.kind is VerdictKind.MIGRATED


# --- refused, or left to the state's migrate= function ----------------------------------


@pytest.mark.parametrize(
    ("declared", "kind", "column", "words"),
    [
        (
            with_field(STORED, "count", pa.field("count", pa.int16(), nullable=False)),
            ChangeKind.NARROWED,
            "count",
            ["from int32 to int16", "may not fit"],
        ),
        (
            with_field(STORED, "total", pa.field("total", pa.decimal128(8, 2))),
            ChangeKind.NARROWED,
            "total",
            ["from decimal128(10, 2) to decimal128(8, 2)"],
        ),
        (
            with_field(STORED, "note", pa.field("note", pa.int64())),
            ChangeKind.TYPE_CHANGED,
            "note",
            ["from string to int64", "no rule converts it"],
        ),
        (
            with_field(STORED, "total", pa.field("total", pa.decimal128(12, 3))),
            ChangeKind.TYPE_CHANGED,
            "total",
            ["from decimal128(10, 2) to decimal128(12, 3)"],
        ),
        (
            with_field(STORED, "count", pa.field("count", pa.uint64(), nullable=False)),
            ChangeKind.TYPE_CHANGED,
            "count",
            ["from int32 to uint64"],
        ),
        (
            STORED.remove(STORED.get_field_index("note")),
            ChangeKind.REMOVED_WITHOUT_DROP,
            "note",
            ["(string) was removed", "mark the column dropped"],
        ),
        (
            STORED.append(pa.field("seen", pa.int64(), nullable=False)),
            ChangeKind.ADDED_NON_NULLABLE_WITHOUT_DEFAULT,
            "seen",
            ["(int64, non-nullable) was added", "declare a default"],
        ),
        (
            with_field(STORED, "note", pa.field("note", pa.string(), nullable=False)),
            ChangeKind.NULLABILITY_TIGHTENED,
            "note",
            ["nullable to non-nullable", "may hold nulls"],
        ),
    ],
    ids=lambda v: v.value if isinstance(v, ChangeKind) else None,
)
def test_a_change_no_rule_migrates_is_refused_or_left_to_migrate(
    declared: pa.Schema, kind: ChangeKind, column: str, words: list[str]
) -> None:
    refused = resolve(declared)
    message = only_change(refused, kind, column)
    assert refused.kind is VerdictKind.INCOMPATIBLE and not refused.deployable
    assert all(w in message for w in words) and "declare migrate=" in message
    assert refused.messages == [message]
    with pytest.raises(StateSchemaIncompatible) as raised:
        refused.check()
    assert message in str(raised.value)
    with pytest.raises(StateError, match="cannot be migrated by the rules"):
        migrate_batch(ROWS, refused)

    user = resolve(declared, migrate=True)
    assert user.kind is VerdictKind.USER_MIGRATION and user.deployable
    assert "migrate= function converts the stored rows once" in only_change(user, kind, column)
    user.check()
    with pytest.raises(StateError, match="user-migration"):
        migrate_batch(ROWS, user)


@pytest.mark.parametrize(
    "new",
    [
        pa.timestamp("ns", tz="UTC"),
        pa.timestamp("ms", tz="UTC"),
        pa.timestamp("us"),
        pa.timestamp("us", tz="Europe/Paris"),
        pa.date64(),
    ],
    ids=str,
)
def test_a_timestamp_keeps_its_unit_and_zone(new: pa.DataType) -> None:
    old = pa.timestamp("us", tz="UTC")
    stored = STORED.append(pa.field("seen", old))
    verdict = resolve(STORED.append(pa.field("seen", new)), stored=stored)
    message = only_change(verdict, ChangeKind.TYPE_CHANGED, "seen")
    assert verdict.kind is VerdictKind.INCOMPATIBLE and f"from {old} to {new}" in message


@pytest.mark.parametrize(
    ("field", "default", "why"),
    [
        (pa.field("n", pa.int64(), nullable=False), "abc", "is not a int64"),
        (pa.field("n", pa.int64(), nullable=False), 1.5, "it would read 1"),
        (pa.field("n", pa.int8(), nullable=False), 300, "is not a int8"),
        (pa.field("n", pa.int32(), nullable=False), True, "is not a int32"),
        (pa.field("n", pa.float32()), 1e40, "out of the range of float"),
        (pa.field("n", pa.decimal128(5, 2)), decimal.Decimal("1.234"), "is not a decimal128"),
        (pa.field("n", pa.string()), 7, "is not a string"),
    ],
)
def test_a_default_that_does_not_fit_its_column_is_refused_even_with_migrate(
    field: pa.Field, default: Any, why: str
) -> None:
    for migrate in (False, True):
        verdict = resolve(STORED.append(field), defaults={"n": default}, migrate=migrate)
        message = only_change(verdict, ChangeKind.DEFAULT_INVALID, "n")
        assert verdict.kind is VerdictKind.INCOMPATIBLE
        assert why in message and "fix the default" in message


KEY_CHANGES = {
    "widened": (with_field(STORED, "account", pa.field("account", pa.large_string(), False)), {}),
    "retyped": (with_field(STORED, "account", pa.field("account", pa.int64(), False)), {}),
    "tightened": (STORED, {"stored": with_field(STORED, "account", pa.field("account", "string"))}),
    "removed": (
        STORED.remove(0),
        {"keys": ["count"], "stored_key_columns": ["account"], "dropped": ["account"]},
    ),
    "renamed": (
        STORED.set(0, pa.field("user", pa.string(), False)),
        {"keys": ["user"], "stored_key_columns": ["account"], "dropped": ["account"]},
    ),
    "renamed, old key not recorded": (
        STORED.set(0, pa.field("user", "string", False)),
        {"keys": ["user"]},
    ),
    "a key where there was none": (STORED, {"keys": ["account"], "stored_key_columns": []}),
    "added to the key": (STORED, {"keys": ["account", "count"], "stored_key_columns": ["account"]}),
    "reordered in the key": (
        STORED,
        {"keys": ["count", "account"], "stored_key_columns": ["account", "count"]},
    ),
}


@pytest.mark.parametrize("change", list(KEY_CHANGES))
def test_a_key_change_is_refused_even_with_migrate(change: str) -> None:
    declared, kwargs = KEY_CHANGES[change]
    verdict = resolve(declared, migrate=True, **kwargs)
    assert verdict.kind is VerdictKind.INCOMPATIBLE
    keyed = [c for c in verdict.changes if c.kind is ChangeKind.KEY_CHANGED]
    assert keyed and all("key groups" in c.message for c in keyed)
    assert all("not even with migrate=" in c.message for c in keyed)
    retyped = [c for c in keyed if c.old_type and c.new_type and c.old_type != c.new_type]
    for c in retyped:
        assert f"from {c.old_type} to {c.new_type}" in c.message


def test_an_integer_key_may_widen_since_every_stored_key_keeps_its_key_group() -> None:
    """An id outgrowing int (int -> bigint) is migrated by the rules: every key-group
    hash takes integers as bigint (tests/spark/test_key_groups.py holds each format to
    that), and a widening is injective. Any other key type change is still refused."""
    keyed = ["count"]
    wider = with_field(STORED, "count", pa.field("count", pa.int64(), False))
    for migrate in (False, True):
        verdict = resolve(wider, keys=keyed, migrate=migrate)
        assert verdict.kind is VerdictKind.MIGRATED
        message = only_change(verdict, ChangeKind.WIDENED, "count")
        assert "key column 'count' changed type from int32 to int64" in message
        assert "keeps its key group" in message
    migrated = migrate_batch(ROWS, resolve(wider, keys=keyed))
    assert migrated.schema.field("count").type == pa.int64()
    assert migrated.column("count").to_pylist() == ROWS.column("count").to_pylist()
    for other in (pa.int16(), pa.float64(), pa.string(), pa.decimal128(20, 0)):
        refused = resolve(with_field(STORED, "count", pa.field("count", other, False)), keys=keyed)
        assert refused.kind is VerdictKind.INCOMPATIBLE, other
        message = only_change(refused, ChangeKind.KEY_CHANGED, "count")
        assert "an integer key may only widen" in message


def test_a_key_change_names_the_key_before_and_after() -> None:
    verdict = resolve(STORED, keys=["count", "account"], stored_key_columns=["account", "count"])
    assert [c.column for c in verdict.changes] == ["account", "count"]
    assert all("(account, count) -> (count, account)" in m for m in verdict.messages)


def test_one_error_names_every_refused_change_of_every_state() -> None:
    narrowed = resolve(with_field(STORED, "count", pa.field("count", pa.int8(), False)))
    removed = resolve(STORED.remove(3), what="operator 'fraud', state 'seen'")
    migrated = resolve(STORED.append(pa.field("seen", pa.int64())))
    check_deployable([migrated])
    with pytest.raises(StateSchemaIncompatible) as raised:
        check_deployable([narrowed, migrated, removed])
    text = str(raised.value)
    assert narrowed.messages[0] in text and removed.messages[0] in text
    assert "operator 'fraud', state 'seen': column 'note'" in text
    assert raised.value.verdicts == [narrowed, removed]


def test_a_self_contradicting_declaration_is_a_spec_error() -> None:
    with pytest.raises(PipelineSpecError, match=r"\['note'\] are marked dropped but still"):
        resolve(STORED, dropped=["note"])
    with pytest.raises(PipelineSpecError, match=r"key column\(s\) \['user'\] not in"):
        resolve(STORED, keys=["user"])
    twice = pa.schema([*STORED, pa.field("note", pa.int64())])
    with pytest.raises(StateError, match=r"stored schema has column\(s\) \['note'\] more"):
        resolve(STORED, stored=twice)


def test_rows_that_are_not_the_stored_schema_are_refused() -> None:
    verdict = resolve(STORED.append(pa.field("seen", pa.int64())))
    wrong = ROWS.set_column(1, "count", pa.array([1, 2, 3], pa.int64()))
    with pytest.raises(StateError, match="'count' is int64, stored as int32"):
        migrate_batch(wrong, verdict)
    with pytest.raises(StateError, match="'note' missing"):
        migrate_batch(ROWS.drop_columns(["note"]), verdict)


def test_the_verdict_is_json() -> None:
    declared = with_field(STORED, "count", pa.field("count", pa.int64(), False))
    declared = declared.append(pa.field("at", pa.timestamp("ms", tz="UTC"), nullable=False))
    declared = declared.append(pa.field("ratio", pa.float64(), nullable=False))
    moment = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    verdict = resolve(declared, defaults={"at": moment, "ratio": float("inf")}, migrate=True)
    body = json.loads(json.dumps(verdict.to_json(), allow_nan=False))
    assert body["kind"] == "migrated" and body["deployable"] is True
    assert body["what"] == WHAT and body["key_columns"] == ["account"]
    changes = {c["column"]: c for c in body["changes"]}
    assert changes["count"] == {
        "column": "count",
        "kind": "widened",
        "compatible": True,
        "old_type": "int32",
        "new_type": "int64",
        "message": verdict.changes[0].message,
    }
    assert changes["at"]["default"] == "2026-01-01T00:00:00+00:00"
    assert changes["ratio"]["default"] == "inf"
    assert body["declared_schema"][-1] == {"name": "ratio", "type": "double", "nullable": False}
    assert body["messages"] == []
