"""When a state is written as a changelog and when in full (runtime.incremental's policy),
from the pending record and the base's handles alone. No Spark."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from batchpoint.protocol.checkpoint import (
    CHANGELOG_CHAIN_PROPERTY,
    INDEPENDENT_OF_BASE,
    SHARED_FROM_META,
    CheckpointType,
    FileHandle,
    PendingCheckpoint,
)
from batchpoint.protocol.layout import TaskId
from batchpoint.runtime.incremental import (
    CHURN_META,
    CHURN_PROBE_EVERY,
    CHURN_STREAK_META,
    MAX_CHURN_STREAK,
    mark_churn,
    plan_snapshot,
)
from batchpoint.state.format import FORMAT_VERSION, StateHandle
from batchpoint.state.keygroups import KeyGroupRange

FP = "fingerprint"


def pending(kind: CheckpointType = CheckpointType.CHECKPOINT, **properties: Any):
    return PendingCheckpoint(
        pipeline="p",
        checkpoint_id=7,
        type=kind,
        base_checkpoint_id=6,
        restore_generation=0,
        barrier={},
        base_barrier={},
        expected_tasks=(TaskId("op", 0), TaskId("op", 1)),
        trigger_time=0.0,
        deadline=1.0,
        properties=properties,
    )


def files(
    layer_rows: list[int], *, churn: int = 0, streak: int = 0, parallelism: int = 2, **kw: Any
) -> list:
    """A state of two subtasks: a full snapshot (layer 0) with layer_rows[0] rows per
    subtask, then a changelog per further entry with that many changed rows. `churn` and
    `streak` mark the full snapshot as written for churn (no `streak`: an older
    release's mark)."""
    out = []
    for layer, rows in enumerate(layer_rows):
        for subtask in range(parallelism):
            span = 128 // parallelism
            handle = StateHandle(
                path=f"chk-{layer + 1}/s{subtask}.parquet",
                size=100 + rows,
                sha256="x",
                rows=rows,
                key_group_range=KeyGroupRange(subtask * span, subtask * span + span - 1),
                name="state-s",
                schema_fingerprint=kw.get("fingerprint", FP),
                subtask=subtask,
                parallelism=parallelism,
                max_parallelism=128,
                format=kw.get("format", FORMAT_VERSION),
                layer=layer,
                net_rows=kw.get("net", 0) if layer else None,
                key_columns=("k",) if layer else (),
            )
            meta = {CHURN_META: churn} if churn and layer == 0 else {}
            if streak and layer == 0:
                meta[CHURN_STREAK_META] = streak
            body = {**handle.to_json(), **meta}
            out.append(FileHandle.from_json(body, handle.path))
    return out


def plan(base: list, record: PendingCheckpoint | None = None, chain: int = 8, **kw: Any):
    return plan_snapshot(
        record or pending(),
        base,
        parallelism=kw.get("parallelism", 2),
        max_parallelism=128,
        fingerprint=kw.get("fingerprint", FP),
        changelog_chain=chain,
        comparable=kw.get("comparable", True),
    )


def test_a_changelog_shares_every_base_file_and_stacks_one_layer() -> None:
    base = files([1000, 10, 10])
    chosen = plan(base)
    assert chosen.layer == 3 and not chosen.full
    assert [h.path for h in chosen.shared] == [h.path for h in base]
    assert {h.meta[SHARED_FROM_META] for h in chosen.shared} == {6}
    assert set(chosen.shared_by_subtask()) == {0, 1}
    # A file shared already keeps naming the checkpoint that wrote it.
    again = plan([*chosen.shared])
    assert {h.meta[SHARED_FROM_META] for h in again.shared} == {6}


@pytest.mark.parametrize(
    ("why", "kw", "record", "base"),
    [
        ("off", {"chain": 0}, None, files([1000])),
        ("self-contained", {}, pending(CheckpointType.SAVEPOINT), files([1000])),
        ("held", {}, pending(**{INDEPENDENT_OF_BASE: "held elsewhere"}), files([1000])),
        ("no base", {}, None, []),
        ("format 1", {}, None, files([1000], format=1)),
        ("format 2", {}, None, files([1000], format=2)),
        ("rescaled", {"parallelism": 4}, None, files([1000])),
        ("schema", {"fingerprint": "other"}, None, files([1000])),
        ("map", {"comparable": False}, None, files([1000])),
        ("compacting 8", {}, None, files([1000] + [1] * 8)),
        ("rewrote 600", {}, None, files([1000, 600])),
    ],
)
def test_full_snapshots(why: str, kw: dict, record: Any, base: list) -> None:
    chosen = plan(base, record, **kw)
    assert chosen.full and not chosen.shared
    assert why.split()[0] in chosen.why or why in chosen.why, chosen.why


def test_a_churning_state_stays_full_then_probes_with_a_changelog() -> None:
    first = plan(files([1000, 600]))  # the changelog changed most rows
    assert first.full and first.churn == 1
    churn = first.churn
    while churn < CHURN_PROBE_EVERY:
        chosen = plan(files([1000], churn=churn))
        assert chosen.full and chosen.churn == churn + 1
        churn = chosen.churn
    probe = plan(files([1000], churn=churn))
    assert probe.layer == 1 and probe.churn == 0


def _written(chosen: Any) -> list:
    """The state's files after a checkpoint that followed `chosen`, with the marks the
    runtime puts on them (mark_churn): the next checkpoint's base."""
    if not chosen.full:
        return [*chosen.shared, *files([1000, 600])[2:]]  # the probe found churn
    written = {0: files([1000])}
    mark_churn(written, "state-s", chosen)
    return written[0]


def test_each_probe_that_finds_churn_doubles_the_streak_up_to_the_bound() -> None:
    """Epoch by epoch through the policy: full snapshots while churning, a probe (a
    changelog) at the end of each streak, each probe finding churn again."""
    base, kinds = files([1000, 600]), []
    for _ in range(60):
        chosen = plan(base)
        kinds.append("probe" if not chosen.full else "full")
        base = _written(chosen)
    streaks = [len(list(run)) for kind, run in itertools.groupby(kinds) if kind == "full"]
    expected = [CHURN_PROBE_EVERY]
    while expected[-1] < MAX_CHURN_STREAK:
        expected.append(min(2 * expected[-1], MAX_CHURN_STREAK))
    assert streaks[: len(expected) + 1] == [*expected, MAX_CHURN_STREAK]


def test_a_state_that_settled_starts_its_next_streak_short() -> None:
    # A probe after a long streak found few changes: the chain goes on.
    settled = plan(files([1000, 10], churn=MAX_CHURN_STREAK, streak=MAX_CHURN_STREAK))
    assert settled.layer == 2
    # Churn again later in that chain: the first streak is short again.
    again = plan(files([1000, 10, 600], churn=MAX_CHURN_STREAK, streak=MAX_CHURN_STREAK))
    assert again.full and (again.churn, again.streak) == (1, CHURN_PROBE_EVERY)


def test_marks_of_an_older_release_keep_their_streak() -> None:
    """Full files marked with a count alone (before streaks grew) probe at
    CHURN_PROBE_EVERY as they did; a probe over them that finds churn doubles that."""
    assert plan(files([1000], churn=CHURN_PROBE_EVERY - 1)).full
    assert plan(files([1000], churn=CHURN_PROBE_EVERY)).layer == 1
    after = plan(files([1000, 600], churn=CHURN_PROBE_EVERY))
    assert after.full and after.streak == 2 * CHURN_PROBE_EVERY


def test_the_chain_bound_fixed_at_trigger_wins_over_the_task_settings() -> None:
    base = files([1000, 1, 1])
    assert plan(base, pending(**{CHANGELOG_CHAIN_PROPERTY: 2}), chain=8).full
    assert plan(base, pending(**{CHANGELOG_CHAIN_PROPERTY: 8}), chain=0).layer == 3


def test_new_keys_are_no_churn() -> None:
    # A changelog of 600 rows that are all new keys: the state grew, nothing was rewritten.
    assert plan(files([1000, 600], net=600)).layer == 2
    # 550 of a subtask's 1000 rows rewritten (600 changed, 50 of them new keys).
    assert plan(files([1000, 600], net=50)).full


def test_a_state_under_the_floor_fixed_at_trigger_is_written_in_full() -> None:
    # The floor weighs every layer's files: a full snapshot, then one with a changelog.
    for base in (files([1000]), files([1000, 10])):
        stored, top = sum(h.size for h in base), max(int(h.meta.get("layer", 0)) for h in base)
        under = plan(base, pending(changelog_min_bytes=stored + 1))
        assert under.full and not under.shared and not under.churn
        assert f"{stored} bytes" in under.why and f"floor of {stored + 1}" in under.why
        assert plan(base, pending(changelog_min_bytes=stored)).layer == top + 1
        # A record without a floor (one written before it existed) has none.
        assert plan(base, pending()).layer == top + 1
