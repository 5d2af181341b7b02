"""Deploys that keep state, through the real runtime (issue 26, invariant 15): a small
keyed pipeline (count and sum per user) run by the in-process engine with real Spark on
the local store and SeaweedFS, its code changed between epochs as a user would.

- a rename that keeps its uid keeps the state: every epoch equals the pandas reference;
- a rename without uid is refused before any Spark job, naming `uid=` as the fix, and
  nothing is registered;
- a removed state is refused, then allowed by `pipeline.drop_state`;
- an added operator and an added sink start empty (they read only input newer than the
  base) while the kept operator goes on;
- a restore into code that drops state is refused unless allow_non_restored_state, and
  the first trigger after an allowed restore honours the allowance."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from batchpoint.errors import DeployRefused, TriggerRefused
from batchpoint.ops.local_epoch import EpochResult, LocalEpochRunner
from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointStatus
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.deploy_plan import Verdict
from batchpoint.runtime.api import OperatorContext, Pipeline, State
from batchpoint.runtime.restore import restore_checkpoint
from batchpoint.storage import StoreRef
from batchpoint.storage.base import ObjectStore
from support.clock import FakeClock

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


def fold(ctx: OperatorContext, state: str = "totals") -> Any:
    """Count and sum this epoch's events per user into the state."""
    from pyspark.sql import functions as F

    delta = ctx.input().groupBy("user").agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
    merged = (
        ctx.state(state)
        .unionByName(delta)
        .groupBy("user")
        .agg(F.sum("n").alias("n"), F.sum("total").alias("total"))
    )
    ctx.set_state(state, merged)
    return merged


def build(
    name: str = "aggregate",
    *,
    uid: str | None = None,
    states: dict[str, Any] | None = None,
    extra_operator: bool = False,
    extra_sink: bool = False,
) -> Pipeline:
    pipeline = Pipeline("counts", max_parallelism=16)
    pipeline.source("events", root=SOURCE, schema=EVENTS, key=["user"])
    declared = {"totals": TOTALS} if states is None else states
    first = next(iter(declared), "totals")
    pipeline.operator(
        name, inputs=["events"], key=["user"], states=declared, parallelism=2, uid=uid
    )(lambda ctx: fold(ctx, first) if declared else ctx.input())
    pipeline.sink("out", inputs=[name], key=["user"], mode="snapshot")
    if extra_operator:
        pipeline.operator(
            "late", inputs=["events"], key=["user"], states={"totals": TOTALS}, parallelism=1
        )(fold)
    if extra_sink:
        pipeline.sink("late_out", inputs=[name], key=["user"], mode="snapshot")
    return pipeline


class Deploys:
    """One store; each `deploy` is the pipeline's code as of that moment."""

    def __init__(self, spark: Any, ref: StoreRef) -> None:
        self.spark, self.ref = spark, ref
        self.store: ObjectStore = ref.open()
        self.clock = FakeClock()
        self.epochs = 0
        self.runner: LocalEpochRunner | None = None

    def deploy(self, pipeline: Pipeline) -> LocalEpochRunner:
        self.runner = LocalEpochRunner(
            pipeline, self.ref, self.spark, CheckpointConfig(), clock=self.clock
        )
        return self.runner

    def add_input(self) -> None:
        rows = [
            {"user": USERS[(self.epochs + i) % len(USERS)], "amount": 10 * self.epochs + i}
            for i in range(10)
        ]
        data = "\n".join(json.dumps(r) for r in rows).encode()
        self.store.put(f"{SOURCE}/p0/e{self.epochs:05d}.jsonl", data)
        self.epochs += 1

    def epoch(self) -> EpochResult:
        self.add_input()
        self.clock.advance(60)
        assert self.runner is not None
        return self.runner.run_epoch()

    def reference(self, files: int | None = None) -> pd.DataFrame:
        """Count and sum per user over the first `files` input files (all: None)."""
        frames = []
        for i in range(self.epochs if files is None else files):
            data = self.store.get(f"{SOURCE}/p0/e{i:05d}.jsonl").data.decode()
            frames.append(pd.DataFrame([json.loads(line) for line in data.splitlines()]))
        all_rows = pd.concat(frames)
        out = all_rows.groupby("user").agg(n=("amount", "size"), total=("amount", "sum"))
        return out.reset_index().sort_values("user", ignore_index=True)

    def state(self, operator: str, state: str = "totals") -> pd.DataFrame:
        """The state as the head checkpoint holds it, found by its uids."""
        from batchpoint.spark import keyed_io

        assert self.runner is not None
        coordinator = self.runner.driver.coordinator
        head = coordinator.head.get().checkpoint_id
        files = _state_files(coordinator, head, operator, state)
        df = keyed_io.read_keyed(self.spark, self.ref, files).toPandas()
        return df[["user", "n", "total"]].sort_values("user", ignore_index=True)


def _state_files(coordinator: Any, checkpoint_id: int, operator: str, state: str) -> list:
    completed = coordinator.completed.get(checkpoint_id)
    uid = completed.pending.operator_uid(operator)
    node = next(n for n in completed.topology.nodes if n.uid == uid)
    stream = "state-" + next(s.uid for s in node.states if s.name == state)
    return [
        h for a in completed.acks if a.operator_uid == uid for h in a.handles if h.name == stream
    ]


def same(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)


@pytest.fixture
def deploys(spark: Any, table_store: StoreRef) -> Callable[[], Deploys]:
    """On the local store and on SeaweedFS (`table_store`: a reference to either)."""
    return lambda: Deploys(spark, table_store)


def completed(result: EpochResult) -> None:
    assert result.outcome is not None, result.message
    assert result.outcome.status is CheckpointStatus.COMPLETED, result.message


def test_a_rename_that_keeps_its_uid_keeps_the_state(deploys: Callable[[], Deploys]) -> None:
    d = deploys()
    d.deploy(build("aggregate"))
    completed(d.epoch())
    completed(d.epoch())
    # renamed, its identity kept: state and its name too
    d.deploy(build("aggregate2", uid="aggregate", states={"sums": State(TOTALS, uid="totals")}))
    plan = d.runner.driver.plan()
    verdicts = {(e.kind, e.uid, e.verdict) for e in plan.entries}
    assert ("operator", "aggregate", Verdict.RENAMED) in verdicts
    assert ("state", "totals", Verdict.RENAMED) in verdicts
    assert plan.deployable, plan.render()
    completed(d.epoch())
    same(d.state("aggregate2", "sums"), d.reference())  # 30 events, not 10
    # and back: still the same identity, nothing lost
    d.deploy(build("aggregate"))
    completed(d.epoch())
    same(d.state("aggregate"), d.reference())


def test_a_rename_without_uid_is_refused_naming_the_fix(
    deploys: Callable[[], Deploys],
) -> None:
    d = deploys()
    d.deploy(build("aggregate"))
    completed(d.epoch())
    runner = d.deploy(build("aggregate2"))
    spec_before = runner.driver.coordinator.stored_spec()
    d.add_input()
    with pytest.raises(TriggerRefused) as refused:
        runner.driver.trigger()
    assert refused.value.reason is CheckpointFailureReason.INCOMPATIBLE_DEPLOY
    assert "declare uid='aggregate' on 'aggregate2'" in str(refused.value)
    # the admitted checkpoint is aborted with that reason; nothing registered, no task
    coordinator = runner.driver.coordinator
    aborted = coordinator.get_outcome(2)
    assert aborted is not None and aborted.status is CheckpointStatus.ABORTED
    assert aborted.reason is CheckpointFailureReason.INCOMPATIBLE_DEPLOY
    assert coordinator.stored_spec() == spec_before
    assert coordinator.acks(2) == {}
    assert coordinator.head.get().checkpoint_id == 1
    # the old code goes on from checkpoint 1, exactly once
    d.deploy(build("aggregate"))
    completed(d.runner.run_epoch())
    same(d.state("aggregate"), d.reference())


def test_a_removed_state_is_refused_then_allowed_by_drop_state(
    deploys: Callable[[], Deploys],
) -> None:
    d = deploys()
    d.deploy(build(states={"totals": TOTALS, "extra": TOTALS}))
    completed(d.epoch())
    runner = d.deploy(build(states={"totals": TOTALS}))
    d.add_input()
    with pytest.raises(TriggerRefused) as refused:
        runner.driver.trigger()
    assert "state 'extra' (uid 'extra') of operator 'aggregate' would be dropped" in str(
        refused.value
    )
    assert "pipeline.drop_state('aggregate', 'extra')" in str(refused.value)
    allowed = build(states={"totals": TOTALS})
    allowed.drop_state("aggregate", "extra")
    d.deploy(allowed)
    plan = d.runner.driver.plan()
    dropped = [e for e in plan.entries if e.verdict is Verdict.DROPPED]
    assert [(e.uid, e.refused) for e in dropped] == [("extra", False)]
    completed(d.runner.run_epoch())
    same(d.state("aggregate"), d.reference())


def test_an_added_operator_and_sink_start_empty(deploys: Callable[[], Deploys]) -> None:
    d = deploys()
    d.deploy(build())
    completed(d.epoch())
    completed(d.epoch())
    d.deploy(build(extra_operator=True, extra_sink=True))
    plan = d.runner.driver.plan()
    new = {(e.kind, e.uid) for e in plan.entries if e.verdict is Verdict.NEW}
    assert {("operator", "late"), ("sink", "late_out"), ("state", "totals")} <= new
    completed(d.epoch())
    same(d.state("aggregate"), d.reference())
    # the new operator read only the input newer than its base (no backfill)
    newest_only = d.reference(files=3).merge(d.reference(files=2), on="user", how="left")
    expected = pd.DataFrame(
        {
            "user": newest_only["user"],
            "n": newest_only["n_x"] - newest_only["n_y"].fillna(0),
            "total": newest_only["total_x"] - newest_only["total_y"].fillna(0),
        }
    )
    expected = expected[expected["n"] > 0].reset_index(drop=True)
    same(d.state("late"), expected)


def test_a_restore_into_code_that_drops_state_needs_the_allowance(
    deploys: Callable[[], Deploys],
) -> None:
    d = deploys()
    d.deploy(build(states={"totals": TOTALS, "extra": TOTALS}))
    completed(d.epoch())
    completed(d.epoch())
    runner = d.deploy(build(states={"totals": TOTALS}))
    with pytest.raises(DeployRefused, match="--allow-non-restored-state"):
        restore_checkpoint(runner.driver, 1)
    assert runner.driver.coordinator.head.get().checkpoint_id == 2  # nothing moved
    restore_checkpoint(runner.driver, 1, allow_non_restored_state=True)
    # the first trigger after it is on checkpoint 1, allowed by the restore
    completed(d.epoch())
    same(d.state("aggregate"), d.reference())  # files 1 and 2 read once, after file 0
