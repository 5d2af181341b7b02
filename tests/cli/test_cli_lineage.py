"""`batchpoint lineage PIPELINE [--checkpoint N] [--upstream | --downstream]` over three
chained pipelines' records (support/fake_chain.py, no Spark): the upstream reads and
what they read in turn, a read an upstream restore took back, the downstream
checkpoints computed from one, as a table and as --json; an unknown pipeline or
checkpoint is one error line (or {"error": ...}), exit 2, no traceback."""

from __future__ import annotations

import pytest

from support.cli import Cli
from support.fake_chain import FakeChain


@pytest.fixture
def chain(root: str) -> FakeChain:
    """ledger 1, reports 1, trends 1, ledger 2 and 3, reports 2 (read ledger 3), trends
    2; then ledger restored to 2 (3 taken back) and ledger 4."""
    chain = FakeChain.on(root)
    for driver in (chain.ledger, chain.reports, chain.trends, chain.ledger, chain.ledger):
        chain.epoch(driver)
    chain.epoch(chain.reports)
    chain.epoch(chain.trends)
    chain.restore(chain.ledger, 2)
    chain.epoch(chain.ledger)
    return chain


def rows(text: str) -> list[list[str]]:
    """The table's rows (after the rule under its headers), cells split on 2+ spaces."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("-----"))
    body = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        body.append([c for c in line.strip().split("  ") if c.strip()])
    return [[c.strip() for c in r] for r in body]


def test_upstream_is_the_default_and_shows_what_was_taken_back(chain, cli: Cli) -> None:
    run = cli("lineage", "trends")
    assert run.code == 0 and run.err == "", run
    assert run.out.startswith("trends checkpoint 2 was computed from")
    after_1 = "after checkpoint 1 up to checkpoint"
    kept, taken = "on the upstream's timeline", "taken back by a restore of 'ledger'"
    assert rows(run.out) == [
        ["1", "trends 2", "regions", "reports/by_region", f"{after_1} 2", kept],
        ["2", "reports 2", "balances", "ledger/totals_out", f"{after_1} 3", taken],
        ["2", "reports 2", "moves", "ledger/movements", f"{after_1} 3", taken],
    ]
    # why, with the command that follows the restore
    assert "note: reports 2, source balances:" in run.out
    assert "'ledger' was restored to checkpoint 2" in run.out
    assert cli("lineage", "trends", "--upstream").out == run.out
    assert cli("lineage", "ledger").out.strip() == "ledger checkpoint 4 reads no other pipeline."


def test_upstream_json(chain, cli: Cli) -> None:
    body = cli("--json", "lineage", "trends", "--checkpoint", "1").json
    assert body["json_version"] == 2
    assert (body["direction"], body["pipeline"], body["checkpoint_id"]) == ("upstream", "trends", 1)
    first, *more = body["reads"]
    assert first == {
        "reader": "trends",
        "reader_checkpoint": 1,
        "depth": 1,
        "source": "regions",
        "pipeline": "reports",
        "sink": "by_region",
        "read_from": None,
        "read_upto": 1,
        "generation": 0,
        "state": "kept",
        "problem": "",
        "retained": True,
    }
    assert [(r["reader"], r["source"], r["read_upto"], r["state"]) for r in more] == [
        ("reports", "balances", 1, "kept"),
        ("reports", "moves", 1, "kept"),
    ]
    assert body["notes"] == []


def test_downstream_as_a_table_and_json(chain, cli: Cli) -> None:
    run = cli("lineage", "ledger", "--checkpoint", "3", "--downstream")
    assert run.code == 0, run
    assert run.out.startswith("2 retained checkpoint(s) of other pipelines computed from ledger")
    table = rows(run.out)
    assert [(r[0], r[1], r[2], r[5]) for r in table] == [
        ("1", "reports 1", "balances", "no"),
        ("1", "reports 1", "moves", "no"),
        ("1", "reports 2", "balances", "yes"),
        ("1", "reports 2", "moves", "yes"),
        ("2", "trends 1", "regions", "no"),
        ("2", "trends 2", "regions", "yes"),
    ]
    assert table[2][6] == "it read 'ledger' up to 3 itself"

    body = cli("lineage", "ledger", "--checkpoint", "3", "--downstream", "--json").json
    assert (body["direction"], body["checkpoint_id"], body["completed"]) == ("downstream", 3, True)
    derived = {(r["pipeline"], r["checkpoint_id"], r["source"]): r for r in body["reads"]}
    assert derived[("trends", 2, "regions")]["derivation"] == "computed"
    assert derived[("trends", 2, "regions")]["via"] == 2  # reports 2
    assert derived[("trends", 2, "regions")]["upstream"] == "reports"
    assert derived[("reports", 1, "moves")]["derivation"] == "not_computed"
    # the head (ledger 4) was read by no one yet
    head = cli("--json", "lineage", "ledger", "--downstream").json
    assert head["checkpoint_id"] == 4
    assert [r["derivation"] for r in head["reads"]] == ["not_computed"] * 6


@pytest.mark.parametrize("json", [False, True], ids=["text", "json"])
def test_unknown_pipeline_or_checkpoint_is_one_clear_error(chain, cli: Cli, json) -> None:
    flag = ["--json"] if json else []
    for argv, said in [
        (["lineage", "nope"], "no pipeline 'nope'"),
        (["lineage", "ledger", "--checkpoint", "99"], "pipeline 'ledger' has no checkpoint 99"),
        (["lineage", "ledger", "--checkpoint", "99", "--downstream"], "has no checkpoint 99"),
        (["lineage", "ledger", "--checkpoint", "0"], "checkpoint ids start at 1"),
        (["lineage", "ledger", "--upstream", "--downstream"], "not allowed with argument"),
    ]:
        run = cli(*flag, *argv)
        assert run.code == 2, (argv, run)
        assert said in run.refusal(flag + argv), (argv, run)
        assert "Traceback" not in run.out + run.err


def test_a_pipeline_with_no_checkpoint_yet_says_to_name_one(root: str, cli: Cli) -> None:
    FakeChain.on(root)
    run = cli("lineage", "reports")
    assert run.code == 2
    assert "'reports' has no head checkpoint (none completed yet)" in run.refusal(["lineage"])
