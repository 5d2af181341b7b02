"""Eight deploys of the payments pipeline in a row (issue 26), through the real runtime:
Spark and SeaweedFS, one epoch of new input after each deploy, each epoch counted
exactly once against the pandas reference, and the deploy plan asserted before each
(driver.plan(); `batchpoint plan --json` through main() for the refused removal and
its allowed form). The versions are tests/support/payments_deploys.py."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from batchpoint.cli.main import main
from batchpoint.errors import TriggerRefused
from batchpoint.ops.local_epoch import LocalEpochRunner
from batchpoint.protocol.checkpoint import CheckpointFailureReason, CheckpointStatus
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.deploy_plan import DeployPlan, PlanEntry, Verdict
from batchpoint.protocol.sinks import read_sink_table
from batchpoint.runtime.incremental import base_state_files
from batchpoint.storage import StoreRef
from demo.payments import SOURCE_ROOT
from demo.payments_data import write_epoch_files
from demo.payments_reference import compute_reference, input_files, read_events
from support.clock import FakeClock
from support.payments import assert_sinks_match_reference
from support.payments_deploys import OUTPUT_COLUMNS, Version, allowed, build, versions

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.s3]

DATA = {"accounts": 20, "events_per_epoch": 50}
DEPLOYS = "support.payments_deploys"


class Deploys:
    """One store and clock; each `deploy` is the code of that moment."""

    def __init__(self, spark: Any, ref: StoreRef) -> None:
        self.spark, self.ref, self.store = spark, ref, ref.open()
        self.clock = FakeClock()
        self.epochs = 0
        self.runner: LocalEpochRunner | None = None

    def deploy(self, version: Version) -> DeployPlan:
        pipeline = build(version)
        self.runner = LocalEpochRunner(
            pipeline, self.ref, self.spark, CheckpointConfig(), clock=self.clock
        )
        return self.runner.driver.plan()

    @property
    def coordinator(self) -> Any:
        assert self.runner is not None
        return self.runner.driver.coordinator

    @property
    def head(self) -> int:
        return self.coordinator.head.get().checkpoint_id

    def add_input(self) -> None:
        write_epoch_files(self.store, SOURCE_ROOT, self.epochs, **DATA)
        self.epochs += 1

    def epoch(self) -> None:
        """New input, one checkpoint over it, and the exactly-once check."""
        self.add_input()
        self.clock.advance(60)
        assert self.runner is not None
        result = self.runner.run_epoch()
        assert result.outcome is not None, result.message
        assert result.outcome.status is CheckpointStatus.COMPLETED, result.message
        expected = assert_sinks_match_reference(self.store, self.coordinator, self.head)
        seen = self.state("dedup", "seen")
        assert sorted(seen["event_id"]) == sorted(expected.seen_events["event_id"])
        balances = self.state("balances", "balances")
        pd.testing.assert_frame_equal(
            balances[list(OUTPUT_COLUMNS)], expected.balances, check_dtype=False
        )

    def state(self, operator_uid: str, state_uid: str) -> pd.DataFrame:
        """The head's state, found by uids whatever the operator is called now."""
        from batchpoint.spark import keyed_io

        completed = self.coordinator.completed.get(self.head)
        files = base_state_files(completed, operator_uid, state_uid)
        frame = keyed_io.read_keyed(self.spark, self.ref, files).toPandas()
        key = frame.columns[0]
        return frame.sort_values(key, ignore_index=True)

    def new_events_since(self, checkpoint_id: int) -> pd.DataFrame:
        """The deduplicated events read after `checkpoint_id`, up to the head: what a
        column or state added by the deploy on that base has counted."""
        barrier = self.coordinator.get_outcome(self.head).pending.barrier["events"]
        before = self.coordinator.get_outcome(checkpoint_id).pending.barrier["events"]
        events = read_events(self.store, input_files(self.store, SOURCE_ROOT, barrier))
        first = events.drop_duplicates("event_id", keep="first")
        old = compute_reference(self.store, SOURCE_ROOT, upto=before).seen_events["event_id"]
        return first[~first["event_id"].isin(set(old))]


def entry(plan: DeployPlan, kind: str, uid: str) -> PlanEntry:
    found = [e for e in plan.entries if e.kind == kind and e.uid == uid]
    assert len(found) == 1, plan.render()
    return found[0]


def changed(plan: DeployPlan) -> set[tuple[str, str, str]]:
    """Every entry that is not `kept`, as (kind, uid, verdict)."""
    return {(e.kind, e.uid, e.verdict.value) for e in plan.entries if e.verdict is not Verdict.KEPT}


def plan_cli(reference: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    import json

    capsys.readouterr()
    code = main(["plan", "--pipeline-ref", f"{DEPLOYS}:{reference}", "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def cli_env(monkeypatch: pytest.MonkeyPatch, ref: StoreRef, options: dict[str, str]) -> None:
    for name in ("BATCHPOINT_PIPELINE_REF", "BATCHPOINT_QUALITY_GATE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BATCHPOINT_ROOT", ref.uri)
    for option, value in options.items():
        monkeypatch.setenv(f"BATCHPOINT_S3_{option.upper()}", value)


def assert_deposits(run: Deploys, since: int) -> None:
    """`deposits` counts the deposits read since the deploy that added it; a row
    stored before it and untouched since reads null."""
    new = run.new_events_since(since)
    counted = new.assign(d=new["amount"] > 0).groupby("account_id")["d"].sum()
    got = run.state("balances", "balances").set_index("account_id")["deposits"]
    expected = counted.reindex(got.index)  # an account with no new event: null
    pd.testing.assert_series_equal(
        got.astype("Float64"), expected.astype("Float64"), check_names=False
    )


def test_eight_deploys_in_a_row_keep_state_exactly_once(
    spark: Any,
    seaweed: Any,
    make_s3_store: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    options = seaweed.storage_options()
    ref = StoreRef.of(make_s3_store().uri, options)
    cli_env(monkeypatch, ref, options)
    migrations: list[list[str]] = []

    def to_double(old: Any) -> Any:
        from pyspark.sql import functions as F

        migrations.append(old.columns)
        return old.withColumn("balance", F.col("balance").cast("double"))

    v = versions(migrate=to_double)
    run = Deploys(spark, ref)
    run.deploy(v[0])
    run.epoch()
    run.epoch()

    # 1: `balances` renamed `accounts`, its uid kept: its state restored, not restarted
    plan = run.deploy(v[1])
    assert changed(plan) == {("operator", "balances", "renamed")}, plan.render()
    assert entry(plan, "operator", "balances").name == "accounts"
    run.epoch()

    # 2: a nullable column added to the state: the stored rows read null
    plan = run.deploy(v[2])
    assert changed(plan) == {("state", "balances", "migrated")}, plan.render()
    assert entry(plan, "state", "balances").detail == "added-nullable"
    deposits_since = run.head
    run.epoch()
    assert_deposits(run, deposits_since)

    # 3: that column widened int32 -> int64
    plan = run.deploy(v[3])
    assert entry(plan, "state", "balances").detail == "widened", plan.render()
    assert changed(plan) == {("state", "balances", "migrated")}
    run.epoch()
    assert_deposits(run, deposits_since)

    # 4: a state added: it starts empty and folds only what is read after its base
    plan = run.deploy(v[4])
    assert changed(plan) == {("state", "maxima", "new")}, plan.render()
    maxima_since = run.head
    run.epoch()
    new = run.new_events_since(maxima_since)
    expected = new.groupby("account_id", as_index=False)["amount"].max()
    got = run.state("balances", "maxima")
    assert list(got["account_id"]) == list(expected["account_id"])
    assert list(got["max_amount"]) == list(expected["amount"])

    # 5: the state removed: refused before any task, naming it; then declared dropped
    plan = run.deploy(v[5])
    removed = entry(plan, "state", "maxima")
    assert (removed.verdict, removed.refused) == (Verdict.DROPPED, True)
    code, body = plan_cli("state_removed", capsys)
    assert code == 3 and body["deployable"] is False
    assert any("pipeline.drop_state('balances', 'maxima')" in p for p in body["problems"])
    head = run.head
    run.add_input()
    with pytest.raises(TriggerRefused) as refused:
        run.runner.driver.trigger()
    assert refused.value.reason is CheckpointFailureReason.INCOMPATIBLE_DEPLOY
    assert "state 'maxima' (uid 'maxima') of operator 'accounts' would be dropped" in str(
        refused.value
    )
    assert run.head == head
    code, body = plan_cli("state_dropped", capsys)
    assert code == 0 and body["deployable"] is True
    maxima = [e for e in body["entries"] if e["kind"] == "state" and e["uid"] == "maxima"]
    assert [(e["verdict"], e["refused"]) for e in maxima] == [("dropped", False)]
    plan = run.deploy(allowed(v[5]))
    assert not entry(plan, "state", "maxima").refused and plan.deployable
    run.epoch()  # reads the refused trigger's input too, once

    # 6: parallelism 1 -> 2 in the code: rescaled by key group at this epoch
    plan = run.deploy(v[6])
    assert changed(plan) == {
        ("operator", "dedup", "rescaled"),
        ("operator", "balances", "rescaled"),
    }, plan.render()
    assert entry(plan, "operator", "balances").detail == "parallelism 1 -> 2, by key group"
    run.epoch()
    completed = run.coordinator.completed.get(run.head)
    assert sorted(str(a.task) for a in completed.acks if a.operator_uid == "balances") == [
        "accounts#0",
        "accounts#1",
    ]

    # 7: a sink added: publishes from its first epoch
    plan = run.deploy(v[7])
    assert changed(plan) == {("sink", "rich", "new")}, plan.render()
    run.epoch()
    assert_rich(run)

    # 8: `balance` becomes a double, which no rule migrates: migrate= runs once
    plan = run.deploy(v[8])
    assert changed(plan) == {("state", "balances", "user-migration")}, plan.render()
    assert "type-changed" in str(entry(plan, "state", "balances").schema), plan.render()
    run.epoch()
    assert len(migrations) == 1 and "balance" in migrations[0]
    types = run.state("balances", "balances").dtypes
    assert str(types["balance"]) == "float64"
    run.epoch()
    assert len(migrations) == 1, "migrate= ran again though the base has the new schema"
    assert_rich(run)
    assert_deposits(run, deposits_since)


def assert_rich(run: Deploys) -> None:
    balances = compute_reference(
        run.store,
        SOURCE_ROOT,
        upto=run.coordinator.get_outcome(run.head).pending.barrier["events"],
    ).balances
    expected = balances.loc[balances["balance"] > 0, ["account_id", "balance", "last_ts"]]
    got = read_sink_table(run.store, "payments", "rich").to_pandas()
    got = got.sort_values("account_id", ignore_index=True)[list(expected.columns)]
    pd.testing.assert_frame_equal(got, expected.reset_index(drop=True), check_dtype=False)
