"""`repair` (the control record rebuilt from the outcomes) and `savepoint dispose`: text,
JSON, and bad input refused with nothing written."""

from __future__ import annotations

import pytest

from batchpoint.errors import TriggerRefused
from batchpoint.protocol.checkpoint import CheckpointType
from support import fake_epochs
from support.cli import listing


def test_a_deleted_control_record_refuses_triggers_until_repaired(payments, cli):
    c = payments.coordinator
    c.store.delete(c.layout.head)
    with pytest.raises(TriggerRefused, match="batchpoint repair"):
        payments.trigger()  # never a silent restart from empty state

    before = listing(payments)
    dry = cli("--json", "repair", "--dry-run")
    assert dry.code == 0 and dry.json["dry_run"] is True and dry.json["head"] == 3
    assert listing(payments) == before  # a dry run writes nothing

    done = cli("repair")
    assert done.code == 0
    assert "rebuilt the control record: head = checkpoint 3" in done.out
    assert c.head.get().checkpoint_id == 3
    assert payments.trigger().base_checkpoint_id == 3


def test_repair_of_an_unknown_pipeline_is_refused(payments, cli):
    before = listing(payments)
    run = cli("--pipeline", "nope", "repair")
    assert run.code == 2 and run.err.startswith("error: no pipeline 'nope'")
    assert listing(payments) == before


def test_savepoint_dispose_releases_a_savepoint_and_refuses_anything_else(payments, cli):
    c = payments.coordinator
    savepoint = fake_epochs.epoch(payments, CheckpointType.SAVEPOINT)
    fake_epochs.epoch(payments)  # the head moves past it: nothing depends on it
    assert savepoint in c.completed.retained_ids()

    before = listing(payments)
    wrong = cli("savepoint", "dispose", "2")  # a checkpoint, not a savepoint
    assert wrong.code == 2 and "is not a retained savepoint" in wrong.err
    missing = cli("savepoint", "dispose")
    assert missing.code == 2 and "needs the savepoint's checkpoint id" in missing.err
    assert listing(payments) == before

    run = cli("--json", "savepoint", "dispose", str(savepoint))
    assert run.code == 0 and run.json == {"pipeline": "payments", "disposed": savepoint}
    assert savepoint not in c.completed.retained_ids()
