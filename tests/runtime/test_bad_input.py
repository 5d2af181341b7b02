"""Bad input is named, declined, and leaves the previous checkpoint as it was."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from batchpoint.errors import TriggerRefused
from batchpoint.protocol.checkpoint import CheckpointFailureReason
from batchpoint.runtime.runner import OperatorFailed
from demo import payments
from support.payments import PaymentsRun

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_malformed_source_file_is_named_and_declined(
    make_run: Callable[..., PaymentsRun], after_first_epoch: Path
) -> None:
    run = make_run(copy_from=after_first_epoch)
    run.add_input(1)
    run.store.put("sources/payments/p2/e00001-f98.jsonl", b'{"account_id": "a", "event_id": \n')
    cid = run.runner.driver.trigger().checkpoint_id
    with pytest.raises(OperatorFailed, match=r"p2/e00001-f98\.jsonl.*line 1"):
        run.runner.run_operators(cid)
    outcome = run.runner.driver.coordinator.get_outcome(cid)
    assert outcome is not None and outcome.reason is CheckpointFailureReason.DECLINED
    assert run.runner.driver.coordinator.head.get().checkpoint_id == cid - 1
    manifest = run.runner.driver.sinks.manifest("balances_table")
    assert manifest is not None and cid not in manifest.epochs


def test_state_schema_that_does_not_match_the_checkpoint(
    make_run: Callable[..., PaymentsRun],
    after_first_epoch: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    changed = pa.schema(
        [
            pa.field("account_id", pa.string()),
            pa.field("balance", pa.string()),  # was int64 when checkpoint 1 was written
            pa.field("event_count", pa.int64()),
            pa.field("last_ts", pa.int64()),
        ]
    )
    monkeypatch.setattr(payments, "BALANCE_SCHEMA", changed)
    run = make_run(copy_from=after_first_epoch)
    run.add_input(1)
    coordinator = run.runner.driver.coordinator
    head_before = coordinator.head.get().checkpoint_id
    # the deploy check names the change before any operator reads a row of it
    with pytest.raises(TriggerRefused, match=r"'balance' changed type from int64 to string"):
        run.runner.driver.trigger()
    control = coordinator.control_record()
    assert control is not None and control.pending == ()  # nothing was started
    assert coordinator.head.get().checkpoint_id == head_before
    assert coordinator.completed.is_retained(head_before)
