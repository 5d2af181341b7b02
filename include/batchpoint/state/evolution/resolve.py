"""Compare a state's stored schema with the one its code declares, by the rules.

Columns are matched by name; `_key_group` and the changelog columns (`state.format`'s
RESERVED_COLUMNS) are the format's, not the state's, and are left out on both sides.

Key columns never change, not even with migrate=. A row's key group is a hash of its
key columns, in order, modulo max_parallelism (state.keygroups), computed when the row was
written, and the stored files are laid out by it: each subtask restores the key-group
range it owns. A migrate= function runs over the stored rows within that layout, one
subtask at a time, so a row whose new key hashes elsewhere would stay in a key group
that is not its own, where lookups by key never find it and a second row for the same
key can appear. Changing a key is a re-keying of the whole state (and keys that become
equal would need their values merged), which is a new state: give it a new name, or
re-key the stored state outside the pipeline and bootstrap a savepoint from it. Flink
refuses key schema changes for the same reason. Two key changes move no row and are
allowed: a key column relaxed to nullable (no stored key changes), and an integer key
column widened (int -> bigint: every key-group hash takes integers as bigint, or as
Python ints in format 1, so each stored key keeps its group, and a widening is
injective, so no two keys become one). The widening is a migration like any other: the
first epoch after it rewrites every row (runtime/incremental.rewrite_reason).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pyarrow as pa

from batchpoint.errors import PipelineSpecError
from batchpoint.state.evolution.types import default_problem, is_narrowing, is_nested, is_widening
from batchpoint.state.evolution.verdict import ChangeKind, ColumnChange, SchemaVerdict, VerdictKind
from batchpoint.state.format import RESERVED_COLUMNS, StateError


def resolve_schema_compatibility(
    stored: pa.Schema,
    declared: pa.Schema,
    key_columns: Sequence[str],
    *,
    defaults: Mapping[str, Any] | None = None,
    dropped: Collection[str] = (),
    migrate: bool = False,
    stored_key_columns: Sequence[str] | None = None,
    what: str = "state",
) -> SchemaVerdict:
    """The verdict on restoring state written with `stored` into code that declares
    `declared` with `key_columns`.

    `defaults`: column -> what stored rows read in an added column (None: no default).
    Defaults and drop marks of columns the stored schema does not concern are ignored,
    so a declaration may stay in the code after the deploy that needed it.
    `dropped`: columns the code discards on purpose. `migrate`: the state declares a
    migrate= function. `stored_key_columns`: the key the stored state was written with
    (by default `key_columns`); pass it when the checkpoint records it, so that a key
    made of other columns, or of the same in another order, is seen.
    `what` starts every message: "operator 'balances', state 'totals'".

    Raises PipelineSpecError for a declaration that contradicts itself (a key column the
    schema lacks, a column both declared and marked dropped), StateError for a schema
    with a column name twice.
    """
    old = _columns(stored, what, "stored")
    new = _columns(declared, what, "declared")
    keys = tuple(key_columns)
    old_keys = keys if stored_key_columns is None else tuple(stored_key_columns)
    _check_declaration(new, keys, dropped, what)
    key_set = set(keys) | set(old_keys)
    found = _key_changes(old_keys, keys)
    rekeyed = {c.column for c in found}  # said once: not again as added or removed
    for name in [*old, *(n for n in new if n not in old)]:
        changes = _column_changes(
            name, old.get(name), new.get(name), name in key_set, defaults, dropped
        )
        found.extend(
            c for c in changes if c.kind is not ChangeKind.KEY_CHANGED or name not in rekeyed
        )
    found.extend(_reorders(list(old), list(new)))
    kind = _decide(found, migrate)
    changes = tuple(_finish(c, what, kind) for c in found)
    return SchemaVerdict(what, kind, changes, stored, declared, keys)


def _columns(schema: pa.Schema, what: str, side: str) -> dict[str, pa.Field]:
    fields = [f for f in schema if f.name not in RESERVED_COLUMNS]
    names = [f.name for f in fields]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise StateError(f"{what}: the {side} schema has column(s) {twice} more than once")
    return {f.name: f for f in fields}


def _check_declaration(
    new: Mapping[str, pa.Field], keys: Sequence[str], dropped: Collection[str], what: str
) -> None:
    missing = [k for k in keys if k not in new]
    if missing:
        raise PipelineSpecError(f"{what}: key column(s) {missing} not in the declared schema")
    both = sorted(set(dropped) & set(new))
    if both:
        raise PipelineSpecError(
            f"{what}: column(s) {both} are marked dropped but still declared in the schema"
        )


def _key_changes(old_keys: Sequence[str], keys: Sequence[str]) -> list[ColumnChange]:
    """A key of other columns, or of the same ones in another order (the hash chains
    over the key columns in order)."""
    out = []
    for name in dict.fromkeys([*old_keys, *keys]):
        if name not in keys:
            detail = f"column '{name}' is no longer a key column (key {_key(old_keys, keys)})"
        elif name not in old_keys:
            detail = f"column '{name}' became a key column (key {_key(old_keys, keys)})"
        elif old_keys.index(name) != keys.index(name):
            detail = f"key column '{name}' moved in the key (key {_key(old_keys, keys)})"
        else:
            continue
        out.append(ColumnChange(name, ChangeKind.KEY_CHANGED, None, None, detail))
    return out


def _key(old_keys: Sequence[str], keys: Sequence[str]) -> str:
    return f"({', '.join(old_keys)}) -> ({', '.join(keys)})"


def _column_changes(
    name: str,
    old: pa.Field | None,
    new: pa.Field | None,
    is_key: bool,
    defaults: Mapping[str, Any] | None,
    dropped: Collection[str],
) -> list[ColumnChange]:
    if old is None:
        assert new is not None
        return [_added(name, new, is_key, (defaults or {}).get(name))]
    if new is None:
        return [_removed(name, old, is_key, name in dropped)]
    out = []
    if old.type != new.type:
        out.append(_retyped(name, old.type, new.type, is_key))
    if old.nullable and not new.nullable:
        kind = ChangeKind.KEY_CHANGED if is_key else ChangeKind.NULLABILITY_TIGHTENED
        detail = f"{_column(name, is_key)} ({new.type}) changed from nullable to non-nullable"
        out.append(ColumnChange(name, kind, old.type, new.type, detail))
    elif new.nullable and not old.nullable:
        detail = f"column '{name}' ({new.type}) changed from non-nullable to nullable"
        out.append(ColumnChange(name, ChangeKind.NULLABILITY_RELAXED, old.type, new.type, detail))
    return out


def _added(name: str, new: pa.Field, is_key: bool, default: Any) -> ColumnChange:
    described = f"{_column(name, is_key)} ({_typed(new)}) was added"
    if is_key:
        return ColumnChange(name, ChangeKind.KEY_CHANGED, None, new.type, described)
    if default is not None:
        problem = default_problem(default, new)
        if problem is not None:
            detail = f"{described} with a default that does not fit: {problem}"
            return ColumnChange(name, ChangeKind.DEFAULT_INVALID, None, new.type, detail)
        return ColumnChange(name, ChangeKind.ADDED_WITH_DEFAULT, None, new.type, described, default)
    kind = (
        ChangeKind.ADDED_NULLABLE if new.nullable else ChangeKind.ADDED_NON_NULLABLE_WITHOUT_DEFAULT
    )
    return ColumnChange(name, kind, None, new.type, described)


def _removed(name: str, old: pa.Field, is_key: bool, marked: bool) -> ColumnChange:
    detail = f"{_column(name, is_key)} ({_typed(old)}) was removed"
    if is_key:
        kind = ChangeKind.KEY_CHANGED
    else:
        kind = ChangeKind.DROPPED if marked else ChangeKind.REMOVED_WITHOUT_DROP
    return ColumnChange(name, kind, old.type, None, detail)


def _retyped(name: str, old: pa.DataType, new: pa.DataType, is_key: bool) -> ColumnChange:
    detail = f"{_column(name, is_key)} changed type from {old} to {new}"
    if is_key and not _keeps_key_groups(old, new):
        kind = ChangeKind.KEY_CHANGED
    elif is_key:
        kind = ChangeKind.WIDENED
        detail += " (integers hash as bigint: every stored key keeps its key group)"
    elif is_widening(old, new):
        kind = ChangeKind.WIDENED
    elif is_narrowing(old, new):
        kind = ChangeKind.NARROWED
    else:
        kind = ChangeKind.TYPE_CHANGED
        if is_nested(old) or is_nested(new):
            detail += " (a nested type migrates only when it is unchanged)"
    return ColumnChange(name, kind, old, new, detail)


def _keeps_key_groups(old: pa.DataType, new: pa.DataType) -> bool:
    """An integer widened: the one key type change that moves no stored row."""
    return pa.types.is_integer(old) and pa.types.is_integer(new) and is_widening(old, new)


def _reorders(old: list[str], new: list[str]) -> list[ColumnChange]:
    """Positions among the columns both schemas have, so an added or dropped column
    does not count as moving the others."""
    kept_old = [n for n in old if n in new]
    kept_new = [n for n in new if n in old]
    return [
        ColumnChange(
            name,
            ChangeKind.REORDERED,
            None,
            None,
            f"column '{name}' moved from position {kept_old.index(name) + 1} to {i + 1} "
            "of the columns kept",
        )
        for i, name in enumerate(kept_new)
        if kept_old.index(name) != i
    ]


def _column(name: str, is_key: bool) -> str:
    return f"key column '{name}'" if is_key else f"column '{name}'"


def _typed(field: pa.Field) -> str:
    return f"{field.type}{'' if field.nullable else ', non-nullable'}"


def _decide(changes: Sequence[ColumnChange], migrate: bool) -> VerdictKind:
    problems = [c for c in changes if not c.kind.compatible]
    if not changes:
        return VerdictKind.UNCHANGED
    if not problems:
        return VerdictKind.MIGRATED
    if migrate and all(c.kind.user_migratable for c in problems):
        return VerdictKind.USER_MIGRATION
    return VerdictKind.INCOMPATIBLE


def _finish(change: ColumnChange, what: str, kind: VerdictKind) -> ColumnChange:
    """The message: what happened, then what follows from it under this verdict."""
    if change.kind.compatible:
        then = _MIGRATES[change.kind].format(default=change.default)
    elif kind is VerdictKind.USER_MIGRATION:
        then = "the state's migrate= function converts the stored rows once"
    else:
        then = _REFUSED[change.kind]
    return ColumnChange(
        change.column,
        change.kind,
        change.old_type,
        change.new_type,
        f"{what}: {change.message}: {then}",
        change.default,
    )


_MIGRATES = {
    ChangeKind.ADDED_NULLABLE: "stored rows read null",
    ChangeKind.ADDED_WITH_DEFAULT: "stored rows read the default {default!r}",
    ChangeKind.DROPPED: "marked dropped, its stored values are discarded",
    ChangeKind.WIDENED: "stored values are widened on read",
    ChangeKind.NULLABILITY_RELAXED: "stored rows read as they are",
    ChangeKind.REORDERED: "stored rows are read in the new order",
}
_MIGRATE_FIX = "or declare migrate= on the state to convert the stored rows"
_REFUSED = {
    ChangeKind.NARROWED: f"some stored values may not fit; keep the type, {_MIGRATE_FIX}",
    ChangeKind.TYPE_CHANGED: f"no rule converts it; keep the type, {_MIGRATE_FIX}",
    ChangeKind.NULLABILITY_TIGHTENED: f"stored rows may hold nulls; keep it nullable, "
    f"{_MIGRATE_FIX}",
    ChangeKind.REMOVED_WITHOUT_DROP: "refused, state is never dropped in silence; mark "
    f"the column dropped to discard its values, {_MIGRATE_FIX} (a rename, say)",
    ChangeKind.ADDED_NON_NULLABLE_WITHOUT_DEFAULT: "stored rows have no value for it; "
    f"declare a default, make it nullable, {_MIGRATE_FIX}",
    ChangeKind.KEY_CHANGED: "refused: stored rows are placed in key groups by the hash of "
    "their key, so a key cannot change in place, not even with migrate= (an integer key "
    "may only widen, int -> bigint); keep the key, "
    "or give the state a new name (it starts empty) or re-key the stored state outside "
    "the pipeline and bootstrap a savepoint from it",
    ChangeKind.DEFAULT_INVALID: "refused; fix the default",
}
