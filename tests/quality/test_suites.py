"""The demo's suites, as GX 1.x suites validated on Spark DataFrames, catch corrupt
state: null or duplicate keys and negative counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from batchpoint.errors import ConfigError
from batchpoint.quality.checks import sample_key_groups
from batchpoint.quality.suites import SuiteRef, suite_from_json
from batchpoint.quality.validation import GxValidator, findings_from_result
from demo.payments_quality import SUITES_DIR

BALANCES = "account_id string, balance bigint, event_count bigint, last_ts bigint"


@pytest.mark.spark
def test_demo_suites_catch_null_and_duplicate_keys_and_negative_counts(spark: Any) -> None:
    validator = GxValidator()
    suite = SuiteRef("payments_balances", SUITES_DIR).load()
    clean = spark.createDataFrame([("a", 5, 1, 10), ("b", -3, 2, 20)], BALANCES)
    result = validator.validate("balances/balances", clean, suite)
    assert result["success"], findings_from_result("b", "s", result)

    corrupt = spark.createDataFrame(
        [("a", 5, 1, 10), ("a", 7, 1, 11), (None, 1, 1, 12), ("c", 1, -4, 13)], BALANCES
    )
    result = validator.validate("balances/balances", corrupt, suite)
    findings = findings_from_result("balances/balances", "payments_balances", result)
    failed = {
        (f.problem.split("(")[0], f.problem.split("on column ")[1].split()[0]) for f in findings
    }
    assert failed == {
        ("expect_column_values_to_not_be_null", "'account_id'"),
        ("expect_column_values_to_be_unique", "'account_id'"),
        ("expect_column_values_to_be_between", "'event_count'"),
    }
    assert {f.check for f in findings} == {"suite:payments_balances"}
    assert any("2 of 4 values unexpected (e.g. ['a', 'a'])" in f.problem for f in findings)
    seen = SuiteRef("payments_seen", SUITES_DIR).load()
    ids = spark.createDataFrame([("e1",), ("e1",), ("e2",)], "event_id string")
    (finding,) = findings_from_result(
        "dedup/seen", "payments_seen", validator.validate("s", ids, seen)
    )
    assert "2 of 3 values unexpected" in finding.problem


def test_invalid_suites_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"not found.*payments_balances"):
        SuiteRef("nope", SUITES_DIR).load()
    with pytest.raises(ConfigError, match="expect_column_values_to_be_uniq"):
        suite_from_json(
            {
                "name": "x",
                "expectations": [
                    {"type": "expect_column_values_to_be_uniq", "kwargs": {"column": "a"}}
                ],
            },
            "inline",
        )
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not readable JSON"):
        SuiteRef("bad", tmp_path).load()


def test_sampled_key_groups_are_spread_and_stable() -> None:
    assert sample_key_groups(128, 4) == [0, 32, 64, 96]
    assert sample_key_groups(4, 10) == [0, 1, 2, 3]
    assert sample_key_groups(128, 32) == sample_key_groups(128, 32)
    assert json.dumps(sample_key_groups(7, 3)) == "[0, 2, 4]"
