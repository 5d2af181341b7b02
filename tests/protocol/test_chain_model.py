"""The chain's concurrency model, seeded (tests/support/chain_model.py): up and down
pipelines, down reading up's sinks, with plain restores of either, a cascade restore cut
short by crashes, GC, storage faults and crash points, held by an independent checker.
CI runs a seeded subset here; `bench/model_check_chain.py --schedules 1000` runs the long
one. The last test shows the checker is not blind: a reader that ignores up's restores
is reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import batchpoint.sources.upstream as upstream
from batchpoint.storage.local import LocalObjectStore
from support.chain_model import ChainChecker, ChainSchedule, run_chain_schedule

SEEDS = range(1000, 1030)


def test_seeded_chain_schedules_hold_every_invariant(tmp_path: Path) -> None:
    results = [run_chain_schedule(seed, LocalObjectStore(tmp_path / f"s{seed}")) for seed in SEEDS]
    violations = [str(v) for r in results for v in r.violations]
    steps = sum(r.steps for r in results)
    cascades = sum(1 for r in results if "cascade" in r.actors)
    print(f"{len(results)} schedules, {steps} steps, {cascades} with a cascade, "
          f"{sum(r.faults for r in results)} faults injected")  # fmt: skip
    assert not violations, "\n".join(violations)


@pytest.mark.parametrize("rule_on", [True, False])
def test_a_reader_that_ignores_restores_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rule_on: bool
) -> None:
    """Scripted, no faults: down reads up's checkpoint 2, up is restored to 1 and goes
    on; down's next epoch must stop, not read on from 2 to 3."""
    if not rule_on:  # no timeline check, and append reads by id range, not base links
        monkeypatch.setattr(upstream, "_on_timeline", lambda _manifest, _position: True)

        def by_ids(_self: object, manifest: Any, top: Any, base: int | None) -> list[Any]:
            after = [e for c, e in sorted(manifest.epochs.items()) if (base or 0) < c]
            return [f for e in after if e.checkpoint_id <= top.checkpoint_id for f in e.files]

        monkeypatch.setattr(upstream.PipelineSinkSource, "_published_after", by_ids)
    world = ChainSchedule(7, LocalObjectStore(tmp_path / "s"), faults=False)
    for driver in world.drivers.values():
        driver.coordinator.register(driver.pipeline.spec())
    world.epoch("up")
    world.epoch("up")
    world.epoch("down")  # reads up to 2
    world.restore("up", 0, to=1)
    assert world.notes[-1].startswith("restore up to")
    world.epoch("up")  # 3, on the restored timeline
    world.epoch("down")
    violations = ChainChecker(world.inner, 7, 0, world).check()
    if rule_on:
        assert violations == []
        assert any("was restored to checkpoint" in n for n in world.notes), world.notes
    else:
        assert {v.rule for v in violations} >= {"consumes-once"}, violations
