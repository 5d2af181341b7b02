"""`batchpoint savepoint bootstrap`: bad input is refused with a clear message (exit 2)
before Spark starts or anything is written. The bootstrap itself is ops/bootstrap.py's,
tested through Spark in tests/ops/test_bootstrap.py."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from batchpoint.cli.savepoint import state_files
from batchpoint.errors import BatchpointError
from batchpoint.ops.bootstrap import bootstrap_location
from batchpoint.settings import Settings


def test_state_arguments_are_parsed_and_checked() -> None:
    assert state_files(["aggregate.totals=a.parquet", "aggregate.seen = b.parquet"]) == {
        "aggregate": {"totals": "a.parquet", "seen": "b.parquet"}
    }
    for bad in ("aggregate=a.parquet", "aggregate.totals", ".totals=a.parquet", "a.b="):
        with pytest.raises(BatchpointError, match=r"OPERATOR\.STATE=FILE\.parquet"):
            state_files([bad])
    with pytest.raises(BatchpointError, match="given twice"):
        state_files(["a.b=x.parquet", "a.b=y.parquet"])
    with pytest.raises(BatchpointError, match="at least one --state"):
        state_files(None)


def test_bootstrap_refuses_bad_input_before_anything_runs(cli, root, tmp_path: Path) -> None:
    target = "savepoints/boot"
    no_target = cli("savepoint", "bootstrap", "--state", "aggregate.totals=x.parquet")
    assert no_target.code == 2 and "needs the TARGET folder" in no_target.err
    no_state = cli("savepoint", "bootstrap", target)
    assert no_state.code == 2 and "at least one --state" in no_state.err
    missing = tmp_path / "missing.parquet"
    absent = cli("savepoint", "bootstrap", target, "--state", f"aggregate.totals={missing}")
    assert absent.code == 2 and f"no such Parquet file: {missing}" in absent.err
    assert "Traceback" not in absent.err
    bad = cli("savepoint", "bootstrap", "--target", target, "--state", "aggregate=x.parquet")
    assert bad.code == 2 and "OPERATOR.STATE=FILE.parquet" in bad.err
    not_parquet = tmp_path / "totals.parquet"  # a reviewer's: a Java trace, exit 1
    not_parquet.write_text("account_id,total\na,1\n")
    wrong = cli("savepoint", "bootstrap", target, "--state", f"aggregate.totals={not_parquet}")
    assert wrong.code == 2 and "Traceback" not in wrong.err, wrong.err
    assert f"--state aggregate.totals: {not_parquet} is not a readable Parquet file" in wrong.err
    assert "starting Spark" not in wrong.err


def test_bootstrap_writes_only_under_the_configured_savepoint_roots(
    cli, root, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reviewer's finding (invariant 13): bootstrap confined its target to the target's
    own `savepoints/` folder, not to BATCHPOINT_SAVEPOINT_ROOTS, so a folder under the
    configured root was refused and one under the storage root's savepoints/ (not a
    configured root) was accepted. Refused now before Spark starts."""
    configured = tmp_path / "configured"
    monkeypatch.setenv("BATCHPOINT_SAVEPOINT_ROOTS", configured.as_uri())
    monkeypatch.setenv("BATCHPOINT_PIPELINE_REF", "demo.payments:pipeline")
    totals = tmp_path / "totals.parquet"
    pq.write_table(pa.table({"account_id": ["a"]}), totals)
    outside = cli("savepoint", "bootstrap", "savepoints/boot", "--state", f"balances.b={totals}")
    assert outside.code == 2 and "outside the savepoint roots" in outside.err, outside.err
    assert "starting Spark" not in outside.err
    inside = bootstrap_location((configured / "boot").as_uri(), Settings.from_env(), None, None)
    assert inside.uri == (configured / "boot").resolve().as_uri()
