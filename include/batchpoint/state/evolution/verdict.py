"""What a schema comparison decides: a `SchemaVerdict` over `ColumnChange`s.

Flink's `TypeSerializerSchemaCompatibility` has compatibleAsIs, compatibleAfterMigration
and incompatible; batchpoint's verdict kinds are the same three, with the state's own
`migrate=` function as a fourth way (Flink's State Processor API, built in).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from batchpoint.state.format import StateError


class VerdictKind(enum.StrEnum):
    UNCHANGED = "unchanged"  # Flink: compatibleAsIs
    MIGRATED = "migrated"  # compatibleAfterMigration: migrate_batch on read, no user code
    USER_MIGRATION = "user-migration"  # the state's migrate= function runs once
    INCOMPATIBLE = "incompatible"  # refused before any Spark job


class ChangeKind(enum.StrEnum):
    # Compatible: migrate_batch does them.
    ADDED_NULLABLE = "added-nullable"
    ADDED_WITH_DEFAULT = "added-with-default"
    DROPPED = "dropped"
    WIDENED = "widened"
    NULLABILITY_RELAXED = "nullability-relaxed"
    REORDERED = "reordered"
    # Refused; a state's migrate= function may do those `user_migratable` says.
    NARROWED = "narrowed"
    TYPE_CHANGED = "type-changed"
    NULLABILITY_TIGHTENED = "nullability-tightened"
    REMOVED_WITHOUT_DROP = "removed-without-drop"
    ADDED_NON_NULLABLE_WITHOUT_DEFAULT = "added-non-nullable-without-default"
    # Refused even with migrate=.
    KEY_CHANGED = "key-changed"
    DEFAULT_INVALID = "default-invalid"

    @property
    def compatible(self) -> bool:
        return self in _COMPATIBLE

    @property
    def user_migratable(self) -> bool:
        """A migrate= function maps the old rows to new ones inside the stored key-group
        layout, so it can change any value but a key (which places the row), and it
        does not make a wrong declaration right."""
        return not self.compatible and self not in _NEVER_MIGRATABLE


_COMPATIBLE = frozenset(
    {
        ChangeKind.ADDED_NULLABLE,
        ChangeKind.ADDED_WITH_DEFAULT,
        ChangeKind.DROPPED,
        ChangeKind.WIDENED,
        ChangeKind.NULLABILITY_RELAXED,
        ChangeKind.REORDERED,
    }
)
_NEVER_MIGRATABLE = frozenset({ChangeKind.KEY_CHANGED, ChangeKind.DEFAULT_INVALID})


@dataclass(frozen=True)
class ColumnChange:
    """One change of one column. `message` names the state (the verdict's `what`), the
    column, and the old and new types where there are two."""

    column: str
    kind: ChangeKind
    old_type: pa.DataType | None
    new_type: pa.DataType | None
    message: str
    default: Any = None  # what stored rows read (ADDED_WITH_DEFAULT only)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "column": self.column,
            "kind": self.kind.value,
            "compatible": self.kind.compatible,
            "old_type": None if self.old_type is None else str(self.old_type),
            "new_type": None if self.new_type is None else str(self.new_type),
            "message": self.message,
        }
        if self.kind is ChangeKind.ADDED_WITH_DEFAULT:
            body["default"] = json_value(self.default)
        return body


@dataclass(frozen=True)
class SchemaVerdict:
    """The stored schema of one state against the schema its code declares now."""

    what: str  # e.g. "operator 'balances', state 'totals'"
    kind: VerdictKind
    changes: tuple[ColumnChange, ...]
    stored: pa.Schema
    declared: pa.Schema
    key_columns: tuple[str, ...]

    @property
    def problems(self) -> tuple[ColumnChange, ...]:
        """The changes no rule migrates (a migrate= function may, see `kind`)."""
        return tuple(c for c in self.changes if not c.kind.compatible)

    @property
    def messages(self) -> list[str]:
        return [c.message for c in self.problems]

    @property
    def deployable(self) -> bool:
        return self.kind is not VerdictKind.INCOMPATIBLE

    def check(self) -> None:
        """Raise `StateSchemaIncompatible` when the verdict refuses the deploy."""
        check_deployable([self])

    def to_json(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "kind": self.kind.value,
            "deployable": self.deployable,
            "key_columns": list(self.key_columns),
            "changes": [c.to_json() for c in self.changes],
            "messages": self.messages,
            "stored_schema": schema_json(self.stored),
            "declared_schema": schema_json(self.declared),
        }


class StateSchemaIncompatible(StateError):
    """One or more states' code changed their schema beyond the evolution rules."""

    def __init__(self, verdicts: Sequence[SchemaVerdict]) -> None:
        self.verdicts = list(verdicts)
        lines = [m for v in self.verdicts for m in v.messages if v.kind is VerdictKind.INCOMPATIBLE]
        super().__init__(
            "the code changes state schemas beyond the evolution rules (nothing was run):\n"
            + "\n".join(f"  - {line}" for line in lines)
        )


def check_deployable(verdicts: Sequence[SchemaVerdict]) -> None:
    """Raise one error naming every refused change of every state, so a deploy is fixed
    in one pass instead of one state at a time."""
    refused = [v for v in verdicts if not v.deployable]
    if refused:
        raise StateSchemaIncompatible(refused)


def schema_json(schema: pa.Schema) -> list[dict[str, Any]]:
    return [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in schema]


def json_value(value: Any) -> Any:
    """A default as JSON: numbers, strings, booleans and null as they are; decimals as
    their exact text, dates and times in ISO 8601, bytes in base64."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan", "inf": strict JSON has no such numbers
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    return str(value)
