"""Whether a state's snapshot is a changelog on its base's files or a full rewrite.

A changelog checkpoint references every file of the base's state (shared, never
copied) and adds a layer holding only the keys that changed. The chain is bounded so
a restore's cost stays flat: after `changelog_chain` layers the next snapshot is full
again. A state whose last changelog changed most of its rows is written in full too
(no join with the base, one layer to read), for a few epochs, then a changelog probes
whether it settled. Full
snapshots also start every chain the base cannot continue: savepoints (self-contained),
a rescale, a new state format or schema, and a base held outside this pipeline's
retention (a savepoint, or a checkpoint restored without claim: Flink's NO_CLAIM).
GC needs nothing new: it keeps every file a retained or pending checkpoint references,
wherever the file lives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from batchpoint.errors import CheckpointError
from batchpoint.protocol.checkpoint import (
    SHARED_FROM_META,
    CompletedCheckpoint,
    FileHandle,
    PendingCheckpoint,
)
from batchpoint.runtime.streams import StreamWrite, state_stream
from batchpoint.state.format import FORMAT_VERSION, StateHandle, state_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from batchpoint.runtime.api import OperatorContext, OperatorDef

#: A changelog that changed more than this share of the state's rows says the state
#: mostly changes each epoch: a full snapshot is then cheaper (no join with the base)
#: and keeps restores reading one layer.
MAX_CHANGELOG_SHARE = 0.5
#: After that many full snapshots in a row for churn, one changelog probes whether the
#: state has settled.
CHURN_PROBE_EVERY = 4
#: Handle metadata on a full snapshot written for churn: how many in a row.
CHURN_META = "churn"


@dataclass(frozen=True)
class SnapshotPlan:
    """`layer` 0: write the state in full (`why` says why); n > 0: write changelog n on
    top of `shared`, the base's files of the state."""

    layer: int
    why: str
    shared: tuple[FileHandle, ...] = ()
    churn: int = 0  # > 0: a full snapshot because the state mostly changes (CHURN_META)

    @property
    def full(self) -> bool:
        return self.layer == 0

    def shared_by_subtask(self) -> dict[int, list[FileHandle]]:
        out: dict[int, list[FileHandle]] = {}
        for handle in self.shared:
            out.setdefault(int(handle.meta.get("subtask", -1)), []).append(handle)
        return out


def plan_snapshot(
    pending: PendingCheckpoint,
    base_files: Sequence[FileHandle],
    *,
    parallelism: int,
    max_parallelism: int,
    fingerprint: str,
    changelog_chain: int,
    comparable: bool = True,
) -> SnapshotPlan:
    """How this checkpoint snapshots a state whose base files are `base_files`. Decided
    from the pending record (which fixes the chain bound at trigger; `changelog_chain`
    only for records without it) and the base alone, so every attempt decides alike."""

    def full(why: str, churn: int = 0) -> SnapshotPlan:
        return SnapshotPlan(0, why, churn=churn)

    if pending.properties.changelog_chain is not None:  # fixed at trigger: it wins
        changelog_chain = pending.properties.changelog_chain
    if changelog_chain <= 0:
        return full("incremental checkpoints are off (changelog chain 0)")
    if pending.is_savepoint:
        return full("a savepoint is self-contained")
    if reason := pending.properties.independent_of_base:
        return full(reason)
    if not base_files:
        return full("no base state")
    handles = [StateHandle.coerce(f) for f in base_files]
    if any(h.format != FORMAT_VERSION for h in handles):
        return full(f"the base is in state format {handles[0].format}")
    if any((h.parallelism, h.max_parallelism) != (parallelism, max_parallelism) for h in handles):
        return full(f"rescaled from parallelism {handles[0].parallelism} to {parallelism}")
    if any(h.schema_fingerprint != fingerprint for h in handles):
        return full("the state's schema changed")
    if not comparable:
        return full("the state has map columns, which Spark cannot compare")
    top = max(h.layer for h in handles)
    if top >= changelog_chain:
        return full(f"compacting {top} changelog(s)")
    if top > 0:
        # Rows the newest changelog rewrote or removed, of those that were there before
        # it: new keys do not count, a growing state is what changelogs are best at.
        newest = [h for h in handles if h.layer == top]
        added = sum(h.net_rows or 0 for h in newest)
        rewritten = sum(h.rows for h in newest) - max(0, added)
        before = state_rows(handles) - added
        if rewritten > MAX_CHANGELOG_SHARE * max(1, before):
            return full(f"the last changelog rewrote {rewritten} of {before} rows", churn=1)
    else:
        churn = max(int(f.meta.get(CHURN_META, 0)) for f in base_files)
        if 0 < churn < CHURN_PROBE_EVERY:
            return full(f"the state mostly changes each epoch ({churn} in a row)", churn + 1)
    base_id = pending.base_checkpoint_id
    shared = tuple(
        f if SHARED_FROM_META in f.meta else replace(f, meta={**f.meta, SHARED_FROM_META: base_id})
        for f in base_files
    )
    return SnapshotPlan(top + 1, f"changelog {top + 1} on checkpoint {base_id}", shared)


def base_state_files(
    base: CompletedCheckpoint | None, operator_uid: str, state_uid: str
) -> list[FileHandle]:
    """The base's files of an operator's state (every layer), matched by identity: the
    acks of the operator's uid (whatever its tasks were called then), the stream of the
    state's uid. None when the operator or the state is new in this version of the
    pipeline (the deploy plan said so before the trigger)."""
    if base is None:
        return []
    own = [a for a in base.acks if a.operator_uid == operator_uid]
    files = [h for ack in own for h in ack.handles if h.name == state_stream(state_uid)]
    if own and not files and _recorded_state(base, operator_uid, state_uid):
        raise CheckpointError(
            f"base checkpoint {base.checkpoint_id} has no files of state '{state_uid}' "
            f"of operator '{operator_uid}'"
        )
    return files


def _recorded_state(base: CompletedCheckpoint, operator_uid: str, state_uid: str) -> bool:
    """Whether the base held the state (a state added since holds no file there)."""
    if base.pending.topology is None:
        return False  # recorded no states: one without files is new to it
    node = next((n for n in base.pending.topology.nodes if n.uid == operator_uid), None)
    return node is not None and node.state(state_uid) is not None


def mark_churn(handles: dict[int, list[FileHandle]], stream: str, plan: SnapshotPlan) -> None:
    """Record on a full snapshot written for churn how many came in a row, so that the
    next plan knows without reading anything."""
    if not plan.churn:
        return
    for files in handles.values():
        files[:] = [
            replace(f, meta={**f.meta, CHURN_META: plan.churn}) if f.name == stream else f
            for f in files
        ]


# -- the Spark side -----------------------------------------------------------------------


def plan_state_snapshot(
    pending: PendingCheckpoint,
    base_files: Sequence[FileHandle],
    new_state: DataFrame,
    node: OperatorDef,
    parallelism: int,
    changelog_chain: int,
) -> SnapshotPlan:
    """`plan_snapshot` for the state an operator function returned."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from batchpoint.spark.state_changelog import comparable
    from batchpoint.state.format import schema_fingerprint

    schema = new_state.schema
    return plan_snapshot(
        pending,
        base_files,
        parallelism=parallelism,
        max_parallelism=node.max_parallelism,
        fingerprint=schema_fingerprint(to_arrow_schema(schema, timezone="UTC")),
        changelog_chain=changelog_chain,
        comparable=all(comparable(f.dataType) for f in schema.fields),
    )


def state_write(
    ctx: OperatorContext,
    state: str,
    stream: str,
    key_columns: tuple[str, ...],
    max_parallelism: int,
    plan: SnapshotPlan,
    *,
    value: bool = False,
) -> StreamWrite:
    """The write of a state: the new state itself, or its changes since the base. A value
    state's changes are a keyed join (spark/value_changelog), in the same format as the
    array comparison's, so a chain may mix both across deploys."""
    new = ctx.new_state(state)
    if plan.full:
        return StreamWrite(new, stream, key_columns, max_parallelism)
    from batchpoint.spark.state_changelog import changelog, no_changes
    from batchpoint.spark.value_changelog import value_changelog

    old = ctx.state(state)
    if new is old:
        changes = no_changes(old)
    elif value:
        what = f"operator '{ctx.operator}': state '{state}'"
        changes = value_changelog(new, old, key_columns, what)
    else:
        changes = changelog(new, old, key_columns)
    return StreamWrite(changes, stream, key_columns, max_parallelism, layer=plan.layer)
