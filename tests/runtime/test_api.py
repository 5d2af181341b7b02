"""The authoring API turns declarations into the protocol's graph, and refuses bad ones."""

from __future__ import annotations

import pyarrow as pa
import pytest

from batchpoint.errors import ConfigError, PipelineSpecError
from batchpoint.protocol.layout import TaskId
from batchpoint.runtime.api import Pipeline
from batchpoint.runtime.loader import load_pipeline
from demo.payments import build_pipeline

SCHEMA = pa.schema([pa.field("k", pa.string()), pa.field("v", pa.int64())])


def test_payments_spec_has_the_expected_tasks_in_topological_order() -> None:
    spec = build_pipeline(parallelism=3).spec()
    assert spec.expected_tasks() == (
        TaskId("dedup", 0), TaskId("dedup", 1), TaskId("dedup", 2),
        TaskId("balances", 0), TaskId("balances", 1), TaskId("balances", 2),
        TaskId("balances_table", 0), TaskId("alerts", 0),
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
        load_pipeline("demo.payments:nothing")
    assert load_pipeline("demo.payments:pipeline").name == "payments"
    assert load_pipeline("demo.payments:build_pipeline").name == "payments"


def test_schemas_may_be_ddl_strings_or_spark_struct_types() -> None:
    import pyarrow as pa
    from pyspark.sql import types as T

    p = Pipeline("typed")
    p.source(
        "events",
        root="src",
        schema="event_id STRING NOT NULL, amount DECIMAL(12, 2), ts TIMESTAMP, n BIGINT",
    )
    assert p.sources["events"].schema == pa.schema(
        [
            pa.field("event_id", pa.string(), nullable=False),
            pa.field("amount", pa.decimal128(12, 2)),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("n", pa.int64()),
        ]
    )
    struct = T.StructType(
        [T.StructField("event_id", T.StringType(), False), T.StructField("n", T.LongType())]
    )

    def dedup(ctx: object) -> None:
        return None

    p.operator(inputs=["events"], key=["event_id"], states={"seen": struct})(dedup)  # type: ignore[arg-type]
    assert p.operators["dedup"].states["seen"].field("n").type == pa.int64()


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("id ARRAY<STRING>", "cannot read"),
        ("id VARIANT", "not a simple Spark type"),
        ("id STRING, id BIGINT", "names a column twice"),
        (" , ", "names no column"),
        (42, "not int"),
    ],
)
def test_a_schema_that_cannot_be_read_is_a_clear_error(schema: object, message: str) -> None:
    with pytest.raises(PipelineSpecError, match=message):
        Pipeline("typed").source("events", root="src", schema=schema)  # type: ignore[arg-type]


def test_two_sinks_cannot_share_a_table() -> None:
    p = Pipeline("tabled")
    p.source("events", root="src", schema="id STRING")
    p.sink("a", inputs=["events"], key=["id"], table="ns.t")
    with pytest.raises(PipelineSpecError, match="is already the table of sink 'a'"):
        p.sink("b", inputs=["events"], key=["id"], table="ns.t")
    with pytest.raises(PipelineSpecError, match=r"namespace\.table"):
        p.sink("c", inputs=["events"], key=["id"], table="t")


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"upstream": "ledger", "sink": "out", "root": "in"},
            r"source 'moves': give one of root \(files\), table or upstream \(a pipeline\)",
        ),
        ({"upstream": "ledger"}, "source 'moves': upstream= and sink= go together"),
        ({"sink": "out", "root": "in"}, "source 'moves': upstream= and sink= go together"),
        ({"upstream": "reports", "sink": "out"}, "source 'moves': a pipeline cannot read its own"),
        (
            {"upstream": "ledger", "sink": "out", "schema": "k STRING, _row_kind STRING"},
            "source 'moves': '_row_kind' is the row kind a pipeline source adds; leave it out",
        ),
    ],
)
def test_a_pipeline_source_is_declared_with_upstream_and_sink_only(
    given: dict[str, str], message: str
) -> None:
    p = Pipeline("reports")
    with pytest.raises(PipelineSpecError, match=message):
        p.source("moves", **{"schema": "k STRING", **given})  # type: ignore[arg-type]
    assert "moves" not in p.sources


def test_a_pipeline_source_names_a_valid_pipeline_and_sink() -> None:
    p = Pipeline("reports")
    with pytest.raises(ConfigError, match="source 'moves': upstream pipeline name 'bad name'"):
        p.source("moves", upstream="bad name", sink="out", schema="k STRING")
    with pytest.raises(ConfigError, match="source 'moves': upstream pipeline 'ledger': sink"):
        p.source("moves", upstream="ledger", sink="out/x", schema="k STRING")
    declared = p.source("moves", upstream="ledger", sink="out", schema="k STRING")
    assert declared.format == "pipeline" and declared.root == ""


def test_a_pipeline_module_that_fails_is_one_line_naming_where(tmp_path, monkeypatch) -> None:
    """A reviewer's finding: a module that raised on import (or a SyntaxError, or a
    factory that raised) gave the CLI a traceback and exit 1; now one ConfigError line,
    exit 2, that still says the user's file and line."""
    (tmp_path / "raises_on_import.py").write_text("x = 1\nraise RuntimeError('boom')\n")
    (tmp_path / "bad_syntax.py").write_text("def broken(:\n    pass\n")
    (tmp_path / "bad_factory.py").write_text("def pipeline():\n    return 1 / 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cases = {
        "raises_on_import:pipeline": "importing it failed: RuntimeError: boom (at ",
        "bad_syntax:pipeline": "importing it failed: SyntaxError: ",
        "bad_factory:pipeline": "calling it failed: ZeroDivisionError: division by zero (at ",
    }
    for reference, said in cases.items():
        with pytest.raises(ConfigError) as caught:
            load_pipeline(reference)
        message = str(caught.value)
        assert message.startswith(f"pipeline reference {reference!r}: "), message
        assert said in message, message
        module = reference.split(":")[0]
        line = 2 if module != "bad_syntax" else 1
        assert f"{tmp_path / module}.py:{line})" in message, message
