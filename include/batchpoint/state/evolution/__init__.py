"""State schema evolution (issue 26): may state stored with one schema restore into code
that declares another, and how its rows are read then.

`resolve_schema_compatibility` compares a state's stored schema with the declared one
and returns a `SchemaVerdict`: UNCHANGED, MIGRATED (compatible; `migrate_batch` reads
the stored rows into the new schema, no user code), USER_MIGRATION (the state's
migrate= function runs once) or INCOMPATIBLE (refused before any Spark job, with a
message per change naming the state, the column and both types). Pure pyarrow: no
Spark, no storage. docs/design/evolution.md has the rules beside Flink's.
"""

from batchpoint.state.evolution.migrate import migrate_batch
from batchpoint.state.evolution.resolve import resolve_schema_compatibility
from batchpoint.state.evolution.types import default_problem, is_narrowing, is_widening
from batchpoint.state.evolution.verdict import (
    ChangeKind,
    ColumnChange,
    SchemaVerdict,
    StateSchemaIncompatible,
    VerdictKind,
    check_deployable,
)

__all__ = [
    "ChangeKind",
    "ColumnChange",
    "SchemaVerdict",
    "StateSchemaIncompatible",
    "VerdictKind",
    "check_deployable",
    "default_problem",
    "is_narrowing",
    "is_widening",
    "migrate_batch",
    "resolve_schema_compatibility",
]
