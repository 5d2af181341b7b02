"""Integrity checks find each kind of damage, name it, and the gate falls back to an
older checkpoint (the damaged one is quarantined)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from batchpoint.protocol.checkpoint import SHARED_FROM_META, FileHandle
from batchpoint.quality.findings import Check
from batchpoint.quality.integrity import check_checkpoint, coverage_problems
from batchpoint.storage.base import ObjectStore
from support.payments import GOOD_EPOCHS, INTEGRITY_ONLY, LAYOUT
from support.tampering import rewrite_outcome, state_handles

pytestmark = pytest.mark.spark  # the stores are made by running payments on Spark

HEAD = GOOD_EPOCHS


def _delete_state_file(store: ObjectStore) -> str:
    path = state_handles(store, HEAD, "balances", "balances")[0]["path"]
    store.delete(path)
    return path


def _truncate_state_file(store: ObjectStore) -> str:
    path = state_handles(store, HEAD, "balances", "balances")[1]["path"]
    store.put(path, store.get(path).data[:-7])
    return path


def _flip_a_byte(store: ObjectStore) -> str:
    path = state_handles(store, HEAD, "dedup", "seen")[0]["path"]
    data = bytearray(store.get(path).data)
    data[len(data) // 2] ^= 0x01  # same size: only the checksum can tell
    store.put(path, bytes(data))
    return path


def _drop_a_handle(store: ObjectStore) -> str:
    def drop(document: dict) -> None:
        ack = next(a for a in document["acks"] if a["task"] == "balances#1")
        # Only what the checkpoint wrote: the base's files it shares stay named.
        ack["handles"] = [
            h for h in ack["handles"] if h["name"] != "state-balances" or SHARED_FROM_META in h
        ]

    rewrite_outcome(store, HEAD, drop)
    return "balances/balances"


def _unknown_version(store: ObjectStore) -> str:
    rewrite_outcome(store, HEAD, lambda document: document.update(version=99))
    return LAYOUT.outcome(HEAD)


DAMAGE = {
    "deleted-file": (_delete_state_file, Check.FILE, "missing"),
    "truncated-file": (_truncate_state_file, Check.FILE, "size"),
    "flipped-byte": (_flip_a_byte, Check.FILE, "sha256"),
    "missing-key-groups": (_drop_a_handle, Check.KEY_GROUPS, "covered by no file"),
    "unknown-version": (_unknown_version, Check.METADATA, "unknown record version 99"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damage_is_found_named_and_the_gate_falls_back(
    damage: str, good_run: Any, make_gate: Callable[..., Any]
) -> None:
    corrupt, check, words = DAMAGE[damage]
    store = good_run.store
    damaged = corrupt(store)

    report = check_checkpoint(store, LAYOUT, HEAD, pipeline=good_run.runner.pipeline)
    assert not report.passed
    assert [(f.object, f.check) for f in report.findings] == [(damaged, check)], report.findings
    assert words in report.findings[0].problem

    assert check_checkpoint(store, LAYOUT, HEAD - 1).passed  # the older one is intact

    gate = make_gate(good_run, quality=INTEGRITY_ONLY)
    gated = gate.run()
    assert gated.chosen == HEAD - 1
    assert [c.checkpoint_id for c in gated.candidates] == [HEAD, HEAD - 1]
    assert gate.quarantine.ids() == [HEAD]
    assert gated.candidates[0].findings == report.findings


def test_overlaps_gaps_and_out_of_range_are_all_reported() -> None:
    def handle(path: str, start: int, end: int) -> FileHandle:
        return FileHandle(path, 1, "x", key_group_range=(start, end))

    problems = coverage_problems(
        [handle("a", 0, 9), handle("b", 5, 12), handle("c", 20, 31), handle("d", 30, 40)], 32
    )
    assert problems == [
        "key groups [5, 9] are covered by both 'a' and 'b'",
        "key groups [13, 19] are covered by no file",
        "file 'd' claims key groups [30, 40], outside 0..31",
    ]
    assert coverage_problems([handle("a", 0, 15), handle("b", 16, 31)], 32) == []
    assert coverage_problems([], 4) == ["key groups [0, 3] are covered by no file"]


def test_offsets_must_agree_with_the_base_chain(good_run: Any) -> None:
    store = good_run.store

    def shift(document: dict) -> None:
        partition = document["checkpoint"]["base_barrier"]["events"]["p0"]
        partition["offset"] += 1

    rewrite_outcome(store, HEAD, shift)
    findings = check_checkpoint(store, LAYOUT, HEAD).findings
    assert [f.check for f in findings] == [Check.SOURCE_OFFSETS]
    assert f"not the barrier of its base checkpoint {HEAD - 1}" in findings[0].problem
    assert "events/p0" in findings[0].problem


def test_offsets_never_go_backwards(good_run: Any) -> None:
    store = good_run.store

    def rewind(document: dict) -> None:
        checkpoint = document["checkpoint"]
        checkpoint["barrier"]["events"]["p1"] = {"offset": 0, "last": None, "digest": None}

    rewrite_outcome(store, HEAD, rewind)
    findings = check_checkpoint(store, LAYOUT, HEAD).findings
    assert any("goes backwards" in f.problem and "p1" in f.object for f in findings), findings


def test_a_deleted_source_file_breaks_the_barrier(good_run: Any) -> None:
    store = good_run.store
    first = next(iter(store.list("sources/payments/p2/")))
    store.delete(first.key)
    findings = check_checkpoint(
        store, LAYOUT, HEAD, sources=good_run.runner.pipeline.sources
    ).findings
    assert [(f.object, f.check) for f in findings] == [("source events", Check.SOURCE_OFFSETS)]
