"""State and sink outputs as Spark DataFrames as of a checkpoint (read_state, read_sink)
and `batchpoint state show`, on a store with two completed payments checkpoints,
compared with the pandas reference at each checkpoint's barrier."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from batchpoint.errors import BatchpointError
from batchpoint.ops.dataframes import read_sink, read_state
from batchpoint.settings import Settings
from demo.payments import SOURCE_ROOT
from demo.payments_reference import PaymentsReference, compute_reference
from support.cli import Cli
from support.payments import PaymentsRun

pytestmark = [pytest.mark.spark]


@pytest.fixture
def run(good_run: PaymentsRun, monkeypatch: pytest.MonkeyPatch) -> PaymentsRun:
    monkeypatch.setenv("BATCHPOINT_ROOT", good_run.store_ref.uri)
    return good_run


def _reference(run: PaymentsRun, checkpoint_id: int) -> PaymentsReference:
    outcome = run.runner.driver.coordinator.get_outcome(checkpoint_id)
    assert outcome is not None
    return compute_reference(run.store, SOURCE_ROOT, upto=outcome.pending.barrier["events"])


def _frame(df: Any, columns: list[str]) -> pd.DataFrame:
    return df.toPandas().sort_values(columns[0], ignore_index=True)[columns]


def test_state_and_sinks_as_of_each_checkpoint_equal_the_reference(
    spark: Any, run: PaymentsRun
) -> None:
    settings = Settings.from_env()
    for cid in (1, 2):
        expected = _reference(run, cid)
        columns = list(expected.balances.columns)
        state = read_state(spark, "payments", "balances", "balances", cid, settings=settings)
        pd.testing.assert_frame_equal(_frame(state, columns), expected.balances, check_dtype=False)
        sink = read_sink(spark, "payments", "balances_table", cid, settings=settings)
        pd.testing.assert_frame_equal(_frame(sink, columns), expected.balances, check_dtype=False)
    latest = read_state(spark, "payments", "dedup", "seen", settings=settings)
    assert latest.count() == len(_reference(run, 2).seen_events)
    alerts = read_sink(spark, "payments", "alerts", settings=settings)
    assert alerts.columns == list(_reference(run, 2).alerts.columns)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nope", "seen", "latest"), "no stateful operator 'nope' (stateful: balances, dedup)"),
        (("dedup", "nope", "latest"), "has no state 'nope' (states: seen)"),
        (("dedup", "seen", 9), "checkpoint 9 of 'payments' does not exist"),
    ],
)
def test_a_wrong_name_or_checkpoint_is_a_clear_error(
    spark: Any, run: PaymentsRun, args: tuple[Any, ...], message: str
) -> None:
    with pytest.raises(BatchpointError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_state(spark, "payments", *args)


def test_state_show_prints_the_rows_of_a_key(
    spark: Any, run: PaymentsRun, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    expected = _reference(run, 1).balances
    account = expected["account_id"].iloc[3]
    cli = Cli(capsys)
    argv = ["state", "show", "payments", "balances", "balances", "--checkpoint", "1"]
    shown = cli(*argv, "--key", f"account_id={account}", "--json")
    assert shown.code == 0, shown.err
    want = expected[expected["account_id"] == account].to_dict("records")
    assert shown.json["rows"] == want and shown.json["total_rows"] == 1
    table = cli(*argv, "--limit", "3")
    assert table.code == 0 and f"{len(expected)} row(s)" in table.out
    assert f"... {len(expected) - 3} more" in table.out
    bad = cli(*argv, "--key", "balance")
    assert bad.code == 2 and "COLUMN=VALUE" in bad.err
