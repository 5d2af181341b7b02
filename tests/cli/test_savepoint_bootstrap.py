"""`batchpoint savepoint bootstrap`: bad input is refused with a clear message (exit 2)
before Spark starts or anything is written. The bootstrap itself is ops/bootstrap.py's,
tested through Spark in tests/ops/test_bootstrap.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchpoint.cli.savepoint import state_files
from batchpoint.errors import BatchpointError


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
