"""How the quality gate tells states apart (issue 36, invariant 17), without Spark: a
candidate's states are found by uid in its records and matched with the code's by uid,
whatever either side calls them; integrity findings name a state as the code does, with
its uid beside; skip lists take names or uids; a report keyed by uid labels each state,
and a report stored before uids still reads."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pyarrow as pa
import pytest

from batchpoint.errors import ConfigError
from batchpoint.protocol.checkpoint import (
    AckRecord,
    CompletedCheckpoint,
    FileHandle,
    TaskMetrics,
)
from batchpoint.protocol.layout import TaskId
from batchpoint.protocol.pipeline import OperatorKind
from batchpoint.protocol.topology import NodeTopology, StateTopology, Topology
from batchpoint.quality.checks import RecomputeSample
from batchpoint.quality.findings import Check, Finding
from batchpoint.quality.identity import UNDECLARED, StateId, declared_states, match_states
from batchpoint.quality.integrity import check_key_groups
from batchpoint.quality.report import CandidateReport, GateMode
from batchpoint.quality.suites import (
    PipelineQuality,
    StateQuality,
    check_skip_names,
    reads_state,
    skippable_names,
    validate_declaration,
)
from batchpoint.runtime.api import Pipeline, State
from support.record_examples import FOLDER, pending_v2

TOTALS = pa.schema([pa.field("user", pa.string()), pa.field("n", pa.int64())])


def code(name: str = "aggregate2", *, extra_operator: str | None = None) -> Pipeline:
    """The code after a deploy: operator `aggregate` renamed (uid kept), its state
    `totals` renamed `sums` (uid kept), a state `fresh` added, state `gone` dropped."""
    pipeline = Pipeline("counts", max_parallelism=4)
    pipeline.source("events", root="in", schema=TOTALS)
    states = {"sums": State(TOTALS, uid="totals"), "fresh": TOTALS}
    pipeline.operator(name, inputs=["events"], key=["user"], states=states, uid="aggregate")(
        lambda ctx: None
    )
    if extra_operator is not None:
        pipeline.operator(
            extra_operator,
            inputs=["events"],
            key=["user"],
            states={"totals": TOTALS},
            uid=f"{extra_operator}-new",
        )(lambda ctx: None)
    return pipeline


def state_file(state: str, subtask: int, groups: tuple[int, int]) -> FileHandle:
    path = f"data/aggregate/{subtask}/state-{state}/part-0.parquet"
    return FileHandle(path, 10, "0" * 64, key_group_range=groups, name=f"state-{state}")


def checkpoint(*, recorded: bool = True) -> CompletedCheckpoint:
    """A checkpoint written before the deploy: operator `aggregate` with states `totals`
    (every key group) and `gone` (key groups 2..3 lost); `recorded`: with its topology
    (else as a version-1 checkpoint, whose topology is derived from its acks)."""
    node = NodeTopology(
        "aggregate",
        "aggregate",
        OperatorKind.OPERATOR,
        2,
        4,
        ("user",),
        (StateTopology("totals", "totals"), StateTopology("gone", "gone")),
    )
    pending = dataclasses.replace(
        pending_v2(),
        expected_tasks=(TaskId("aggregate", 0), TaskId("aggregate", 1)),
        topology=Topology((node,)) if recorded else None,
    )
    files = {
        TaskId("aggregate", 0): (state_file("totals", 0, (0, 1)), state_file("gone", 0, (0, 1))),
        TaskId("aggregate", 1): (state_file("totals", 1, (2, 3)),),
    }
    acks = tuple(AckRecord(7, task, "a", f, TaskMetrics(), 0.0) for task, f in files.items())
    return CompletedCheckpoint(pending, acks, 0.0)


@pytest.mark.parametrize("recorded", [True, False], ids=["topology", "derived"])
def test_a_candidates_states_are_matched_with_the_codes_by_uid(recorded: bool) -> None:
    match = match_states(checkpoint(recorded=recorded), declared_states(code()))
    held = {s.id.key: (s.label, s.declared is not None, len(s.handles)) for s in match.held}
    assert held == {
        "aggregate/totals": ("aggregate2/sums", True, 2),  # renamed twice, the same state
        "aggregate/gone": ("aggregate/gone", False, 1),  # the checkpoint's names: undeclared
    }
    assert [(n.declared.label, n.reason) for n in match.new] == [
        (
            "aggregate2/fresh",
            "new since checkpoint 7: it holds no state of uid 'fresh' of operator uid 'aggregate'",
        )
    ]
    assert [s.id for s in match.undeclared] == [StateId("aggregate", "gone")]
    assert UNDECLARED.startswith("not declared by the code")


def test_integrity_covers_the_states_the_candidate_holds_by_uid() -> None:
    # The state renamed `sums` (its operator's name kept) is found by its uid, its files
    # covering every key group: no finding for it (by name it would be a state with no
    # file), none for the state added since, and the lost key groups of the state the
    # code dropped are found, named as the checkpoint named it, with its uid.
    findings = check_key_groups(checkpoint(), declared_states(code("aggregate")))
    assert findings == [
        Finding(
            "aggregate/gone",
            Check.KEY_GROUPS,
            "key groups [2, 3] are covered by no file",
            uid="aggregate/gone",
        )
    ]


def test_skip_lists_take_a_states_names_or_its_uid() -> None:
    pipeline = code()
    quality = PipelineQuality(states=(StateQuality("aggregate2", "sums", checks=()),))
    names = skippable_names(pipeline, quality)
    assert {"aggregate2/sums", "aggregate/totals", "aggregate2/fresh", "aggregate/fresh"} <= set(
        names
    )
    for name in ("aggregate2/sums", "aggregate/totals"):
        check_skip_names(pipeline, quality, [name])
        assert reads_state(pipeline, quality, [name])  # `fresh` is still counted
    both = ["aggregate/totals", "aggregate2/fresh"]
    assert not reads_state(pipeline, quality, both)  # every state skipped: integrity only

    # A rename that kept the uid, and a new operator took the old name: "aggregate/totals"
    # is the names of one state and the uid of another.
    crowded = code(extra_operator="aggregate")
    with pytest.raises(ConfigError) as ambiguous:
        check_skip_names(crowded, PipelineQuality(), ["aggregate/totals"])
    assert str(ambiguous.value) == (
        "skip_suites: 'aggregate/totals' names state aggregate/totals and is the uid of state "
        "aggregate2/sums; skip aggregate/totals by its uid 'aggregate-new/totals', or "
        "aggregate2/sums by its names 'aggregate2/sums'"
    )


def test_a_quality_declared_by_a_uid_says_which_name_to_write() -> None:
    with pytest.raises(ConfigError) as error:
        validate_declaration(code(), PipelineQuality(states=(StateQuality("aggregate", "sums"),)))
    assert "'aggregate' is the uid of 'aggregate2': declare its quality by that name" in str(
        error.value
    )
    with pytest.raises(ConfigError) as error:
        validate_declaration(
            code(), PipelineQuality(states=(StateQuality("aggregate2", "totals"),))
        )
    assert "'totals' is the uid of 'sums': declare its quality by that name" in str(error.value)


@pytest.mark.parametrize(
    ("source", "source_key", "message"),
    [
        ("clicks", None, "check 'recount': no source 'clicks' (sources: events)"),
        ("events", ("user", "n"), "source_key names 2 column(s) (user, n), the state's key has 1"),
    ],
)
def test_a_recompute_check_that_cannot_run_is_refused_where_it_is_declared(
    source: str, source_key: tuple[str, ...] | None, message: str
) -> None:
    """Not as a finding on every candidate, which would quarantine them all."""
    check = RecomputeSample("recount", source=source, recompute=lambda rows: rows)
    check = dataclasses.replace(check, source_key=source_key)
    declared = StateQuality("aggregate2", "sums", checks=(check,))
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate_declaration(code(), PipelineQuality(states=(declared,)))
    fine = dataclasses.replace(check, source="events", source_key=("user",))
    validate_declaration(
        code(), PipelineQuality(states=(StateQuality("aggregate2", "sums", checks=(fine,)),))
    )


def _report(name: str) -> CandidateReport:
    return CandidateReport.decode(name, (FOLDER / name).read_bytes())


def test_a_report_keys_states_by_uid_and_labels_them() -> None:
    report = _report("quality-report-v1-by-uid.json")
    assert {r.state for r in report.result_rows()} == {"totals/balances"}  # labels
    text = "\n".join(report.render())
    assert "not judged: totals/flags (uid balances/flags): new since checkpoint 7" in text
    assert "not judged: dedup/seen: not declared by the code" in text
    # a check's row fails by its finding, found by the state's uid (not by its label)
    counted = CandidateReport(
        "payments",
        7,
        "checkpoint",
        GateMode.RESTORE,
        0.0,
        findings=[Finding("totals/balances", Check.ROW_COUNT, "1 row", uid="balances/balances")],
        checks={"balances/balances": {Check.ROW_COUNT: {"rows": 1, "recorded_rows": 2}}},
        states={"balances/balances": "totals/balances"},
    )
    (row,) = counted.result_rows()
    assert (row.state, row.passed) == ("totals/balances", False)


def test_a_report_stored_before_uids_reads_each_key_as_its_own_label() -> None:
    report = _report("quality-report-v1.json")
    assert report.states == {} and report.not_judged == []
    assert report.findings[0].uid is None
    assert report.label("balances/balances") == "balances/balances"
    assert {r.state for r in report.result_rows()} == {"balances/balances"}
    # as a quarantine record holds it (the body without its envelope)
    body: dict[str, Any] = report.to_body()
    assert "states" not in body and "not_judged" not in body
    assert CandidateReport.from_body("quarantine", body).to_body() == body
