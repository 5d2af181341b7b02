"""When a state is written as a changelog and when in full (runtime.incremental's policy),
from the pending record and the base's handles alone. No Spark."""

from __future__ import annotations

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
from batchpoint.runtime.incremental import CHURN_META, CHURN_PROBE_EVERY, plan_snapshot
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


def files(layer_rows: list[int], *, churn: int = 0, parallelism: int = 2, **kw: Any) -> list:
    """A state of two subtasks: a full snapshot (layer 0) with layer_rows[0] rows per
    subtask, then a changelog per further entry with that many changed rows."""
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
