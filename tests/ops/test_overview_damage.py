"""Damage is a finding in the pipeline's overview, never a blocker and never silent
(invariant 11): a damaged control record or id counter is said in the overview while the
rest still reads; a lost control record is NEEDS_REPAIR as the CLI says it; and a head
whose outcome record is gone is a row and a finding, not a checkpoint that vanished."""

from __future__ import annotations

import pytest

from batchpoint.errors import CheckpointNotFound
from batchpoint.ops.inspect import pipeline_stats
from batchpoint.ops.overview import (
    PipelineOverview,
    checkpoint_page,
    history_page,
    pipeline_overview,
)
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.protocol.coordinator import CheckpointCoordinator
from batchpoint.protocol.stats import HistoryPage
from support import protocol_steps as steps


def _overview(c: CheckpointCoordinator) -> tuple[HistoryPage, PipelineOverview]:
    page, damage = history_page(c, None, 10)
    return page, pipeline_overview(c, c.store, page, damage)


@pytest.mark.parametrize("record", ["control", "counter"])
def test_a_damaged_control_record_or_counter_is_a_finding_not_an_error(local_store, record):
    c = steps.coordinator(local_store)
    ids = [steps.complete(c) for _ in range(3)]
    key = c.control.key if record == "control" else c.ids._key
    local_store.put(key, b"{garbage")

    page, overview = _overview(c)

    assert [f for f in overview.findings if key in f], overview.findings
    if record == "control":
        # the history still reads; the status is the CLI's, one decision for both
        assert [s.checkpoint_id for s in page.checkpoints] == ids[::-1]
        assert overview.status == "needs_repair"
        assert pipeline_stats(c).status == "NEEDS_REPAIR"
        assert overview.head is None
    else:
        assert overview.triggered is None  # not a number it could not read
        assert overview.head == ids[-1]  # what can be read still shows
        assert [s.checkpoint_id for s in page.checkpoints] == ids[::-1]  # and the history


def test_a_lost_control_record_needs_repair_as_the_cli_says(local_store):
    c = steps.coordinator(local_store)
    for _ in range(2):
        steps.complete(c)
    local_store.delete(c.control.key)

    _, overview = _overview(c)
    cli = pipeline_stats(c)

    assert cli.status == "NEEDS_REPAIR"
    assert (overview.status, overview.status_detail) == ("needs_repair", cli.reason)
    assert cli.reason in overview.findings


def test_a_head_without_its_outcome_record_is_a_row_and_a_finding(local_store):
    c = steps.coordinator(local_store)
    ids = [steps.complete(c) for _ in range(3)]
    local_store.delete(c.layout.outcome(ids[-1]))

    page, overview = _overview(c)

    assert [s.checkpoint_id for s in page.checkpoints] == ids[::-1]
    row = page.checkpoints[0]
    assert row.status is CheckpointStatus.UNREADABLE
    assert "is the head in the control record" in row.failure_message
    assert [f for f in overview.findings if f.startswith(f"checkpoint {ids[-1]} ")]
    shown = checkpoint_page(c, ids[-1]).detail.stats
    assert (shown.status, shown.failure_message) == (row.status, row.failure_message)
    # an id the control record does not hold is still simply not there
    with pytest.raises(CheckpointNotFound):
        checkpoint_page(c, ids[-1] + 5)
