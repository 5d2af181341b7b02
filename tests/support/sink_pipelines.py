"""A small pipeline with a sink of each kind, for the sink identity tests (issue 36):
`sinks`, one source of events (user, amount), an operator `totals` keeping a count and a
sum per user, and sinks that append the events or publish the totals as a snapshot,
into a folder (the sink manifest) or also into an Iceberg table. Each deploy builds the
pipeline anew, the sinks under other names; the pandas reference is over every event
the newest checkpoint has read."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from batchpoint.ops.local_epoch import EpochResult, LocalEpochRunner
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.runtime.api import OperatorContext, Pipeline
from batchpoint.storage import StoreRef
from support.clock import FakeClock

PIPELINE = "sinks"
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


@dataclass(frozen=True)
class SinkDecl:
    """A sink as the first code declares it: `uid` is its name there, unless `name`."""

    uid: str
    mode: str  # "append" (the events) or "snapshot" (the totals)
    table: str | None = None
    name: str = ""

    @property
    def upstream(self) -> str:
        return "events" if self.mode == "append" else "totals"


FOLDER_SINKS = (SinkDecl("events_out", "append"), SinkDecl("totals_out", "snapshot"))
TABLE_SINKS = (
    SinkDecl("events_table", "append", "sinks.events"),
    SinkDecl("totals_table", "snapshot", "sinks.totals"),
)


def fold(ctx: OperatorContext) -> Any:
    """Count and sum this epoch's events per user into the state; the totals out."""
    from pyspark.sql import functions as F

    delta = ctx.input().groupBy("user").agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
    merged = (
        ctx.state("totals")
        .unionByName(delta)
        .groupBy("user")
        .agg(F.sum("n").alias("n"), F.sum("total").alias("total"))
    )
    ctx.set_state("totals", merged)
    return merged


def build(sinks: Iterable[SinkDecl], renamed: Mapping[str, str] | None = None) -> Pipeline:
    """The pipeline with `sinks`; `renamed` (uid -> name): those sinks under another
    name, their uid declared (the rename `batchpoint plan` calls `renamed`)."""
    pipeline = Pipeline(PIPELINE, max_parallelism=16)
    pipeline.source("events", root=SOURCE, schema=EVENTS, key=["user"])
    pipeline.operator(
        "totals", inputs=["events"], key=["user"], states={"totals": TOTALS}, parallelism=2
    )(fold)
    for s in sinks:
        name = (renamed or {}).get(s.uid) or s.name or s.uid
        pipeline.sink(
            name,
            inputs=[s.upstream],
            key=["user"],
            mode=s.mode,
            table=s.table,
            uid=s.uid if name != s.uid else None,
        )
    return pipeline


@dataclass
class SinkEpochs:
    """One store; each `deploy` is the pipeline's code as of that moment."""

    spark: Any
    ref: StoreRef
    catalog: str | None = None  # the tables' catalog (BATCHPOINT_TABLE_CATALOG)
    clock: FakeClock = field(default_factory=FakeClock)
    epochs: int = 0
    runner: LocalEpochRunner | None = None

    def __post_init__(self) -> None:
        self.store = self.ref.open()
        # epochs already on the store (a fixture's): their input files are there
        self.epochs = sum(1 for _ in self.store.list(SOURCE + "/"))

    def deploy(self, pipeline: Pipeline) -> LocalEpochRunner:
        self.runner = LocalEpochRunner(
            pipeline, self.ref, self.spark, CheckpointConfig(num_retained=2), clock=self.clock
        )
        return self.runner

    def epoch(self) -> int:
        """One more file of 10 events, and a completed epoch over it: its checkpoint id."""
        rows = [
            {"user": USERS[(self.epochs + i) % len(USERS)], "amount": 10 * self.epochs + i}
            for i in range(10)
        ]
        data = "\n".join(json.dumps(r) for r in rows).encode()
        self.store.put(f"{SOURCE}/p0/e{self.epochs:05d}.jsonl", data)
        self.epochs += 1
        self.clock.advance(60)
        assert self.runner is not None
        result: EpochResult = self.runner.run_epoch()
        assert result.outcome is not None, result.message
        assert result.outcome.status is CheckpointStatus.COMPLETED, result.message
        return result.checkpoint_id

    def events(self) -> pd.DataFrame:
        """Every event read so far, sorted: what an append sink publishes."""
        frames = []
        for i in range(self.epochs):
            data = self.store.get(f"{SOURCE}/p0/e{i:05d}.jsonl").data.decode()
            frames.append(pd.DataFrame([json.loads(line) for line in data.splitlines()]))
        return sort(pd.concat(frames))

    def totals(self) -> pd.DataFrame:
        """Count and sum per user over every event: what a snapshot sink publishes."""
        out = self.events().groupby("user").agg(n=("amount", "size"), total=("amount", "sum"))
        return sort(out.reset_index())

    def expected(self, mode: str) -> pd.DataFrame:
        return self.events() if mode == "append" else self.totals()


def sort(frame: pd.DataFrame | pa.Table) -> pd.DataFrame:
    """Rows in one order, columns as the reference has them, reserved columns out."""
    if isinstance(frame, pa.Table):
        frame = frame.to_pandas()
    columns = [c for c in ("user", "amount", "n", "total") if c in frame.columns]
    return frame[columns].sort_values(columns, ignore_index=True)


def same(got: pd.DataFrame | pa.Table, expected: pd.DataFrame, what: str) -> None:
    got = sort(got)
    assert len(got) == len(expected), f"{what}: {len(got)} rows, expected {len(expected)}"
    pd.testing.assert_frame_equal(got, expected, check_dtype=False, obj=what)


def copy_tree(folder: Path, ref: StoreRef) -> None:
    """Every file under `folder` into the store, at its relative path (a fixture's store
    laid out on either backend)."""
    store = ref.open()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        store.put(path.relative_to(folder).as_posix(), path.read_bytes())


#: Sinks whose uid is not their name: a release before issue 36 kept their manifests
#: under the name (tests/data/sinks-by-name.tar.gz).
NAMED_SINKS = (
    SinkDecl("events_log", "append", name="events_out"),
    SinkDecl("totals_snap", "snapshot", name="totals_out"),
)
