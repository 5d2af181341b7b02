"""`repair` (the control record rebuilt from the records, a readable one only with
--force, a dry run writing nothing) and `savepoint dispose`: text, JSON, and bad input
refused with nothing written."""

from __future__ import annotations

import time

import pytest

from batchpoint.errors import CheckpointError, TriggerRefused
from batchpoint.protocol.checkpoint import CheckpointType
from batchpoint.protocol.restore_intents import RestoreIntent
from batchpoint.quality.quarantine import QuarantineStore
from batchpoint.quality.report import CandidateReport, GateMode
from support import fake_epochs
from support.cli import listing


def test_a_deleted_control_record_refuses_triggers_until_repaired(payments, cli):
    c = payments.coordinator
    c.store.delete(c.layout.head)
    with pytest.raises(TriggerRefused, match="batchpoint repair"):
        payments.trigger()  # never a silent restart from empty state
    # Nor read as nothing stored (a reviewer found `plan` saying every state starts
    # empty, `verify` no checkpoint yet, the list every checkpoint discarded).
    before = listing(payments)
    with pytest.raises(CheckpointError, match="has checkpoints but no control record"):
        payments.plan()
    for command in (("verify", "--integrity-only"), ("lineage", c.pipeline)):
        refused = cli(*command)
        assert refused.code == 2 and "batchpoint repair" in refused.err, (command, refused.err)
    shown = cli("--json", "checkpoints", "list")
    assert shown.code == 0, shown.err
    assert {row["status"] for row in shown.json["checkpoints"]} == {"completed"}, shown.json
    stats = cli("--json", "stats").json
    assert stats["pipeline_status"] == "NEEDS_REPAIR" and "batchpoint repair" in stats["reason"]
    assert listing(payments) == before

    dry = cli("--json", "repair", "--dry-run")
    assert dry.code == 0 and dry.json["dry_run"] is True and dry.json["head"] == 3
    assert listing(payments) == before  # a dry run writes nothing

    done = cli("repair")
    assert done.code == 0
    assert "rebuilt the control record: head = checkpoint 3" in done.out
    assert c.head.get().checkpoint_id == 3
    assert cli("--json", "stats").json["pipeline_status"] == "RUNNING"
    assert payments.trigger().base_checkpoint_id == 3


def contents(driver) -> dict[str, bytes]:
    """Every object and its bytes: equal before and after means nothing was written."""
    store = driver.store
    return {info.key: store.get(info.key).data for info in store.list("")}


def test_repair_dry_run_prints_the_plan_and_writes_nothing(payments, cli):
    c = payments.coordinator
    fake_epochs.land_a_file(payments)
    open_one = payments.trigger().checkpoint_id
    c.store.put(c.layout.head, b'{"kind": "pipeline-control", "ver')
    assert cli("--json", "stats").json["pipeline_status"] == "NEEDS_REPAIR"
    before = contents(payments)

    dry = cli("repair", "--dry-run")
    assert dry.code == 0, dry.err
    assert "would rebuild the control record: head = checkpoint 3" in dry.out
    assert "(the record was unreadable)" in dry.out
    assert "restore in flight: generation 1 to checkpoint 3" in dry.out
    assert f"abandoned: [{open_one}]" in dry.out
    assert f"finding: {c.layout.head}: record '{c.layout.head}' is corrupt: truncated" in dry.out
    as_json = cli("--json", "repair", "--dry-run")
    body = as_json.json
    assert as_json.code == 0 and body["status"] == "dry-run" and body["head"] == 3
    assert body["abandoned"] == [open_one] and body["restore"]["target"] == 3
    assert contents(payments) == before  # not a byte written

    done = cli("repair")
    assert done.code == 0 and "rebuilt the control record: head = checkpoint 3" in done.out
    assert contents(payments) != before


def test_repair_refuses_a_readable_record_and_force_says_what_changes(payments, cli):
    c = payments.coordinator
    healthy = contents(payments)
    planned, agreeing = cli("repair", "--dry-run"), cli("repair")  # nothing to repair
    assert planned.code == 0 and "agrees with the records: nothing to repair" in planned.out
    assert agreeing.code == 0 and "agrees with the records: nothing changed" in agreeing.out
    assert "change:" not in planned.out + agreeing.out and contents(payments) == healthy
    report = CandidateReport("payments", 3, "checkpoint", GateMode.RESTORE, time.time())
    QuarantineStore(c.store, c.layout).add(report, time.time())  # the head, refused
    before = contents(payments)

    refused = cli("repair")
    assert refused.code == 1
    assert "refused: the control record" in refused.out and "is readable" in refused.out
    assert "--force" in refused.out and "head: checkpoint 3 -> checkpoint 2" in refused.out
    as_json = cli("--json", "repair")
    assert as_json.code == 1 and as_json.json["status"] == "refused"
    assert contents(payments) == before

    forced = cli("repair", "--force")
    assert forced.code == 0, forced.err
    assert "rebuilt the control record: head = checkpoint 2" in forced.out
    assert "change: head: checkpoint 3 -> checkpoint 2" in forced.out
    assert c.head.get().checkpoint_id == 2
    again = cli("repair", "--force")
    assert again.code == 0 and "agrees with the records: nothing changed" in again.out


def test_repair_asks_about_a_restore_in_doubt_and_head_answers(payments, cli):
    """What a restore that died between its intent and its compare-and-swap leaves, then
    the control record lost: repair cannot tell whether the head moved to 2."""
    c = payments.coordinator
    c.records.put_restore_intent(RestoreIntent(1, 2, 3, time.time()), "died")
    c.store.put(c.layout.head, b'{"kind": "pipeline-control", "ver')
    assert cli("--json", "stats").json["pipeline_status"] == "NEEDS_REPAIR"
    before = contents(payments)

    refused = cli("repair")
    assert refused.code == 1
    assert "refused: a restore to checkpoint 2 (restore generation 1)" in refused.out
    assert "`batchpoint repair --head 2`" in refused.out
    assert "`batchpoint repair --head 3` keeps checkpoint 3" in refused.out
    as_json = cli("--json", "repair")
    assert as_json.code == 1 and as_json.json["in_doubt"] == [
        {"restore_generation": 1, "checkpoint": 2}
    ]
    assert contents(payments) == before

    wrong = cli("repair", "--head", "7")
    assert wrong.code == 1 and "checkpoint 7 cannot be the head" in wrong.out
    for typo in ("-1", "0"):  # 0 was taken, then refused as a head (exit 1)
        bad = cli("repair", "--head", typo)
        assert bad.code == 2 and "--head" in bad.err
    assert contents(payments) == before

    done = cli("repair", "--head", "2")
    assert done.code == 0, done.out
    assert "rebuilt the control record: head = checkpoint 2" in done.out
    assert c.control.load().restore_generation == 2  # above the intent's generation
    c.store.delete(c.layout.head)  # lost again: the repair's own restore settled the intent
    again = cli("--json", "repair", "--dry-run")
    assert again.code == 0 and again.json["in_doubt"] == [] and again.json["head"] == 2


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
    after_dashes = cli("savepoint", "dispose", "--json", "--", "2")  # the operand still
    assert after_dashes.code == 2 and "is not a retained savepoint" in after_dashes.json["error"]
    missing = cli("savepoint", "dispose")
    assert missing.code == 2 and "needs the savepoint's checkpoint id" in missing.err
    extra = cli("savepoint", "dispose", "--json", str(savepoint), "3")
    assert extra.code == 2 and f"unrecognized arguments: {savepoint} 3" in extra.json["error"]
    assert listing(payments) == before

    # an option between the action and its operand (argparse alone left the id over)
    run = cli("savepoint", "dispose", "--json", str(savepoint))
    assert run.code == 0
    assert run.json == {"json_version": 2, "pipeline": "payments", "disposed": savepoint}
    assert savepoint not in c.completed.retained_ids()
