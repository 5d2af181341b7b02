"""One pipeline's sinks as another's sources, through real Spark epochs on both stores
(tests/support/chained.py): `reports` reads the ledger's snapshot sink as changes
(inserts, updates and deletions of settled accounts) and its append sink as new rows,
and after every epoch its published sinks equal a pandas reference over exactly what
the ledger had published as of the checkpoint it read up to, including epochs where
the ledger published two checkpoints, and none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from batchpoint.protocol.checkpoint import CheckpointFailureReason
from batchpoint.runtime.restore import restore_checkpoint
from batchpoint.runtime.runner import OperatorFailed
from batchpoint.storage import StoreRef
from support.chained import Chain

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: The error names the upstream's restore and the command that follows it.
FOLLOW = (
    r"'ledger' was restored to checkpoint 1 \(restore generation 1, .*`batchpoint restore reports`"
)


def test_a_chain_reads_each_upstream_checkpoint_once(spark: Any, table_store: StoreRef) -> None:
    chain = Chain.on(spark, table_store)
    chain.add_events(30)
    up1 = chain.epoch(chain.ledger)
    assert chain.assert_exactly_once(chain.epoch(chain.reports)) == up1

    # two ledger checkpoints before the next reports epoch; the first settles accounts
    # (deletions downstream) and both update others
    chain.add_events(20, settle=3)
    up2 = chain.epoch(chain.ledger)
    gone = set(chain.published("totals_out", up1).account) - set(
        chain.published("totals_out", up2).account
    )
    assert gone, "the settled accounts left the ledger's snapshot sink"
    chain.add_events(20)
    up3 = chain.epoch(chain.ledger)
    assert chain.assert_exactly_once(chain.epoch(chain.reports)) == up3

    # the ledger published nothing since: reports reads nothing and holds its totals
    assert chain.assert_exactly_once(chain.epoch(chain.reports)) == up3
    # the ledger ran an epoch with no new event: its snapshot sink republished the
    # same rows (no change), its append sink published none
    up4 = chain.epoch(chain.ledger)
    assert chain.assert_exactly_once(chain.epoch(chain.reports)) == up4


def test_an_upstream_restore_stops_the_downstream_until_it_follows(
    spark: Any, tmp_path: Path
) -> None:
    chain = Chain.on(spark, StoreRef.of((tmp_path / "store").as_uri()))
    chain.add_events(30)
    up1 = chain.epoch(chain.ledger)
    read_up1 = chain.epoch(chain.reports)
    chain.add_events(20, settle=2)
    chain.epoch(chain.ledger)
    read_up2 = chain.epoch(chain.reports)

    restore_checkpoint(chain.ledger.driver, up1)  # takes back what read_up2 read
    for _ in range(2):  # declines each time, never reading what the restore took back
        cid = chain.reports.driver.trigger().checkpoint_id
        with pytest.raises(OperatorFailed, match=FOLLOW):
            chain.reports.run_operators(cid)
        outcome = chain.reports.driver.coordinator.get_outcome(cid)
        assert outcome is not None and outcome.reason is CheckpointFailureReason.DECLINED

    # the newest restorable reports checkpoint is the one that read what the ledger kept
    run = restore_checkpoint(chain.reports.driver)
    assert run.checkpoint_id == read_up1, run
    assert read_up2 != read_up1
    chain.add_events(15, settle=1)
    up3 = chain.epoch(chain.ledger)
    assert chain.assert_exactly_once(chain.epoch(chain.reports)) == up3
