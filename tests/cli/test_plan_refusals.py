"""`batchpoint plan --checkpoint N` is the plan of a restore of N (invariant 18): a
checkpoint the restore refuses (quarantined, its record unreadable, no longer retained)
exits 3 with the restore's own one-line reason, never "deployable" and never a
traceback. A checkpoint that never was is still a mistake (exit 2, tests/cli/test_plan.py).
The epochs are fake (support/fake_epochs.py)."""

from __future__ import annotations

import time

import pytest

from batchpoint.errors import RestoreRefused
from batchpoint.runtime.driver import PipelineDriver
from batchpoint.runtime.restore import restore_checkpoint
from support import fake_epochs
from support.cli import REF, Cli


def restore_refusal(driver: PipelineDriver, checkpoint_id: int) -> str:
    with pytest.raises(RestoreRefused) as refused:
        restore_checkpoint(PipelineDriver(driver.pipeline, driver.store_ref), checkpoint_id)
    return str(refused.value)


def test_a_quarantined_checkpoint_is_refused_as_its_restore_is(
    cli: Cli, payments: PipelineDriver
) -> None:
    payments.coordinator.quarantine.mark_damaged(2, "operator found bad rows", time.time())
    run = cli("plan", "--pipeline-ref", REF, "--checkpoint", "2")
    assert run.code == 3, (run.out, run.err)
    assert "Traceback" not in run.err
    (line,) = run.out.splitlines()
    assert line.startswith("refused: checkpoint 2 of pipeline 'payments' cannot be restored:")
    assert "operator found bad rows" in line and "batchpoint quarantine release 2" in line
    assert "operator found bad rows" in restore_refusal(payments, 2)
    body = cli("plan", "--pipeline-ref", REF, "--checkpoint", "2", "--json").json
    assert body["deployable"] is False and body["base_checkpoint"] == 2
    assert "operator found bad rows" in body["refused"]
    # released, it is planned on again
    assert cli("quarantine", "release", "2").code == 0
    assert cli("plan", "--pipeline-ref", REF, "--checkpoint", "2").code == 0


def test_a_checkpoint_whose_record_is_unreadable_is_refused(
    cli: Cli, payments: PipelineDriver
) -> None:
    coordinator = payments.coordinator
    coordinator.store.put(coordinator.layout.outcome(2), b"{not json")
    run = cli("plan", "--pipeline-ref", REF, "--checkpoint", "2")
    assert run.code == 3, (run.out, run.err)
    assert "Traceback" not in run.err
    assert run.out.startswith("refused: checkpoint 2 of pipeline 'payments' cannot be restored:")
    assert "unreadable record" in run.out


def test_a_checkpoint_no_longer_retained_is_refused(cli: Cli, payments: PipelineDriver) -> None:
    fake_epochs.epoch(payments)  # checkpoint 4: 1 leaves the three retained
    assert payments.coordinator.get_outcome(1) is not None  # completed, not retained
    run = cli("plan", "--pipeline-ref", REF, "--checkpoint", "1")
    assert run.code == 3, (run.out, run.err)
    assert run.out.strip() == (
        "refused: checkpoint 1 of pipeline 'payments' is not retained (retained: [2, 3, 4])"
    )
    assert "is not retained" in restore_refusal(payments, 1)
