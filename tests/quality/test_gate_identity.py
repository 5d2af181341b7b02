"""The quality gate judges every state by uid (issue 36, invariant 17): a checkpoint
written before a deploy that renamed an operator or a state (keeping its uid) is judged
by the renamed state's suites and checks, never passed for want of a matching name.

A small keyed pipeline (count and sum per user) runs good epochs, then one epoch of a
buggy deploy whose state fails a declared suite and check, then the fix is deployed
under a new name with the old uid, and a gated restore runs before any epoch of it: the
bad checkpoint, written under the old name, must be rejected and the restore land on
the last good one, from which the fixed code goes on exactly once. On the local store
and SeaweedFS; through `gated_restore` (the API) and through the restore planner's gate
hook (what the CLI and the restore DAG run).

A declared state with nothing to judge in a candidate, and a state of the candidate that
the code no longer declares, are reported with their reasons, never passed over."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from batchpoint.ops.local_epoch import LocalEpochRunner
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.quality.checks import CheckResult, StateTarget
from batchpoint.quality.findings import Check, Finding
from batchpoint.quality.gate import QualityGate
from batchpoint.quality.gated_restore import gated_restore
from batchpoint.quality.hook import QualityRestoreGate
from batchpoint.quality.report import CandidateReport
from batchpoint.quality.suites import PipelineQuality, StateQuality, declare_quality
from batchpoint.runtime.api import OperatorContext, Pipeline, State
from batchpoint.runtime.incremental import base_state_files
from batchpoint.runtime.restore import RestorePlanner
from batchpoint.storage import StoreRef
from support.clock import FakeClock
from support.restoring import gate_reports

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SOURCE = "in/events"
EVENTS = pa.schema([pa.field("user", pa.string(), nullable=False), pa.field("amount", pa.int64())])
TOTALS = pa.schema(
    [
        pa.field("user", pa.string(), nullable=False),
        pa.field("n", pa.int64()),
        pa.field("total", pa.int64()),
    ]
)
USERS = ("ann", "bob", "cy", "dee")
SUITE = "counted_events"


def counted_events() -> Any:
    import great_expectations as gx

    return gx.ExpectationSuite(
        SUITE, expectations=[gx.expectations.ExpectColumnValuesToBeBetween(column="n", min_value=1)]
    )


@dataclass(frozen=True)
class EveryUserCounted:
    """batchpoint's own kind of check: every row of the state counts an event."""

    name: str = "every-user-counted"

    def run(self, target: StateTarget) -> CheckResult:
        below = target.df.where("n < 1").count()
        result = CheckResult(details={"rows_below_one": below})
        if below:
            problem = f"{below} users count fewer than one event"
            result.findings.append(Finding(target.key, f"{Check.SAMPLE}:{self.name}", problem))
        return result


def fold(ctx: OperatorContext, state: str, buggy: bool) -> Any:
    """Count and sum this epoch's events per user into the state; the buggy deploy
    stores every count negated."""
    from pyspark.sql import functions as F

    delta = ctx.input().groupBy("user").agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
    merged = (
        ctx.state(state)
        .unionByName(delta)
        .groupBy("user")
        .agg(F.sum("n").alias("n"), F.sum("total").alias("total"))
    )
    ctx.set_state(state, merged.withColumn("n", -F.col("n")) if buggy else merged)
    return merged


def build(
    name: str = "aggregate",
    *,
    uid: str | None = None,
    state: str = "totals",
    buggy: bool = False,
    more_states: dict[str, Any] | None = None,
    quality: bool = True,
) -> Pipeline:
    """The pipeline as one deploy's code declares it, with the suite and check declared
    on its state by the names of that code."""
    pipeline = Pipeline("counts", max_parallelism=16)
    pipeline.source("events", root=SOURCE, schema=EVENTS, key=["user"])
    declared = {state: State(TOTALS, uid="totals"), **(more_states or {})}
    pipeline.operator(
        name, inputs=["events"], key=["user"], states=declared, parallelism=2, uid=uid
    )(lambda ctx: fold(ctx, state, buggy))
    pipeline.sink("out", inputs=[name], key=["user"], mode="snapshot")
    if quality:
        checks = (EveryUserCounted(),)
        states = (StateQuality(name, state, suite=counted_events, checks=checks),)
        declare_quality(pipeline, PipelineQuality(states=states))
    return pipeline


class Deploys:
    """One store and clock; each `deploy` is the pipeline's code as of that moment."""

    def __init__(self, spark: Any, ref: StoreRef) -> None:
        self.spark, self.ref = spark, ref
        self.store = ref.open()
        self.clock = FakeClock()
        self.epochs = 0
        self.runner: LocalEpochRunner | None = None

    def deploy(self, pipeline: Pipeline) -> LocalEpochRunner:
        self.runner = LocalEpochRunner(
            pipeline, self.ref, self.spark, CheckpointConfig(), clock=self.clock
        )
        return self.runner

    def epoch(self) -> int:
        rows = [
            {"user": USERS[(self.epochs + i) % len(USERS)], "amount": 10 * self.epochs + i}
            for i in range(10)
        ]
        data = "\n".join(json.dumps(r) for r in rows).encode()
        self.store.put(f"{SOURCE}/p0/e{self.epochs:05d}.jsonl", data)
        self.epochs += 1
        self.clock.advance(60)
        assert self.runner is not None
        result = self.runner.run_epoch()
        assert result.outcome is not None, result.message
        assert result.outcome.status is CheckpointStatus.COMPLETED, result.message
        return result.outcome.checkpoint_id

    def gate(self) -> QualityGate:
        assert self.runner is not None
        return QualityGate(self.runner.pipeline, self.ref, spark=self.spark, clock=self.clock)

    def head(self) -> int | None:
        assert self.runner is not None
        return self.runner.driver.coordinator.head.get().checkpoint_id

    def state(self) -> pd.DataFrame:
        """The head's state, found by its uids (operator `aggregate`, state `totals`)."""
        from batchpoint.spark import keyed_io

        assert self.runner is not None
        coordinator = self.runner.driver.coordinator
        head = coordinator.completed.get(self.head())
        files = base_state_files(head, "aggregate", "totals")
        df = keyed_io.read_keyed(self.spark, self.ref, files).toPandas()
        return df[["user", "n", "total"]].sort_values("user", ignore_index=True)

    def reference(self) -> pd.DataFrame:
        """Count and sum per user over every input file, computed apart in pandas."""
        frames = []
        for i in range(self.epochs):
            text = self.store.get(f"{SOURCE}/p0/e{i:05d}.jsonl").data.decode()
            frames.append(pd.DataFrame([json.loads(line) for line in text.splitlines()]))
        rows = pd.concat(frames)
        out = rows.groupby("user").agg(n=("amount", "size"), total=("amount", "sum"))
        return out.reset_index().sort_values("user", ignore_index=True)


#: The fixed code, deployed under a new name with the old uid: (code, its label of the
#: state the suite and check are declared on).
RENAMES = {
    "operator": (lambda: build("aggregate2", uid="aggregate"), "aggregate2/totals"),
    "state": (lambda: build(state="sums"), "aggregate/sums"),
}


def _restore_through_the_hook(d: Deploys) -> tuple[int | None, list[CandidateReport]]:
    """What `batchpoint restore` and the restore DAG run: the planner, the gate its hook."""
    assert d.runner is not None
    hook = QualityRestoreGate(d.gate)
    planner = RestorePlanner(d.runner.driver, gate=hook)
    plan = planner.plan("latest")
    reports = [
        CandidateReport.from_body("report", c.gate.report)
        for c in plan.checks
        if c.gate is not None and isinstance(c.gate.report, dict)
    ]
    if plan.chosen is not None:
        planner.apply(plan)
    return (plan.chosen.checkpoint_id if plan.chosen else None), reports


@pytest.mark.parametrize("renamed", list(RENAMES))
def test_a_checkpoint_from_before_a_rename_is_judged_by_the_renamed_states_checks(
    spark: Any, table_store: StoreRef, renamed: str
) -> None:
    d = Deploys(spark, table_store)
    d.deploy(build())
    good = [d.epoch(), d.epoch()]
    d.deploy(build(buggy=True))
    bad = d.epoch()
    code, label = RENAMES[renamed]
    d.deploy(code())

    if renamed == "operator":
        restored = gated_restore(d.runner.driver, d.gate())
        chosen, reports = restored.plan.chosen_id, gate_reports(restored)
    else:
        chosen, reports = _restore_through_the_hook(d)

    assert [r.checkpoint_id for r in reports] == [bad, good[-1]]
    rejected, passed = reports
    assert not rejected.passed and rejected.suites_run, rejected.render()
    judged = {(f.object, f.uid, f.check) for f in rejected.state_findings}
    assert judged == {
        (label, "aggregate/totals", f"{Check.SUITE}:{SUITE}"),
        (label, "aggregate/totals", f"{Check.SAMPLE}:every-user-counted"),
    }, rejected.render()
    # keyed by uid, labelled with the code's names
    assert set(rejected.gx_results) == {"aggregate/totals"}
    assert rejected.states == {"aggregate/totals": label}
    assert passed.passed and set(passed.gx_results) == {"aggregate/totals"}, passed.render()
    assert passed.checks["aggregate/totals"]["every-user-counted"] == {"rows_below_one": 0}
    assert chosen == good[-1] and d.head() == good[-1]

    # the fixed code goes on from the good checkpoint: the bad epoch's input read once
    d.epoch()
    pd.testing.assert_frame_equal(d.state(), d.reference(), check_dtype=False)


def test_states_with_nothing_to_judge_are_reported_with_why(spark: Any, tmp_path: Any) -> None:
    d = Deploys(spark, StoreRef.of((tmp_path / "store").as_uri()))
    d.deploy(build(more_states={"extra": State(TOTALS, uid="extra")}))
    first = d.epoch()
    # the next code drops state `extra`, adds state `fresh` and an operator `late`
    code = build(more_states={"fresh": State(TOTALS, uid="fresh")})
    code.drop_state("aggregate", "extra")
    code.operator("late", inputs=["events"], key=["user"], states={"seen": TOTALS})(
        lambda ctx: ctx.input()
    )
    d.deploy(code)

    report = d.gate().run(dry_run=True)
    (candidate,) = report.candidates
    assert candidate.passed and report.chosen == first, candidate.render()
    text = "\n".join(candidate.render())
    assert "not judged: aggregate/fresh: new since checkpoint" in text, text
    assert "not judged: aggregate/extra: not declared by the code" in text, text
    assert [(s.uid, s.label, s.reason) for s in candidate.not_judged] == [
        (
            "aggregate/extra",
            "aggregate/extra",
            "not declared by the code (dropped, or its uid changed): nothing to judge it by",
        ),
        (
            "aggregate/fresh",
            "aggregate/fresh",
            f"new since checkpoint {first}: it holds no state of uid 'fresh' of operator "
            "uid 'aggregate'",
        ),
        (
            "late/seen",
            "late/seen",
            f"new since checkpoint {first}: it holds no operator of uid 'late'",
        ),
    ]
    assert set(candidate.states) == {"aggregate/totals"}  # the one state judged
    # the report stored beside the checkpoint says the same
    stored = CandidateReport.decode("report", candidate.encode())
    assert stored.not_judged == candidate.not_judged and stored.states == candidate.states
