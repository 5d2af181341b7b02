"""The authoring API turns declarations into the protocol's graph, and refuses bad ones."""

from __future__ import annotations

import pyarrow as pa
import pytest

from batchpoint.demo.payments import build_pipeline
from batchpoint.errors import ConfigError, PipelineSpecError
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.loader import load_pipeline

SCHEMA = pa.schema([pa.field("k", pa.string()), pa.field("v", pa.int64())])


def test_payments_spec_has_the_expected_tasks_in_topological_order() -> None:
    spec = build_pipeline(parallelism=3).spec()
    assert spec.expected_tasks() == (
        "dedup#0", "dedup#1", "dedup#2",
        "balances#0", "balances#1", "balances#2",
        "balances_table#0", "alerts#0",
    )  # fmt: skip


def test_rescaling_overrides_parallelism_only_of_known_operators() -> None:
    pipeline = build_pipeline(parallelism=2)
    assert pipeline.spec({"dedup": 5}).operator("dedup").parallelism == 5
    with pytest.raises(PipelineSpecError, match="unknown"):
        pipeline.spec({"nope": 1})


def _noop(ctx):
    return ctx.input()


def test_unknown_input_is_named() -> None:
    p = Pipeline("p")
    p.source("src", root="in", schema=SCHEMA)
    p.operator("op", inputs=["missing"], key=["k"])(_noop)
    with pytest.raises(PipelineSpecError, match="operator 'op' reads from unknown input 'missing'"):
        p.spec()


def test_cycle_is_named() -> None:
    p = Pipeline("p")
    p.source("src", root="in", schema=SCHEMA)
    p.operator("a", inputs=["src", "b"], key=["k"])(_noop)
    p.operator("b", inputs=["a"], key=["k"])(_noop)
    with pytest.raises(PipelineSpecError, match=r"cycle: (a -> b -> a|b -> a -> b)"):
        p.spec()


def test_state_must_carry_the_key_columns() -> None:
    p = Pipeline("p")
    with pytest.raises(PipelineSpecError, match="state 's' lacks key columns"):
        p.operator("a", inputs=["src"], key=["id"], states={"s": SCHEMA})(_noop)


def test_duplicate_names_and_bad_names_are_refused() -> None:
    p = Pipeline("p")
    p.source("src", root="in", schema=SCHEMA)
    with pytest.raises(PipelineSpecError, match="declared twice"):
        p.source("src", root="in", schema=SCHEMA)
    with pytest.raises(ConfigError, match="name 'bad name'"):
        p.sink("bad name", inputs=["src"], key=["k"])


def test_loader_explains_bad_references() -> None:
    with pytest.raises(ConfigError, match=r"expected 'package\.module:name'"):
        load_pipeline("nocolon")
    with pytest.raises(ConfigError, match="cannot import"):
        load_pipeline("no.such.module:pipeline")
    with pytest.raises(ConfigError, match="has no 'nothing'"):
        load_pipeline("batchpoint.demo.payments:nothing")
    assert load_pipeline("batchpoint.demo.payments:pipeline").name == "payments"
    assert load_pipeline("batchpoint.demo.payments:build_pipeline").name == "payments"
