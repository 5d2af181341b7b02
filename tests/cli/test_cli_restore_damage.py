"""Issue 24, reproductions 5 and 9 through `batchpoint restore` and `batchpoint
quarantine`: a garbled outcome record of the head makes `restore latest` fall back to the
previous good checkpoint (exit 0, the finding printed), the damaged checkpoint is
quarantined with that finding as the reason, `restore <id>` of it is refused naming the
quarantine, and `quarantine release` makes it a candidate again.

The checkpoints ack stand-in files (tests/support/fake_epochs.py), so no Spark runs; the
root is a folder and a prefix on SeaweedFS in turn (the `table_store` fixture)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from batchpoint.runtime.driver import PipelineDriver
from batchpoint.storage import StoreRef
from support import fake_epochs
from support.cli import EVERY_STATE, Cli, payments_on_store
from support.payments import LAYOUT

GATE = "demo.payments_quality:restore_gate"


def _rewritten(change: Callable[[dict], None]) -> Callable[[bytes], bytes]:
    def damage(data: bytes) -> bytes:
        document = json.loads(data)
        change(document)
        return json.dumps(document).encode()

    return damage


#: Ways the head's outcome record is garbled, and what the finding says of each.
GARBLED = {
    "truncated JSON": (lambda data: data[: len(data) // 2], "truncated JSON"),
    "bad field": (_rewritten(lambda d: d.update(acks={})), "field 'acks' should be list"),
    "unknown version": (_rewritten(lambda d: d.update(version=7)), "of version 7"),
}


@pytest.fixture
def payments(
    table_store: StoreRef, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> PipelineDriver:
    """Three completed checkpoints of payments, the CLI's environment pointing at them."""
    return payments_on_store(table_store, request, monkeypatch)


def garble_head(driver: PipelineDriver, how: str) -> bytes:
    """Garble checkpoint 3's outcome record; its original bytes."""
    key = LAYOUT.outcome(3)
    original = driver.store.get(key).data
    driver.store.put(key, GARBLED[how][0](original))
    return original


def head(driver: PipelineDriver) -> int | None:
    return driver.coordinator.head.get().checkpoint_id


@pytest.mark.parametrize("how", sorted(GARBLED))
def test_restore_latest_falls_back_over_a_garbled_head_and_quarantines_it(
    payments: PipelineDriver, cli: Cli, how: str
) -> None:
    original = garble_head(payments, how)
    finding = GARBLED[how][1]

    run = cli("restore")
    assert run.code == 0, run.err
    assert "checkpoint 3: FAILED, quarantined, 1 problem(s)" in run.out
    assert f"unreadable record: record '{LAYOUT.outcome(3)}'" in run.out and finding in run.out
    assert "restored pipeline payments to checkpoint 2" in run.out
    assert head(payments) == 2

    # the quarantine lists it, with the restore's finding as the reason
    listed = cli("quarantine", "list")
    assert listed.code == 0
    row = next(line for line in listed.out.splitlines() if line.split()[:1] == ["3"])
    assert "restore" in row and LAYOUT.outcome(3) in row and finding in row
    body = cli("--json", "quarantine", "list").json["quarantined"]
    assert [(q["checkpoint_id"], q["found_by"]) for q in body] == [(3, "restore")]
    assert finding in body[0]["reason"] and body[0]["report"] is None

    # restoring it by name is refused, naming the quarantine and why
    named = cli("restore", "3")
    assert named.code == 1
    assert "checkpoint 3: quarantined since " in named.out and "by a restore: " in named.out
    assert "`batchpoint quarantine release 3` to reconsider" in named.out
    assert head(payments) == 2

    # mended and released, it is a candidate again
    payments.store.put(LAYOUT.outcome(3), original)
    released = cli("quarantine", "release", "3")
    assert released.code == 0
    assert "checkpoint 3 released (it was quarantined since " in released.out
    assert finding in released.out
    again = cli("restore", "3")
    assert again.code == 0, again.out
    assert "restored pipeline payments to checkpoint 3" in again.out and head(payments) == 3


def test_a_dry_run_quarantines_nothing(payments: PipelineDriver, cli: Cli) -> None:
    garble_head(payments, "truncated JSON")
    before = fake_epochs.listing(payments.store)
    run = cli("restore", "--dry-run")
    assert run.code == 0
    assert "checkpoint 3: FAILED, 1 problem(s)" in run.out
    assert "dry run: would restore checkpoint 2" in run.out
    assert fake_epochs.listing(payments.store) == before


def test_the_gated_restore_falls_back_too(
    payments: PipelineDriver, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BATCHPOINT_QUALITY_GATE", GATE)
    garble_head(payments, "bad field")
    run = cli("restore", *EVERY_STATE)  # the gate's integrity checks only: no Spark
    assert run.code == 0, run.err
    assert "checkpoint 3: FAILED, quarantined" in run.out
    assert "checkpoint 2: passed" in run.out
    assert head(payments) == 2
    body = cli("--json", "quarantine", "list").json["quarantined"]
    assert [(q["checkpoint_id"], q["found_by"]) for q in body] == [(3, "restore")]
