"""The RestorePlan as a value: what crosses XCom from the restore DAG's check task to its
restore task reads back as the same plan, and renders what will be restored."""

from __future__ import annotations

import json

from batchpoint.runtime.restore import (
    CandidateCheck,
    GateResult,
    RestorePlan,
    RestoreRun,
    RestoreSource,
    SourceKind,
)


def plan(source: str = "latest") -> RestorePlan:
    return RestorePlan(
        "payments",
        RestoreSource.parse(source),
        {"balances": 3},
        (
            CandidateCheck(
                "checkpoint 3",
                3,
                SourceKind.CHECKPOINT,
                files=None,
                problems=("unreadable record: chk-3/outcome.json",),
                quarantined=True,
            ),
            CandidateCheck(
                "checkpoint 2",
                2,
                SourceKind.CHECKPOINT,
                files=6,
                state_size=1024,
                gate=GateResult(True, {"passed": True}, "row counts"),
            ),
        ),
        max_candidates=2,
        not_examined=(1,),
    )


def test_a_plan_reads_back_from_its_json_and_from_its_run_s() -> None:
    for source in ("latest", "2", "s3://bucket/savepoints/sp-1"):
        written = json.loads(json.dumps(plan(source).to_json()))
        assert RestorePlan.from_json(written) == plan(source)
    # the check task's XCom: the run's JSON, the plan's at its top level
    run = json.loads(json.dumps(RestoreRun(plan()).to_json()))
    assert RestorePlan.from_json(run) == plan()
    assert (run["chosen"], run["checkpoint_id"], run["result"]) == ("checkpoint 2", 2, None)
    assert [c["passed"] for c in run["checks"]] == [False, True]


def test_a_plan_renders_what_it_will_restore_and_what_it_skipped() -> None:
    assert plan().render() == [
        "restore pipeline 'payments' from the latest retained checkpoint: checkpoint 2",
        "  skipped checkpoint 3: unreadable record: chk-3/outcome.json",
        "  checkpoint 2: files checked, passed by the row counts",
        "  new parallelism: {'balances': 3}",
    ]
    refused = RestorePlan("payments", RestoreSource.parse("latest"), checks=plan().checks[:1])
    assert refused.chosen is None
    assert refused.render() == [
        "no candidate for a restore of pipeline 'payments' from the latest retained checkpoint",
        "  checkpoint 3: unreadable record: chk-3/outcome.json",
    ]
