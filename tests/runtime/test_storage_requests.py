"""What an epoch's writes cost storage, per subtask: the requests each ack records
(issue 42), counted by the Spark tasks that wrote its files on a real local session.
Each file a subtask wrote is one upload, so its ack's puts are exactly its written
files; a subtask that wrote nothing (a sink staging its input by reference) records no
requests at all, and its ack is written as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from batchpoint.ops.local_epoch import LocalEpochRunner
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.storage import StoreRef
from demo.payments import SOURCE_ROOT, build_pipeline
from demo.payments_data import write_epoch_files
from support.clock import FakeClock

pytestmark = [pytest.mark.spark]

#: the payments operators that write state or channels of their own with Spark
WRITERS = {"dedup", "balances", "alerts"}


def test_every_ack_counts_one_put_per_file_its_subtask_wrote(spark: Any, tmp_path: Path) -> None:
    ref = StoreRef.of(tmp_path.as_uri())
    store = ref.open()
    clock = FakeClock()
    runner = LocalEpochRunner(build_pipeline(), ref, spark, clock=clock)
    write_epoch_files(store, SOURCE_ROOT, 0, accounts=20, events_per_epoch=60)
    clock.advance(60)
    result = runner.run_epoch()
    assert result.outcome is not None and result.outcome.status is CheckpointStatus.COMPLETED
    acks = result.outcome.completed.acks
    seen = {ack.task.operator for ack in acks}
    assert seen >= WRITERS, seen
    for ack in acks:
        requests = ack.metrics.storage_requests
        written = ack.written_handles
        if not written:
            assert requests is None, (ack.task, requests)
            continue
        assert requests is not None, ack.task
        # a local store uploads in one put; the writers read and list nothing
        assert requests.by_kind() == {"put": len(written)}, (ack.task, written)
        assert all(store.exists(h.path) or h.name.startswith("channel-") for h in written)
    writers = [a for a in acks if a.task.operator in WRITERS]
    assert all(a.metrics.storage_requests and a.metrics.storage_requests.put for a in writers)
