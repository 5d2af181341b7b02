"""`batchpoint state show` reads an operator's state by its uid or by any name it had
(invariant 17): an operator and its state renamed with their uids kept are found under
the old names and the new ones, as of a checkpoint from before the rename and after it,
with the rows the pandas reference gives. Real epochs on local Spark and a local root;
the installed command on a pseudo-terminal shows a spinner while Spark starts and prints
plain text into a pipe."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from batchpoint.ops.local_epoch import LocalEpochRunner
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.runtime.api import OperatorContext, Pipeline, State
from batchpoint.storage import StoreRef
from support.cli import Cli, run_on
from support.clock import FakeClock

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SOURCE = "in/events"
EVENTS = pa.schema([pa.field("user", pa.string(), nullable=False), pa.field("amount", pa.int64())])
TOTALS = pa.schema([pa.field("user", pa.string(), nullable=False), pa.field("total", pa.int64())])
USERS = ("ann", "bob", "cy", "dee")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def fold(state: str) -> Any:
    def run(ctx: OperatorContext) -> Any:
        from pyspark.sql import functions as F

        delta = ctx.input().groupBy("user").agg(F.sum("amount").alias("total"))
        merged = (
            ctx.state(state).unionByName(delta).groupBy("user").agg(F.sum("total").alias("total"))
        )
        ctx.set_state(state, merged)
        return merged

    return run


def counts(operator: str, state: str) -> Pipeline:
    """One operator and its one state, named as given, their uids fixed."""
    pipeline = Pipeline("counts", max_parallelism=16)
    pipeline.source("events", root=SOURCE, schema=EVENTS, key=["user"])
    pipeline.operator(
        operator,
        inputs=["events"],
        key=["user"],
        states={state: State(TOTALS, uid="totals-uid")},
        parallelism=1,
        uid="aggregate-uid",
    )(fold(state))
    pipeline.sink("out", inputs=[operator], key=["user"], mode="snapshot")
    return pipeline


def reference(files: int) -> list[dict[str, Any]]:
    rows = [
        {"user": USERS[(epoch + i) % len(USERS)], "total": 10 * epoch + i}
        for epoch in range(files)
        for i in range(5)
    ]
    totals = pd.DataFrame(rows).groupby("user", as_index=False)["total"].sum()
    return totals.sort_values("user").to_dict("records")


@pytest.fixture
def renamed(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Checkpoints 1 and 2 by `aggregate`/`totals`, then the code renames both (uids
    kept) to `accounts`/`sums`, and checkpoint 3 is theirs."""
    root = (tmp_path / "store").as_uri()
    for name in ("BATCHPOINT_PIPELINE_REF", "BATCHPOINT_QUALITY_GATE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BATCHPOINT_ROOT", root)
    ref, clock = StoreRef.of(root), FakeClock()
    store = ref.open()
    for epoch, code in enumerate(
        [counts("aggregate", "totals")] * 2 + [counts("accounts", "sums")]
    ):
        rows = [
            {"user": USERS[(epoch + i) % len(USERS)], "amount": 10 * epoch + i} for i in range(5)
        ]
        store.put(f"{SOURCE}/p0/e{epoch:05d}.jsonl", "\n".join(map(json.dumps, rows)).encode())
        clock.advance(60)
        result = LocalEpochRunner(code, ref, spark, CheckpointConfig(), clock=clock).run_epoch()
        assert result.outcome is not None and result.outcome.completed is not None, result.message
    return root


@pytest.mark.parametrize(
    "names",
    [("aggregate", "totals"), ("accounts", "sums"), ("aggregate-uid", "totals-uid")],
    ids=["names-before", "names-after", "uids"],
)
@pytest.mark.parametrize("checkpoint", [1, 3], ids=["before-the-rename", "after-it"])
def test_a_renamed_operators_state_reads_by_any_name_it_had(
    renamed: str, capsys: pytest.CaptureFixture[str], names: tuple[str, str], checkpoint: int
) -> None:
    cli = Cli(capsys)
    operator, state = names
    run = cli(
        "--json", "state", "show", "counts", f"{operator}/{state}", "--checkpoint", str(checkpoint)
    )
    assert run.code == 0, run.out + run.err
    body = run.json
    assert body["rows"] == reference(checkpoint), body
    assert (body["operator_uid"], body["state_uid"]) == ("aggregate-uid", "totals-uid")
    # named as the checkpoint read recorded them
    recorded = ("aggregate", "totals") if checkpoint == 1 else ("accounts", "sums")
    assert (body["operator"], body["state"]) == recorded
    assert body["json_version"] == 2 and body["checkpoint_id"] == checkpoint


def test_a_name_no_checkpoint_had_is_a_clear_error(renamed: str, capsys) -> None:
    run = Cli(capsys)("state", "show", "counts", "nope", "totals", "--checkpoint", "1")
    assert run.code == 2 and "no stateful operator 'nope' (stateful: aggregate" in run.err
    run = Cli(capsys)("state", "show", "counts", "accounts/nope", "--checkpoint", "1")
    assert run.code == 2 and "has no state 'nope' (states: totals)" in run.err


def test_in_a_pipe_the_rows_alone_on_stdout(renamed: str, capsys) -> None:
    run = Cli(capsys)("state", "show", "counts", "accounts", "sums", "--checkpoint", "1")
    assert run.code == 0, run.err
    assert run.out.startswith("counts aggregate/totals as of checkpoint 1: 4 row(s)")
    assert "(asked for as accounts/sums)" in run.out.splitlines()[0]
    assert run.err == "reading aggregate/totals of checkpoint 1 with Spark\n"
    assert "\x1b" not in run.out + run.err


def test_on_a_terminal_a_spinner_shows_while_spark_starts(renamed: str) -> None:
    shown = run_on(
        ["state", "show", "counts", "aggregate/totals", "--checkpoint", "2"],
        renamed,
        tty=True,
        env={"SPARK_LOCAL_IP": "127.0.0.1"},
        timeout=600,
    )
    frames = ANSI.sub("", shown)
    # the spinner, the step it waits on and the time taken, then the result's table
    assert re.search(
        r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] reading aggregate/totals of checkpoint 2 with Spark +\d:\d\d:\d\d", frames
    ), frames
    assert "counts aggregate/totals as of checkpoint 2: 4 row(s)" in frames
