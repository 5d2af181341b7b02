"""bench_cost_curve's physical floor (issue 42) keeps the totals the other engines keep,
and its array check finds what a wrong state gets wrong: the bench's ratios to the
floor mean something only if both hold. Correctness on a tiny input, not a timing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))


@pytest.mark.spark
@pytest.mark.usefixtures("bench")
def test_the_floor_sums_every_epoch_into_the_expected_totals(spark: Any, tmp_path: Path) -> None:
    from bench_cost_curve import differences
    from curve_engines import FloorEngine, epoch_inputs
    from peer_data import Size, expected_arrays, expected_totals, write_epoch

    size, epochs = Size(keys=300, events=2_000, files=2), 3
    for epoch in range(epochs):
        epoch_inputs(tmp_path / "inputs", epoch).mkdir(parents=True)
        write_epoch(epoch_inputs(tmp_path / "inputs", epoch), size, epoch)
    floor = FloorEngine(spark, tmp_path / "inputs", tmp_path / "states")
    for _ in range(epochs):
        floor.epoch()

    final = floor.state(epochs - 1)
    rows = pq.read_table(final).to_pylist()
    assert {r["key"]: (r["count"], r["sum"]) for r in rows} == expected_totals(size, epochs)
    assert differences("floor", final, *expected_arrays(size, epochs)) == []


@pytest.mark.usefixtures("bench")
def test_the_array_check_counts_missing_extra_repeated_and_wrong_keys(tmp_path: Path) -> None:
    from bench_cost_curve import differences
    from peer_data import Size, expected_arrays, expected_totals

    size = Size(keys=50, events=400, files=1)
    expected = expected_totals(size, 2)
    keys = sorted(expected)
    rows = [(k, *expected[k]) for k in keys[1:]]  # the first key missing
    rows[0] = (rows[0][0], rows[0][1], rows[0][2] + 1)  # a wrong sum
    rows += [rows[1], ("k9999999", 1, 1)]  # a key twice, and one never generated
    table = pa.Table.from_pylist([dict(zip(("key", "count", "sum"), r, strict=True)) for r in rows])
    pq.write_table(table, tmp_path / "part-0.parquet")

    problems = differences("state", tmp_path, *expected_arrays(size, 2))

    assert problems == ["state: 1 keys missing, 1 extra, 1 twice, 1 with other totals"]
