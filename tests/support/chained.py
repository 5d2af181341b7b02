"""Pipelines chained through their sinks, as the chain tests drive them: `ledger` folds
generated events into per-account totals (a snapshot sink, accounts that reach zero
are dropped, so its changes include deletions) and passes the events on (an append
sink); `reports` reads both as pipeline sources and keeps per-region totals and
per-account volumes. The pandas reference is computed from what the ledger published
as of the upstream checkpoint a reports checkpoint read up to. A third link, `trends`,
reads the per-region totals `reports` publishes (`Chain.on(..., trends=True)`)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from batchpoint.ops.local_epoch import EpochResult, LocalEpochRunner
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.sinks import read_sink_table
from batchpoint.runtime.api import OperatorContext, Pipeline
from batchpoint.sources.upstream import UpstreamPosition
from batchpoint.storage import StoreRef
from support.clock import FakeClock

EVENTS = "event_id STRING NOT NULL, account STRING NOT NULL, amount BIGINT NOT NULL"
TOTALS = "account STRING NOT NULL, total BIGINT NOT NULL, events BIGINT NOT NULL"
SOURCE_ROOT = "sources/ledger"


def ledger_pipeline() -> Pipeline:
    p = Pipeline("ledger", max_parallelism=16)
    p.source("events", root=SOURCE_ROOT, format="jsonl", schema=EVENTS, key=["event_id"])

    @p.operator(inputs=["events"], key=["account"], states={"totals": TOTALS}, parallelism=2)
    def totals(ctx: OperatorContext) -> Any:
        from pyspark.sql import functions as F

        new = (
            ctx.input("events")
            .groupBy("account")
            .agg(F.sum("amount").alias("total"), F.count("*").alias("events"))
        )
        merged = (
            ctx.state("totals").unionByName(new).groupBy("account")
            .agg(F.sum("total").alias("total"), F.sum("events").alias("events"))
            .where(F.col("total") != 0)  # a settled account leaves: a deletion downstream
        )  # fmt: skip
        ctx.set_state("totals", merged)
        return merged

    @p.operator(inputs=["events"], key=["account"])
    def accepted(ctx: OperatorContext) -> Any:
        return ctx.input("events")

    p.sink("totals_out", inputs=["totals"], key=["account"], mode="snapshot", parallelism=2)
    p.sink("movements", inputs=["accepted"], key=["account"], mode="append")
    return p


def reports_pipeline() -> Pipeline:
    p = Pipeline("reports", max_parallelism=16)
    p.source("balances", upstream="ledger", sink="totals_out", schema=TOTALS, key=["account"])
    p.source("moves", upstream="ledger", sink="movements", schema=EVENTS)

    @p.operator(
        inputs=["balances"],
        key=["region"],
        states={"regions": "region STRING NOT NULL, total BIGINT, accounts BIGINT"},
    )
    def regions(ctx: OperatorContext) -> Any:
        from pyspark.sql import functions as F

        sign = F.when(F.col("_row_kind").isin("+I", "+U"), 1).otherwise(-1)
        delta = (
            ctx.input("balances").withColumn("region", F.substring("account", 1, 1))
            .groupBy("region")
            .agg(F.sum(sign * F.col("total")).alias("total"), F.sum(sign).alias("accounts"))
        )  # fmt: skip
        merged = (
            ctx.state("regions").unionByName(delta).groupBy("region")
            .agg(F.sum("total").alias("total"), F.sum("accounts").alias("accounts"))
            .where(F.col("accounts") != 0)
        )  # fmt: skip
        ctx.set_state("regions", merged)
        return merged

    @p.operator(
        inputs=["moves"],
        key=["account"],
        states={"volumes": "account STRING NOT NULL, moved BIGINT, moves BIGINT"},
    )
    def volumes(ctx: OperatorContext) -> Any:
        from pyspark.sql import functions as F

        assert ctx.input("moves").where(F.col("_row_kind") != "+I").isEmpty()
        new = (
            ctx.input("moves")
            .groupBy("account")
            .agg(F.sum(F.abs("amount")).alias("moved"), F.count("*").alias("moves"))
        )
        merged = (
            ctx.state("volumes").unionByName(new).groupBy("account")
            .agg(F.sum("moved").alias("moved"), F.sum("moves").alias("moves"))
        )  # fmt: skip
        ctx.set_state("volumes", merged)
        return merged

    p.sink("by_region", inputs=["regions"], key=["region"], mode="snapshot")
    p.sink("by_account", inputs=["volumes"], key=["account"], mode="snapshot")
    return p


REGIONS = "region STRING NOT NULL, total BIGINT, accounts BIGINT"


def trends_pipeline() -> Pipeline:
    """A third link: `trends` reads the per-region totals `reports` publishes (a
    snapshot sink, so as changes) and keeps their overall sum and the number of regions."""
    p = Pipeline("trends", max_parallelism=16)
    p.source("regions", upstream="reports", sink="by_region", schema=REGIONS, key=["region"])

    @p.operator(
        inputs=["regions"],
        key=["scope"],
        states={"overall": "scope STRING NOT NULL, total BIGINT, regions BIGINT"},
    )
    def overall(ctx: OperatorContext) -> Any:
        from pyspark.sql import functions as F

        sign = F.when(F.col("_row_kind").isin("+I", "+U"), 1).otherwise(-1)
        delta = ctx.input("regions").select(
            F.lit("all").alias("scope"),
            (sign * F.col("total")).alias("total"),
            sign.alias("regions"),
        )
        merged = (
            ctx.state("overall").unionByName(delta).groupBy("scope")
            .agg(F.sum("total").alias("total"), F.sum("regions").alias("regions"))
        )  # fmt: skip
        ctx.set_state("overall", merged)
        return merged

    p.sink("overall_out", inputs=["overall"], key=["scope"], mode="snapshot")
    return p


@dataclass
class Chain:
    """The pipelines on one store (trends only when asked for), each with its own epoch
    runner, and one clock."""

    store_ref: StoreRef
    ledger: LocalEpochRunner
    reports: LocalEpochRunner
    clock: FakeClock
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    batches: int = 0
    trends: LocalEpochRunner | None = None  # the third link, when asked for

    @classmethod
    def on(cls, spark: Any, store_ref: StoreRef, *, trends: bool = False) -> Chain:
        clock = FakeClock()
        config = CheckpointConfig(skip_idle=False, num_retained=20)
        return cls(
            store_ref,
            LocalEpochRunner(ledger_pipeline(), store_ref, spark, config, clock=clock),
            LocalEpochRunner(reports_pipeline(), store_ref, spark, config, clock=clock),
            clock,
            trends=(
                LocalEpochRunner(trends_pipeline(), store_ref, spark, config, clock=clock)
                if trends
                else None
            ),
        )

    def add_events(self, n: int, *, settle: int = 0) -> None:
        """`n` random events over accounts a0..c5, then `settle` events that bring
        accounts with a published total to zero (their rows leave the ledger's sink)."""
        rows = [
            {
                "event_id": f"e{self.batches}-{i}",
                "account": f"{self.rng.choice('abc')}{self.rng.randrange(6)}",
                "amount": self.rng.randrange(1, 50),
            }
            for i in range(n)
        ]
        if settle:
            manifest = self.ledger.driver.sinks.manifest("totals_out")
            if manifest is not None and manifest.current is not None:
                now = self.published("totals_out", manifest.current)
                for j, row in enumerate(now.head(settle).itertuples()):
                    event_id = f"s{self.batches}-{j}"
                    rows.append({"event_id": event_id, "account": row.account,
                                 "amount": -int(row.total)})  # fmt: skip
        body = "".join(json.dumps(r) + "\n" for r in rows).encode()
        self.store_ref.open().put(f"{SOURCE_ROOT}/p0/batch-{self.batches:05d}.jsonl", body)
        self.batches += 1

    def epoch(self, runner: LocalEpochRunner) -> int:
        self.clock.advance(1)
        result: EpochResult = runner.run_epoch()
        assert result.outcome is not None and result.outcome.completed is not None, result
        return result.outcome.checkpoint_id

    def published(self, sink: str, as_of: int, pipeline: str = "ledger") -> pd.DataFrame:
        table = read_sink_table(self.store_ref.open(), pipeline, sink, as_of)
        return table.to_pandas()

    def upstream_read(self, checkpoint_id: int, source: str) -> int | None:
        """The ledger checkpoint a reports checkpoint read `source` up to."""
        outcome = self.reports.driver.coordinator.get_outcome(checkpoint_id)
        assert outcome is not None
        return UpstreamPosition.of(outcome.pending.barrier[source]).checkpoint_id

    def expected(self, ledger_checkpoint: int) -> tuple[pd.DataFrame, pd.DataFrame]:
        """What reports must hold having read the ledger up to `ledger_checkpoint`."""
        totals = self.published("totals_out", ledger_checkpoint)
        totals["region"] = totals["account"].str[0]
        regions = totals.groupby("region", as_index=False).agg(
            total=("total", "sum"), accounts=("account", "count")
        )
        moves = self.published("movements", ledger_checkpoint)
        moves["moved"] = moves["amount"].abs()
        volumes = moves.groupby("account", as_index=False).agg(
            moved=("moved", "sum"), moves=("event_id", "count")
        )
        return _sorted(regions), _sorted(volumes)

    def actual(self, reports_checkpoint: int) -> tuple[pd.DataFrame, pd.DataFrame]:
        regions = self.published("by_region", reports_checkpoint, "reports")
        volumes = self.published("by_account", reports_checkpoint, "reports")
        return (
            _sorted(regions[["region", "total", "accounts"]]),
            _sorted(volumes[["account", "moved", "moves"]]),
        )

    def assert_trends_exactly_once(self, trends_checkpoint: int) -> int:
        """Trends as of `trends_checkpoint` sums what reports published as of the
        checkpoint it read up to; returns that reports checkpoint."""
        assert self.trends is not None
        outcome = self.trends.driver.coordinator.get_outcome(trends_checkpoint)
        assert outcome is not None
        read = UpstreamPosition.of(outcome.pending.barrier["regions"]).checkpoint_id
        assert read is not None
        regions = self.published("by_region", read, "reports")
        got = self.published("overall_out", trends_checkpoint, "trends")
        want = [int(regions["total"].sum()), len(regions)]
        assert got[["total", "regions"]].values.tolist() == [want], (got, want)
        return read

    def assert_exactly_once(self, reports_checkpoint: int) -> int:
        """Reports as of `reports_checkpoint` equal the reference over what it read;
        returns the ledger checkpoint it read up to."""
        read = self.upstream_read(reports_checkpoint, "balances")
        assert read == self.upstream_read(reports_checkpoint, "moves")
        assert read is not None
        want, got = self.expected(read), self.actual(reports_checkpoint)
        for expected, actual in zip(want, got, strict=True):
            pd.testing.assert_frame_equal(actual, expected, check_dtype=False)
        return read


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(frame.columns[:1]), ignore_index=True)


def refuse_reports(candidate: Any) -> Any:
    """A restore gate (BATCHPOINT_QUALITY_GATE=support.chained:refuse_reports) that
    passes every candidate but those of `reports`: a cascade down the chain is refused."""
    from batchpoint.runtime.restore_gate import GateResult

    if candidate.pipeline == "reports":
        return GateResult(False, f"refuse_reports refuses {candidate.description}")
    return GateResult(True, "refuse_reports passes it")
