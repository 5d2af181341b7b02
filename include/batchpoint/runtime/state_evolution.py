"""State schema evolution at restore: each state of the base read as the code declares
it now (docs/design/evolution.md).

For every state the base holds files of, the schema they were written with (the base's,
see base_schemas) is compared with the declared one by the rules of
`state.evolution`. UNCHANGED reads as always; MIGRATED reads the stored rows and
migrates them batch by batch in the executors; USER_MIGRATION reads them as stored and
hands them to the state's migrate= function, once: the checkpoint this epoch writes
stores the declared schema, so the next epoch finds it UNCHANGED. Any refused change of
any state fails the attempt before a Spark job runs, naming the state, the column and
both types (the deploy plan refuses such a deploy at trigger already; this is the
reader's own guard, for a base the plan did not see).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from batchpoint.protocol.checkpoint import CompletedCheckpoint, FileHandle
from batchpoint.runtime.api import OperatorDef, State
from batchpoint.runtime.base_schemas import judged_schema
from batchpoint.runtime.state_conform import conform_state
from batchpoint.state.evolution import (
    SchemaVerdict,
    VerdictKind,
    check_deployable,
    resolve_schema_compatibility,
)
from batchpoint.storage import ObjectStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def declaration(node: OperatorDef, state: str) -> State:
    """The state's declaration (a schema alone declares no evolution)."""
    return node.state_decls.get(state) or State(node.states[state], uid=state)


def state_verdicts(
    store: ObjectStore,
    node: OperatorDef,
    base: CompletedCheckpoint | None,
    base_files: Mapping[str, list[FileHandle]],
) -> dict[str, SchemaVerdict]:
    """The verdict of each state the base holds files of; raises StateSchemaIncompatible
    naming every refused change of every state, before anything is read."""
    verdicts = {}
    for state in node.states:
        if base is None or not base_files.get(state):
            continue  # a new state, or no base: it starts empty
        declared = node.states[state]
        # what the deploy plan judged too (runtime/deploy.plan_on): one question, one answer
        stored = judged_schema(store, base, node.uid, node.state_uid(state), declared)
        if stored is None:
            continue
        decl = declaration(node, state)
        verdicts[state] = resolve_schema_compatibility(
            stored,
            declared,
            node.key_columns,
            defaults=decl.defaults,
            dropped=decl.dropped,
            migrate=decl.migrate is not None,
            what=f"operator '{node.name}', state '{state}'",
        )
    check_deployable(list(verdicts.values()))
    return verdicts


def describe(verdict: SchemaVerdict) -> str:
    """One log line: what the restore does with the state's stored rows."""
    if verdict.kind is VerdictKind.UNCHANGED:
        return f"{verdict.what}: schema unchanged"
    changes = "; ".join(c.message.split(": ", 1)[-1] for c in verdict.changes)
    return f"{verdict.what}: {verdict.kind.value}: {changes}"


def user_migrated(
    node: OperatorDef, state: str, verdict: SchemaVerdict, old: DataFrame
) -> DataFrame:
    """The state's migrate= function over its stored rows, as the declared schema: its
    columns in the declared order, refused (naming the differences) when they are not
    the declared ones (runtime/state_conform.py)."""
    fn = declaration(node, state).migrate
    assert fn is not None, "a user-migration verdict needs a migrate= function"
    return conform_state(fn(old), node.states[state], f"{verdict.what}: its migrate= function")
