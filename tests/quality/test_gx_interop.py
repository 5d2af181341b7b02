"""Great Expectations interop: a suite saved through a GX 1.x context (file-backed, as a
GX user keeps one) is what the gate runs, loaded as GX saved it. No Spark: GX is real,
its data is a pandas DataFrame."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from batchpoint.errors import ConfigError
from batchpoint.quality.suites import PipelineQuality, StateQuality, SuiteRef, suite_from_json
from batchpoint.quality.validation import load_suite
from demo.payments import pipeline as payments


def _saved_by_gx(root: Path, *, rendered: bool = True) -> tuple[Any, Path]:
    """A suite added and saved through a file-backed GX context's own API, with what
    GX writes beside the expectations: ids, meta, notes (and rendered content)."""
    import great_expectations as gx

    context = gx.get_context(mode="file", project_root_dir=root)
    suite = context.suites.add(gx.ExpectationSuite(name="balances_gx", notes=["kept by GX"]))
    suite.add_expectation(
        gx.expectations.ExpectColumnValuesToNotBeNull(
            column="account_id", notes="a null key has no key group", meta={"owner": "payments"}
        )
    )
    suite.add_expectation(
        gx.expectations.ExpectColumnValuesToBeBetween(column="event_count", min_value=1)
    )
    if rendered:  # rendered content, as GX leaves it in the file once it has rendered
        suite.render()
    suite.save()
    return context.suites.get("balances_gx"), root / "gx" / "expectations"


@pytest.mark.parametrize("rendered", [False, True], ids=["plain", "rendered"])
def test_a_suite_saved_by_a_gx_context_loads_as_gx_saved_it(tmp_path: Path, rendered: bool) -> None:
    saved, directory = _saved_by_gx(tmp_path, rendered=rendered)
    body = json.loads((directory / "balances_gx.json").read_text())
    assert body["id"] and all(e["id"] for e in body["expectations"])
    assert all(bool(e.get("rendered_content")) == rendered for e in body["expectations"])

    loaded = SuiteRef("balances_gx", directory).load()

    assert loaded == saved  # GX's own equality: name, expectations, parameters, meta
    assert loaded.id == saved.id and loaded.notes == ["kept by GX"]
    assert [e.id for e in loaded.expectations] == [e["id"] for e in body["expectations"]]
    first = loaded.expectations[0]
    assert (first.notes, first.meta) == ("a null key has no key group", {"owner": "payments"})
    if rendered:
        assert "never be null" in str(first.rendered_content[0].value)

    # The gate's loader (as QualityGate.prepare builds suites, no Spark) takes it too,
    # checked against the state's columns.
    quality = PipelineQuality(
        states=(StateQuality("balances", "balances", suite="balances_gx"),),
        suites_dir=directory,
    )
    gated = load_suite(payments, quality, quality.states[0], ())
    assert gated is not None and gated.suite == saved

    # and it judges data as GX would: a null key and a zero count fail
    import great_expectations as gx

    batch = (
        gx.get_context(mode="ephemeral")
        .data_sources.add_pandas("p")
        .add_dataframe_asset("balances")
        .add_batch_definition_whole_dataframe("whole")
    )
    clean = pd.DataFrame({"account_id": ["a", "b"], "event_count": [1, 2]})
    bad = pd.DataFrame({"account_id": ["a", None], "event_count": [1, 0]})
    assert batch.get_batch(batch_parameters={"dataframe": clean}).validate(loaded).success
    failed = batch.get_batch(batch_parameters={"dataframe": bad}).validate(loaded)
    assert [r.success for r in failed.results] == [False, False]


def test_an_expectation_gx_cannot_build_in_a_gx_saved_suite_is_refused(tmp_path: Path) -> None:
    _, directory = _saved_by_gx(tmp_path)
    body = json.loads((directory / "balances_gx.json").read_text())
    body["expectations"][1]["type"] = "expect_column_values_to_be_betwen"
    with pytest.raises(ConfigError, match=r"expectation 1 \(expect_column_values_to_be_betwen\)"):
        suite_from_json(body, "edited")
    body["expectations"][1] = ["not", "an", "object"]
    with pytest.raises(ConfigError, match=r"expectation 1 \(\?\)"):
        suite_from_json(body, "edited")
    body["expectations"] = body["expectations"][:1]
    body["id"] = "not-a-uuid"
    with pytest.raises(ConfigError, match=r"quality suite edited is not a GX suite.*id.*UUID"):
        suite_from_json(body, "edited")
