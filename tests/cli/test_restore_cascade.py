"""`batchpoint restore --pipeline ledger --cascade` on fake epochs of the two chained
pipelines (no Spark: tasks ack stand-in files, support/fake_epochs.py): the dry run shows
the plan and writes nothing, the restore moves both heads, and combinations that make no
sense are refused as mistakes (exit 2) before anything is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchpoint.runtime.driver import PipelineDriver
from batchpoint.storage import StoreRef
from support import fake_epochs
from support.chained import ledger_pipeline, reports_pipeline
from support.cli import Cli, fresh_root
from support.fake_chain import fake_epoch

REFS = "support.chained:ledger_pipeline,support.chained:reports_pipeline"


@pytest.fixture
def chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    root = fresh_root(tmp_path, monkeypatch)
    monkeypatch.setenv("BATCHPOINT_PIPELINE_REF", REFS)
    ledger = PipelineDriver(ledger_pipeline(), StoreRef.of(root))
    reports = PipelineDriver(reports_pipeline(), StoreRef.of(root))
    for driver in (ledger, reports):
        driver.coordinator.register(driver.pipeline.spec())
    up1, rep1 = fake_epoch(ledger), fake_epoch(reports)
    up2, rep2 = fake_epoch(ledger), fake_epoch(reports)
    return {"ledger": ledger, "reports": reports, "ids": (up1, rep1, up2, rep2)}


def _heads(chain: dict[str, object]) -> tuple[int | None, ...]:
    out = []
    for name in ("ledger", "reports"):
        driver = chain[name]
        assert isinstance(driver, PipelineDriver)
        control = driver.coordinator.control_record()
        out.append(None if control is None else control.head)
    return tuple(out)


def test_the_dry_run_shows_the_plan_and_the_restore_applies_it(
    cli: Cli, chain: dict[str, object]
) -> None:
    up1, rep1, up2, rep2 = chain["ids"]  # type: ignore[misc]
    ledger = chain["ledger"]
    assert isinstance(ledger, PipelineDriver)
    before = fake_epochs.listing(ledger.store)
    dry = cli("restore", str(up1), "--pipeline", "ledger", "--cascade", "--dry-run", "--json")
    assert dry.code == 0, dry.err
    members = [(m["pipeline"], m["action"], m["target"]) for m in dry.json["plan"]["members"]]
    assert members == [("ledger", "restore", up1), ("reports", "restore", rep1)]
    assert fake_epochs.listing(ledger.store) == before  # a dry run writes nothing
    assert _heads(chain) == (up2, rep2)

    run = cli("restore", str(up1), "--pipeline", "ledger", "--cascade")
    assert run.code == 0, run.err
    assert f"reports (reads ledger): restore to checkpoint {rep1}" in run.out
    assert "(done)" in run.out
    assert _heads(chain) == (up1, rep1)


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (
            ("--allow-non-restored-state",),
            "--allow-non-restored-state cannot be combined with --cascade",
        ),
        (("--claim",), "--claim cannot be combined with --cascade"),
    ],
)
def test_mistakes_are_refused_before_anything_is_read(
    cli: Cli, chain: dict[str, object], extra: tuple[str, ...], said: str
) -> None:
    run = cli("restore", "1", "--pipeline", "ledger", "--cascade", *extra)
    assert run.code == 2 and said in run.err, (run.out, run.err)


def test_a_new_parallelism_rescales_the_restored_pipeline(
    cli: Cli, chain: dict[str, object]
) -> None:
    up1, rep1, _, _ = chain["ids"]  # type: ignore[misc]
    run = cli(
        "restore", str(up1), "--pipeline", "ledger", "--cascade", "--parallelism", '{"totals": 3}'
    )
    assert run.code == 0, run.err
    assert "ledger: restore to checkpoint 1, parallelism {'totals': 3}" in run.out
    assert _heads(chain) == (up1, rep1)
    ledger = chain["ledger"]
    assert isinstance(ledger, PipelineDriver)
    spec = ledger.coordinator.stored_spec()  # read afresh
    assert spec is not None and spec.operator("totals").parallelism == 3
