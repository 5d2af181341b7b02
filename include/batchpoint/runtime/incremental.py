"""Whether a state's snapshot is a changelog on its base's files or a full rewrite.

A changelog checkpoint references every file of the base's state (shared, never
copied) and adds a layer holding only the keys that changed. The chain is bounded so
a restore's cost stays flat: after `changelog_chain` layers the next snapshot is full
again. A state whose last changelog changed most of its rows is written in full too
(no join with the base, one layer to read), for a few epochs, then a changelog probes
whether it settled; each probe that finds it churning still doubles the streak before
the next (up to MAX_CHURN_STREAK), as a probe costs a join and a changelog as large as
the state. Full snapshots also start every chain the base cannot continue:
savepoints (self-contained), a rescale, a new state format or schema (nullability
included), and a base held outside this pipeline's retention (a savepoint, or a
checkpoint restored without claim: Flink's NO_CLAIM). A state whose files are smaller
than the pending record's `changelog_min_bytes` is written in full as well: a
changelog costs a join with the base and a second layer to read, more than rewriting a
few megabytes. And a rewrite is always full: a deploy that migrated the stored rows (by
a rule or by `migrate=`) or a base whose rows were placed by another key, or by a key
it never recorded (an older release), is written in full in its first epoch; a
changelog there would lay the rows the epoch touched over files it did not rewrite.
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
from batchpoint.protocol.pipeline import OperatorKind
from batchpoint.runtime.streams import StreamWrite, state_stream
from batchpoint.state.evolution import VerdictKind
from batchpoint.state.format import FORMAT_VERSION, StateHandle, state_rows
from batchpoint.state.schemas import schema_fingerprint

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
#: The longest streak between two probes: after every probe that found churn the streak
#: doubles, up to this; a state that settles is found after at most this many full
#: snapshots.
MAX_CHURN_STREAK = 16
#: Handle metadata on a full snapshot written for churn: how many in a row.
CHURN_META = "churn"
#: ... and how long the streak runs before the next probe (absent: CHURN_PROBE_EVERY, as
#: before streaks grew).
CHURN_STREAK_META = "churn_streak"


@dataclass(frozen=True)
class SnapshotPlan:
    """`layer` 0: write the state in full (`why` says why); n > 0: write changelog n on
    top of `shared`, the base's files of the state."""

    layer: int
    why: str
    shared: tuple[FileHandle, ...] = ()
    churn: int = 0  # > 0: a full snapshot because the state mostly changes (CHURN_META)
    streak: int = 0  # with churn: the streak's length before a probe (CHURN_STREAK_META)

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
    rewrite: str | None = None,
) -> SnapshotPlan:
    """How this checkpoint snapshots a state whose base files are `base_files`. Decided
    from the pending record (which fixes the chain bound and the size floor at trigger;
    `changelog_chain` only for records without a bound; no floor without one), the base
    and the deploy (`rewrite`: why every row is rewritten, see `rewrite_reason`) alone,
    so every attempt decides alike."""

    def full(why: str) -> SnapshotPlan:
        return SnapshotPlan(0, why)

    if pending.properties.changelog_chain is not None:  # fixed at trigger: it wins
        changelog_chain = pending.properties.changelog_chain
    if changelog_chain <= 0:
        return full("incremental checkpoints are off (changelog chain 0)")
    if pending.is_savepoint:
        return full("a savepoint is self-contained")
    if not base_files:
        return full("no base state")
    if reason := pending.properties.independent_of_base or rewrite:
        return full(reason)
    handles = [StateHandle.coerce(f) for f in base_files]
    if reason := _unlike_base(handles, parallelism, max_parallelism, fingerprint):
        return full(reason)
    if not comparable:
        return full("the state has map columns, which Spark cannot compare")
    floor = pending.properties.changelog_min_bytes or 0
    if (stored := sum(f.size for f in base_files)) < floor:
        return full(f"the state's {stored} bytes are under the changelog floor of {floor}")
    top = max(h.layer for h in handles)
    if top >= changelog_chain:
        return full(f"compacting {top} changelog(s)")
    if churning := _churn_plan(handles, base_files, top):
        return churning
    base_id = pending.base_checkpoint_id
    shared = tuple(
        f if SHARED_FROM_META in f.meta else replace(f, meta={**f.meta, SHARED_FROM_META: base_id})
        for f in base_files
    )
    return SnapshotPlan(top + 1, f"changelog {top + 1} on checkpoint {base_id}", shared)


def _churn_plan(
    handles: Sequence[StateHandle], base_files: Sequence[FileHandle], top: int
) -> SnapshotPlan | None:
    """A full snapshot for churn, or None: the newest changelog rewrote most rows, or
    the base is a full snapshot written for churn whose streak is not over."""
    if top > 0:
        # Rows the newest changelog rewrote or removed, of those that were there before
        # it: new keys do not count, a growing state is what changelogs are best at.
        newest = [h for h in handles if h.layer == top]
        added = sum(h.net_rows or 0 for h in newest)
        rewritten = sum(h.rows for h in newest) - max(0, added)
        before = state_rows(handles) - added
        if rewritten <= MAX_CHANGELOG_SHARE * max(1, before):
            return None
        streak = _next_streak(base_files) if top == 1 else CHURN_PROBE_EVERY
        why = f"the last changelog rewrote {rewritten} of {before} rows"
        return SnapshotPlan(0, why, churn=1, streak=streak)
    churn, streak = _churn(base_files)
    if not 0 < churn < streak:
        return None
    why = f"the state mostly changes each epoch ({churn} in a row, probing at {streak})"
    return SnapshotPlan(0, why, churn=churn + 1, streak=streak)


def _churn(base_files: Sequence[FileHandle]) -> tuple[int, int]:
    """How many full snapshots in a row for churn the base's full files end, and the
    length of their streak (0 and CHURN_PROBE_EVERY where none was written for churn).
    Only full files carry the marks (mark_churn)."""
    churn = max((int(f.meta.get(CHURN_META, 0)) for f in base_files), default=0)
    streak = max((int(f.meta.get(CHURN_STREAK_META, 0)) for f in base_files), default=0)
    return churn, streak or CHURN_PROBE_EVERY


def _next_streak(base_files: Sequence[FileHandle]) -> int:
    """The streak after a first changelog that found churn: twice the one before it
    when it was a probe (its full files were written for churn), else the first."""
    churn, streak = _churn(base_files)
    return min(2 * streak, MAX_CHURN_STREAK) if churn else CHURN_PROBE_EVERY


def _unlike_base(
    handles: Sequence[StateHandle], parallelism: int, max_parallelism: int, fingerprint: str
) -> str | None:
    """Why the base's files cannot carry a changelog of this attempt's state, or None."""
    if any(h.format != FORMAT_VERSION for h in handles):
        return f"the base is in state format {handles[0].format}"
    if any((h.parallelism, h.max_parallelism) != (parallelism, max_parallelism) for h in handles):
        return f"rescaled from parallelism {handles[0].parallelism} to {parallelism}"
    if any(h.schema_fingerprint != fingerprint for h in handles):
        return "the state's schema changed"
    return None


def rewrite_reason(
    base: CompletedCheckpoint | None,
    operator_uid: str,
    key_columns: tuple[str, ...],
    verdict: VerdictKind | None,
) -> str | None:
    """Why this epoch rewrites every row of a state the base holds, or None: the deploy
    migrated its stored rows (`verdict`, the state's schema verdict), or the base placed
    them by another key, or recorded none (written by an older release): each row's key
    group is then recomputed as it is written."""
    if verdict is not None and verdict is not VerdictKind.UNCHANGED:
        return f"its stored rows were migrated ({verdict.value}): every row is rewritten"
    if base is None:
        return None
    node = base.topology.node(OperatorKind.OPERATOR, operator_uid)  # a source may share it
    if node is None or node.key_columns == key_columns:
        return None
    if node.key_columns is None:
        return (
            f"checkpoint {base.checkpoint_id} recorded no key (an older release): "
            f"every row is rewritten under key {list(key_columns)}"
        )
    return (
        f"checkpoint {base.checkpoint_id} placed its rows by key {list(node.key_columns)}: "
        f"every row is rewritten under key {list(key_columns)}"
    )


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
    node = base.pending.topology.node(OperatorKind.OPERATOR, operator_uid)
    return node is not None and node.state(state_uid) is not None


def mark_churn(handles: dict[int, list[FileHandle]], stream: str, plan: SnapshotPlan) -> None:
    """Record on a full snapshot written for churn how many came in a row, so that the
    next plan knows without reading anything."""
    if not plan.churn:
        return
    marks = {CHURN_META: plan.churn, CHURN_STREAK_META: plan.streak}
    for files in handles.values():
        files[:] = [replace(f, meta={**f.meta, **marks}) if f.name == stream else f for f in files]


# -- the Spark side -----------------------------------------------------------------------


def plan_state_snapshot(
    pending: PendingCheckpoint,
    base_files: Sequence[FileHandle],
    new_state: DataFrame,
    node: OperatorDef,
    state: str,
    parallelism: int,
    changelog_chain: int,
    rewrite: str | None = None,
) -> SnapshotPlan:
    """`plan_snapshot` for the state an operator function set: written as declared, so
    its fingerprint is the declaration's."""
    from batchpoint.spark.state_changelog import comparable

    return plan_snapshot(
        pending,
        base_files,
        parallelism=parallelism,
        max_parallelism=node.max_parallelism,
        fingerprint=schema_fingerprint(node.states[state]),
        changelog_chain=changelog_chain,
        comparable=all(comparable(f.dataType) for f in new_state.schema.fields),
        rewrite=rewrite,
    )


def state_write(
    ctx: OperatorContext, node: OperatorDef, state: str, stream: str, plan: SnapshotPlan
) -> StreamWrite:
    """The write of a state: the new state itself, or its changes since the base, in
    its declared schema. A value state's changes are a keyed join
    (spark/value_changelog), in the same format as the array comparison's, so a chain
    may mix both across deploys; so are those of a state Spark's plan proves has one row
    per key, value state or not."""
    new = ctx.new_state(state)
    key_columns, max_parallelism = node.key_columns, node.max_parallelism
    schema, what = node.states[state], f"operator '{ctx.operator}', state '{state}'"
    if plan.full:
        return StreamWrite(new, stream, key_columns, max_parallelism, declared=schema, what=what)
    from batchpoint.spark.plan_facts import distinct_by
    from batchpoint.spark.state_changelog import changelog, no_changes
    from batchpoint.spark.value_changelog import value_changelog

    old = ctx.state(state)
    if new is old:
        changes = no_changes(old)
    elif node.value_state(state):
        changes = value_changelog(new, old, key_columns, what)
    elif distinct_by(new, key_columns):
        # One new row per key, proven by Spark's plan (an aggregation by the key): the
        # value state's join compares it exactly, with no arrays to gather and sort.
        changes = value_changelog(new, old, key_columns, what, proven_distinct=True)
    else:
        changes = changelog(new, old, key_columns)
    return StreamWrite(
        changes, stream, key_columns, max_parallelism, layer=plan.layer, declared=schema, what=what
    )
