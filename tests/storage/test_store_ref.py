"""StoreRef: one open store per process and set of options, and only the recent ones
kept (short-lived credentials make new options each time they rotate)."""

from __future__ import annotations

from pathlib import Path

from batchpoint import storage
from batchpoint.storage import StoreRef


def test_one_store_per_ref_and_old_ones_are_dropped(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/store"
    refs = [StoreRef.of(uri, {"generation": str(n)}) for n in range(storage._OPEN_MAX + 5)]
    first = refs[0].open()
    assert refs[0].open() is first
    for ref in refs[1:]:
        ref.open()
    assert len(storage._OPEN) <= storage._OPEN_MAX
    assert refs[0].open() is not first  # evicted, opened afresh
    assert refs[-1].open() is refs[-1].open()
