"""A small keyed pipeline to deploy again and again (issue 26): `clicks`, one source of
events (user, amount) and an operator `aggregate` keeping per user a count and a sum in
state `totals`, one file of 10 events per epoch. Each deploy builds the pipeline anew
with another declaration of the state or another parallelism, on the same store; the
pandas reference counts the events the newest checkpoint has read."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa

from batchpoint.ops.local_epoch import EpochResult, LocalEpochRunner
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.runtime.api import OperatorContext, Pipeline, State
from batchpoint.storage import StoreRef
from support.clock import FakeClock

EVENTS = pa.schema([pa.field("user", pa.string()), pa.field("amount", pa.int64())])
TOTALS_V1 = pa.schema(
    [pa.field("user", pa.string()), pa.field("n", pa.int32()), pa.field("total", pa.int64())]
)
USERS = 30
SOURCE_ROOT = "clicks"

Aggregate = Callable[[OperatorContext], Any]


def events_of(epoch: int) -> list[dict[str, Any]]:
    """Epoch `epoch`'s 10 events: a third of the users each epoch, so that a state
    changes by less than half of its rows and the checkpoints build changelogs."""
    return [
        {"user": f"u{(epoch * 7 + i * 3) % USERS:02d}", "amount": epoch * 100 + i}
        for i in range(10)
    ]


def counting(extra: Callable[[Any], Any] | None = None) -> Aggregate:
    """The operator: per user, `n` events and their `total`; every other column of the
    declared state carried over from the restored row (`extra` may set them)."""

    def aggregate(ctx: OperatorContext) -> Any:
        from pyspark.sql import functions as F

        state = ctx.state("totals")
        fresh = (
            ctx.input("events")
            .groupBy("user")
            .agg(F.count("*").alias("dn"), F.sum("amount").alias("dt"))
        )
        joined = state.join(fresh, "user", "full_outer")
        columns = []
        for f in state.schema.fields:
            if f.name == "n":
                value = F.coalesce(F.col("n"), F.lit(0)) + F.coalesce(F.col("dn"), F.lit(0))
            elif f.name == "total":
                value = F.coalesce(F.col("total"), F.lit(0)) + F.coalesce(F.col("dt"), F.lit(0))
            else:
                value = F.col(f.name)
            columns.append(value.cast(f.dataType).alias(f.name))
        new = joined.select(*columns)
        if extra is not None:
            new = extra(new)
        ctx.set_state("totals", new)
        return None

    return aggregate


@dataclass
class Deploys:
    """The store and clock that outlive every deploy, and the runner of the latest."""

    spark: Any
    store_ref: StoreRef
    clock: FakeClock = field(default_factory=FakeClock)
    runner: LocalEpochRunner | None = None
    states_seen: list[pd.DataFrame] = field(default_factory=list)

    def deploy(
        self,
        totals: pa.Schema | State = TOTALS_V1,
        *,
        fn: Aggregate | None = None,
        parallelism: int = 2,
        max_parallelism: int = 16,
        key: tuple[str, ...] = ("user",),
    ) -> Pipeline:
        pipeline = Pipeline("clicks", max_parallelism=max_parallelism)
        pipeline.source("events", root=SOURCE_ROOT, format="jsonl", schema=EVENTS)
        body = fn or counting()

        def aggregate(ctx: OperatorContext) -> Any:
            # What the function found restored, in the schema the code declares now.
            self.states_seen.append(ctx.state("totals").toPandas())
            return body(ctx)

        pipeline.operator(
            "aggregate",
            inputs=["events"],
            key=list(key),
            states={"totals": totals},
            parallelism=parallelism,
            max_parallelism=max_parallelism,
        )(aggregate)
        self.runner = LocalEpochRunner(
            pipeline, self.store_ref, self.spark, CheckpointConfig(), clock=self.clock
        )
        return pipeline

    def epoch(self, epoch: int) -> EpochResult:
        assert self.runner is not None, "deploy first"
        lines = "".join(json.dumps(e) + "\n" for e in events_of(epoch))
        self.store_ref.open().put(f"{SOURCE_ROOT}/p0/e{epoch:05d}.jsonl", lines.encode())
        self.clock.advance(1)
        result = self.runner.run_epoch()
        assert result.outcome is not None and result.outcome.completed is not None, result
        return result

    def state(self, checkpoint: int | None = None) -> pd.DataFrame:
        """The stored state `totals` at `checkpoint` (the head by default), by user."""
        return self.state_by("user", checkpoint)

    def state_by(self, column: str, checkpoint: int | None = None) -> pd.DataFrame:
        """The stored state `totals` at `checkpoint` (the head by default), by `column`."""
        from batchpoint.runtime.incremental import base_state_files
        from batchpoint.spark import keyed_io

        assert self.runner is not None
        coordinator = self.runner.driver.coordinator
        cid = checkpoint or coordinator.head.get().checkpoint_id
        files = base_state_files(coordinator.completed.get(cid), "aggregate", "totals")
        df = keyed_io.read_keyed(self.spark, self.store_ref, files).toPandas()
        return df.sort_values(column, ignore_index=True)


def reference(epochs: range | list[int]) -> pd.DataFrame:
    """Count and sum per user over the events of `epochs`, computed apart in pandas."""
    events = pd.DataFrame([e for n in epochs for e in events_of(n)])
    out = events.groupby("user", as_index=False).agg(n=("amount", "size"), total=("amount", "sum"))
    return out.sort_values("user", ignore_index=True)
