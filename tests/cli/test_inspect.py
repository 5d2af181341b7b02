"""`checkpoints list`, `checkpoints show`, `stats`: tables, JSON, and mistakes that exit 2
with one `error:` line and write nothing."""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from batchpoint.protocol.checkpoint import CheckpointFailureReason
from support import fake_epochs
from support.cli import listing, payments_driver
from support.status_history import EXPECTED, QUARANTINE_REASON, every_status


def test_list_shows_the_history_as_a_table_and_as_json(payments, cli):
    run = cli("checkpoints", "list")
    assert run.code == 0
    assert "pipeline payments: head = checkpoint 3, retained = [" in run.out
    assert [line.split()[0] for line in run.out.splitlines()[3:]] == ["1", "2", "3"]

    body = cli("checkpoints", "list", "--limit", "2", "--json").json
    assert body["pipeline"] == "payments" and body["head"] == 3
    assert [c["checkpoint_id"] for c in body["checkpoints"]] == [2, 3]  # the newest 2
    assert [c["status"] for c in body["checkpoints"]] == ["retained", "head"]
    assert cli("--json", "checkpoints", "list", "--limit", "0").json["checkpoints"] == []


def test_show_gives_one_checkpoint_with_its_tasks(payments, cli):
    run = cli("checkpoints", "show", "2")
    assert run.code == 0
    assert "base: 1" in run.out and "dedup" in run.out
    assert "sync" in run.out and "records in" in run.out and "records out" in run.out

    body = cli("--json", "checkpoints", "show", "2").json
    assert body["checkpoint_id"] == 2 and body["base_checkpoint_id"] == 1
    assert {t["task"].split("#")[0] for t in body["tasks"]} >= {"dedup", "balances"}
    acks = {str(a.task): a for a in payments.coordinator.get_outcome(2).completed.acks}
    for task in body["tasks"]:
        metrics = acks[task["task"]].metrics
        assert (task["sync_ms"], task["async_ms"]) == (metrics.sync_ms, metrics.async_ms)
        assert (task["records_in"], task["records_out"]) == (
            metrics.records_in,
            metrics.records_out,
        )
    assert set(body["barrier"]) == set(payments.pipeline.sources)


def test_show_adds_up_the_storage_requests_each_ack_counted(root, cli):
    driver = payments_driver(root, epochs=1)  # acks that counted nothing: no column
    assert "requests" not in cli("checkpoints", "show", "1").out
    assert cli("--json", "checkpoints", "show", "1").json["storage_requests"] is None
    counted = fake_epochs.epoch(driver, requests=True)
    acks = driver.coordinator.get_outcome(counted).completed.acks
    files = sum(len(a.handles) for a in acks)

    run = cli("checkpoints", "show", str(counted))
    assert f"storage requests: {files} (put {files})" in run.out
    header = next(line for line in run.out.splitlines() if line.startswith("task"))
    assert header.rstrip().endswith("requests")
    body = cli("--json", "checkpoints", "show", str(counted)).json
    assert body["storage_requests"] == {"put": files}
    by_task = {t["task"]: t["storage_requests"] for t in body["tasks"]}
    assert by_task == {str(a.task): {"put": len(a.handles)} for a in acks}


def test_stats_counts_completed_and_failed_checkpoints(payments, cli):
    c = payments.coordinator
    pending = payments.trigger()
    c.abort(pending.checkpoint_id, CheckpointFailureReason.DECLINED, "a task declined")
    run = cli("stats")
    assert run.code == 0
    assert "pipeline payments: RUNNING, 1 consecutive failure(s)" in run.out
    assert "checkpoints: 4 (3 completed, 1 failed, 0 in progress)" in run.out

    body = cli("stats", "--json").json
    assert body["count"] == 4 and body["failed"] == 1
    assert body["pipeline_status"] == "RUNNING" and body["consecutive_failures"] == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--pipeline", "nope", "checkpoints", "list"], "no pipeline 'nope'"),
        (["checkpoints", "list", "--pipeline", "nope", "--json"], "no pipeline 'nope'"),
        (["checkpoints", "list", "--limit", "-1"], "argument --limit: must be 0 or more"),
        (["checkpoints", "show", "9"], "no checkpoint 9"),
        (["checkpoints", "show", "0"], "checkpoint ids start at 1, got 0"),
        (["checkpoints", "show", "-1"], "checkpoint ids start at 1, got -1"),
        (["--pipeline", "nope", "stats"], "no pipeline 'nope'"),
        (["--pipeline", "bad name", "stats"], "bad name"),
    ],
)
def test_mistakes_exit_2_with_one_line_and_write_nothing(payments, cli, argv, message):
    before = listing(payments)
    run = cli(*argv)
    assert run.code == 2, run
    assert message in run.refusal(argv)
    assert listing(payments) == before


def test_with_two_pipelines_one_must_be_named(payments, cli, root):
    from support.cli import payments_driver

    other = payments_driver(root)
    other.coordinator.store.put("pipelines/other/ids.json", b"{}")
    run = cli("checkpoints", "list")
    assert run.code == 2 and "name a pipeline with --pipeline (found: other, payments" in run.err
    assert cli("checkpoints", "list", "--pipeline", "payments").code == 0


def test_a_root_that_holds_no_pipeline_says_to_check_the_root(cli, root):
    """Said to name one with --pipeline before: the root is what is wrong."""
    run = cli("checkpoints", "list")
    assert run.code == 2 and run.err.strip() == (
        f"error: no pipeline is stored in {root}: check --root (or BATCHPOINT_ROOT)"
    )


def statuses(out: str) -> dict[int, str]:
    """id -> status, from the plain history table (its rows start with an id)."""
    rows = [line.split() for line in out.splitlines()]
    return {int(r[0]): r[2] for r in rows if r and r[0].isdigit()}


def test_every_checkpoint_is_listed_with_one_status_in_text_and_json(root, cli):
    every_status(payments_driver(root))
    assert statuses(cli("checkpoints", "list").out) == EXPECTED
    listed = cli("--json", "checkpoints", "list").json["checkpoints"]
    assert {c["checkpoint_id"]: c["status"] for c in listed} == EXPECTED
    assert {c["outcome"] for c in listed} == {"COMPLETED", "ABORTED", "PENDING"}
    assert all(c["duration_s"] is None or c["duration_s"] >= 0 for c in listed)


def _epoch(iso: str) -> float:
    """A JSON timestamp (ISO 8601 with its offset, docs/cli.md) as seconds."""
    return datetime.fromisoformat(iso).timestamp()


def test_show_says_who_quarantined_a_checkpoint_when_and_why(root, cli):
    every_status(payments_driver(root))
    run = cli("checkpoints", "show", "5")
    assert run.code == 0 and statuses(run.out) == {5: "quarantined"}
    assert "status: quarantined (completed, but found unfit for a restore" in run.out
    assert re.search(
        rf"quarantined since \S+Z by a restore: {re.escape(QUARANTINE_REASON)}", run.out
    )
    body = cli("--json", "checkpoints", "show", "5").json
    assert (body["status"], body["outcome"]) == ("quarantined", "COMPLETED")
    assert body["status_meaning"].startswith("completed, but found unfit for a restore")
    assert QUARANTINE_REASON in body["quarantine"] and _epoch(body["quarantined_at"]) > 0
    retained = cli("--json", "checkpoints", "show", "4").json
    assert (retained["status"], retained["quarantine"], retained["quarantined_at"]) == (
        "retained",
        None,
        None,
    )
    assert "quarantined" not in cli("checkpoints", "show", "4").out


def test_a_checkpoint_aborted_at_its_trigger_shows_when_it_was_triggered(root, cli):
    every_status(payments_driver(root))
    body = cli("--json", "checkpoints", "show", "7").json
    assert (body["status"], body["failure_reason"]) == ("aborted", "incompatible-deploy")
    triggered, ended = _epoch(body["trigger_time"]), _epoch(body["end_time"])
    assert triggered <= ended < triggered + 60
    assert body["duration_s"] == pytest.approx(ended - triggered, abs=1e-3)
    head = cli("--json", "checkpoints", "show", "6").json
    assert triggered >= _epoch(head["end_time"])  # triggered after the head completed
    row = next(
        line
        for line in cli("checkpoints", "show", "7").out.splitlines()
        if line.split()[:1] == ["7"]
    )
    assert " -" not in row.split("aborted", 1)[1].split("incompatible", 1)[0], row


def test_no_head_and_no_base_read_none_not_pythons_none(root, cli):
    """A reviewer's finding: a pipeline with no checkpoint yet listed `head = checkpoint
    None`, and the first checkpoint showed `base: None`."""
    driver = payments_driver(root)
    assert "head = none, retained = []" in cli("checkpoints", "list").out
    first = fake_epochs.epoch(driver)
    shown = cli("checkpoints", "show", str(first)).out
    assert "base: none " in shown and "None" not in shown, shown
