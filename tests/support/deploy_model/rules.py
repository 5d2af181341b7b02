"""The documented deploy rules, written again from docs/design/evolution.md without the
product's code: what a deploy of a version on a stored snapshot must do with each state
(kept, renamed, migrated, user migration, new, dropped, incompatible) and whether it
may run at all. The reference (reference.py) applies them; the checker holds the plan
against them."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from support.deploy_model.version import WIDER, Column, StateV


class Expect(enum.StrEnum):
    DEPLOY = "deployable"
    REFUSE = "refused"
    EITHER = "either"  # the docs allow both (a base that recorded no key or schema)


@dataclass(frozen=True)
class StoredState:
    """A state as a checkpoint holds it: the schema its rows were written with, the key
    they were placed by, and the rows (key tuple -> row)."""

    columns: tuple[Column, ...]
    key: tuple[str, ...]
    rows: Mapping[tuple, Mapping[str, Any]]
    recorded: bool = True  # False: written (or rewritten) as by a release before version 2


@dataclass
class StateVerdict:
    kind: str  # kept, migrated, user-migration, incompatible
    why: list[str] = field(default_factory=list)


def state_verdict(stored: StoredState, code: StateV, key: tuple[str, ...]) -> StateVerdict:
    """The rule for one state the code keeps (same uid), key columns aside."""
    declared = {c.name: c for c in code.columns()}
    before = {c.name: c for c in stored.columns}
    if not stored.recorded:
        # no recorded schema: the files' own is read, with the declared nullability
        # unless a stored row holds a null there (docs/design/evolution.md, "In the
        # runtime"); the model never overwrites a null, so its files hold the rows' nulls
        before = {
            n: Column(n, c.type, _nullable_unrecorded(c, declared.get(n), stored.rows))
            for n, c in before.items()
        }
    needs: list[str] = []
    migrated = False
    for name, col in declared.items():
        old = before.get(name)
        if old is None:
            if name in dict(code.defaults) or col.nullable:
                migrated = True
            else:
                needs.append(f"column '{name}' added, non-null, without a default")
            continue
        if old.type != col.type:
            if WIDER.get(old.type) == col.type:
                migrated = True
            else:
                needs.append(f"column '{name}' {old.type} -> {col.type}")
        if old.nullable and not col.nullable:
            needs.append(f"column '{name}' made non-null")
        elif not old.nullable and col.nullable:
            migrated = True
    for name in before:
        if name not in declared:
            if name in code.dropped:
                migrated = True
            else:
                needs.append(f"column '{name}' removed, not marked dropped")
    if [c.name for c in stored.columns if c.name in declared] != [
        c.name for c in code.columns() if c.name in before
    ]:
        migrated = True  # reordered
    if needs and any(n.split("'")[1] in key for n in needs):
        return StateVerdict("incompatible", needs)
    if needs:
        return StateVerdict("user-migration" if code.migrate else "incompatible", needs)
    return StateVerdict("migrated" if migrated else "kept")


def _nullable_unrecorded(
    stored: Column, declared: Column | None, rows: Mapping[tuple, Mapping[str, Any]]
) -> bool:
    if declared is None:
        return stored.nullable
    return declared.nullable or any(row.get(stored.name) is None for row in rows.values())


def migrate_rows(
    stored: StoredState, code: StateV, key: tuple[str, ...], verdict: StateVerdict
) -> dict[tuple, dict[str, Any]]:
    """The stored rows as the code reads them: by the rules (defaults, nulls, casts,
    dropped columns left out) or through the migrate= function, once; placed by `key`."""
    out: dict[tuple, dict[str, Any]] = {}
    defaults = dict(code.defaults)
    for row in stored.rows.values():
        new: dict[str, Any] = {}
        for col in code.columns():
            if col.name in row:
                value = row[col.name]
            elif verdict.kind == "user-migration":
                value = None
            else:
                value = defaults.get(col.name)
            if verdict.kind == "user-migration" and code.migrate is not None and value is None:
                value = code.migrate.fill_of(col.name)
            new[col.name] = value
        out[tuple(new[k] for k in key)] = new
    return out


def fold(
    rows: Mapping[tuple, Mapping[str, Any]],
    events: list[dict[str, Any]],
    code: StateV,
    key: tuple[str, ...],
) -> tuple[dict[tuple, dict[str, Any]], list[dict[str, Any]]]:
    """The operator's fold of one epoch's input rows into a state; the new rows and the
    touched keys' rows."""
    out = {k: dict(v) for k, v in rows.items()}
    touched: list[tuple] = []
    for event in events:
        k = tuple(event[c] for c in key)
        row = out.get(k)
        if row is None:
            row = {c.name: c.fill() for c in code.columns()}
            row.update({"user": event["user"], "grp": event["grp"], "n": 0, "total": 0})
            out[k] = row
        row["n"] = (row["n"] or 0) + 1
        row["total"] = (row["total"] or 0) + event["amount"]
        if k not in touched:
            touched.append(k)
    return out, [dict(out[k]) for k in touched]
