"""The DAG file as Airflow's parser sees it: every DAG imports, with no import error and
no deprecation warning, only airflow.sdk APIs, nothing heavy at parse time, the settings
the factory promises; and a bad setting fails the import with a message naming it."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.python_source import parse_file

pytestmark = pytest.mark.airflow

PROJECT = Path(__file__).resolve().parents[2]
DAGS = PROJECT / "dags"

# Parsed in a fresh interpreter, so that the modules it leaves imported and the warnings
# it raises are the DAG file's alone (this test process has imported all sorts).
PROBE = textwrap.dedent(
    """
    import json, sys, warnings
    import airflow.sdk  # first: Airflow installs its warning hooks when imported
    from airflow.dag_processing.dagbag import DagBag
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bag = DagBag(dag_folder=sys.argv[1], safe_mode=False)
    deprecations = [str(w.message) for w in caught
                    if issubclass(w.category, (DeprecationWarning, FutureWarning))]
    def uris(condition):  # the assets of a data-aware schedule
        if hasattr(condition, "uri"):
            return [condition.uri]
        return [u for o in getattr(condition, "objects", ()) for u in uris(o)]
    dags = {}
    for dag_id, dag in bag.dags.items():
        dags[dag_id] = {
            "timetable": type(dag.timetable).__name__,
            "condition": type(getattr(dag.timetable, "asset_condition", None)).__name__,
            "assets": uris(getattr(dag.timetable, "asset_condition", None)),
            "delta": getattr(dag.timetable, "delta", None) and dag.timetable.delta.total_seconds(),
            "max_active_runs": dag.max_active_runs,
            "catchup": dag.catchup,
            "dagrun_timeout": dag.dagrun_timeout and dag.dagrun_timeout.total_seconds(),
            "params": sorted(dag.params.keys()),
            "doc_md": bool(dag.doc_md and len(dag.doc_md) > 200),
            "tasks": {t.task_id: {"upstream": sorted(t.upstream_task_ids),
                                  "trigger_rule": getattr(t.trigger_rule, "value", "")}
                      for t in dag.tasks},
        }
    heavy = sorted(m for m in ("pyspark", "great_expectations") if m in sys.modules)
    print(json.dumps({"errors": bag.import_errors, "captured": {k: list(v) for k, v in
                      bag.captured_warnings.items()}, "deprecations": deprecations,
                      "dags": dags, "heavy": heavy}))
    """
)


@pytest.fixture(scope="module")
def parsed(tmp_path_factory) -> dict:
    return parse(
        BATCHPOINT_ROOT=tmp_path_factory.mktemp("root").as_uri(),
        BATCHPOINT_PIPELINE_REF="demo.payments:pipeline",
        BATCHPOINT_CHECKPOINT_TIMEOUT="600",
        BATCHPOINT_MAX_CONCURRENT="2",
        BATCHPOINT_CHECKPOINT_INTERVAL="5m",
    )


@pytest.fixture(scope="module")
def chained(tmp_path_factory) -> dict:
    """Two pipelines, the second reading two sinks of the first, scheduled on them (their
    code in tests/support: on the probe's path, whatever the suite's own path is)."""
    tests = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH", "")) if p)
    return parse(
        PYTHONPATH=path,
        BATCHPOINT_ROOT=tmp_path_factory.mktemp("root").as_uri(),
        BATCHPOINT_PIPELINE_REF="support.chained:ledger_pipeline,support.chained:reports_pipeline",
        BATCHPOINT_CHECKPOINT_INTERVALS='{"reports": "upstream"}',
    )


def parse(**settings: str) -> dict:
    """The DAG folder as the probe reports it, parsed with `settings` only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHPOINT_")}
    # connect mode (the default) only names the server at parse time
    env.update(BATCHPOINT_SPARK_REMOTE="sc://127.0.0.1:15002", **settings)
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(DAGS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_dag_imports_without_errors_or_deprecations(parsed):
    assert parsed["errors"] == {}
    assert parsed["captured"] == {}
    assert parsed["deprecations"] == []
    assert sorted(parsed["dags"]) == [
        "payments_checkpoint",
        "payments_restore",
        "payments_savepoint",
    ]


def test_parsing_imports_neither_spark_nor_great_expectations(parsed):
    assert parsed["heavy"] == []


def test_the_checkpoint_dag_is_the_coordinator(parsed):
    dag = parsed["dags"]["payments_checkpoint"]
    assert dag["timetable"] == "DeltaTriggerTimetable" and dag["delta"] == 300
    assert dag["max_active_runs"] == 2 and dag["catchup"] is False
    assert dag["dagrun_timeout"] == 600 + 120  # checkpoint timeout + cleanup grace
    assert dag["doc_md"]
    tasks = dag["tasks"]
    assert tasks["operators.dedup"]["upstream"] == ["trigger"]
    assert tasks["operators.balances"]["upstream"] == ["operators.dedup"]
    assert tasks["operators.alerts"]["upstream"] == ["operators.balances"]
    assert tasks["wait_for_acks"]["upstream"] == ["trigger"]  # beside the operators
    assert tasks["finalize"]["upstream"] == ["wait_for_acks"]
    assert "audit" not in tasks  # BATCHPOINT_AUDIT is off by default
    assert tasks["cleanup"]["trigger_rule"] == "all_done"
    assert set(tasks["cleanup"]["upstream"]) == set(tasks) - {"cleanup"}


def test_the_manual_dags_have_their_forms(parsed):
    savepoint = parsed["dags"]["payments_savepoint"]
    restore = parsed["dags"]["payments_restore"]
    assert savepoint["timetable"] == "NullTimetable" and restore["timetable"] == "NullTimetable"
    assert savepoint["params"] == ["description", "stop_pipeline", "target"]
    assert restore["params"] == [
        "allow_non_restored_state",
        "cascade",
        "claim_mode",
        "confirm_ungated",
        "dry_run",
        "max_candidates",
        "parallelism",
        "quality_gate",
        "skip_suites",
        "source",
    ]
    assert savepoint["tasks"]["stop_pipeline"]["upstream"] == ["export_savepoint"]
    assert restore["tasks"]["restore"]["upstream"] == ["check"]
    assert savepoint["doc_md"] and restore["doc_md"]


def test_a_downstream_checkpoint_dag_is_scheduled_on_its_upstreams_sinks(chained):
    assert chained["errors"] == {} and chained["captured"] == {}
    assert chained["deprecations"] == [] and chained["heavy"] == []
    assert sorted(chained["dags"]) == [
        f"{p}_{kind}"
        for p in ("ledger", "reports")
        for kind in ("checkpoint", "restore", "savepoint")
    ]
    reports = chained["dags"]["reports_checkpoint"]
    assert (reports["timetable"], reports["condition"]) == ("AssetTriggeredTimetable", "AssetAny")
    assert reports["assets"] == [
        "x-batchpoint://ledger/sinks/totals_out",
        "x-batchpoint://ledger/sinks/movements",
    ]
    ledger = chained["dags"]["ledger_checkpoint"]
    assert ledger["timetable"] == "DeltaTriggerTimetable" and ledger["delta"] == 300


def _airflow_imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(parse_file(path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
    return [n for n in names if n == "airflow" or n.startswith("airflow.")]


def test_only_task_sdk_apis_are_used():
    # airflow.triggers.base: 3.3.2 has no trigger base in the SDK. The Amazon provider's
    # AwsBaseHook resolves storage credentials, and the OpenLineage provider's
    # OperatorLineage carries lineage (providers, not Airflow's core).
    allowed = (
        "airflow.sdk",
        "airflow.triggers.base",
        "airflow.providers.amazon.",
        "airflow.providers.openlineage.",
    )
    files = [*sorted((PROJECT / "include/batchpoint/airflow").glob("*.py")), *DAGS.glob("*.py")]
    used = {str(f.relative_to(PROJECT)): _airflow_imports(f) for f in files}
    # The UI plugin runs inside the API server and authenticates with its own security
    # dependencies, which only the server has (no SDK equivalent), and reads which DAGs
    # are paused from the server's database: those files alone.
    server_side = {
        "include/batchpoint/airflow/ui.py": ("airflow.api_fastapi.",),
        "include/batchpoint/airflow/ui_schedule.py": ("airflow.models.dag", "airflow.utils."),
        # the one place that imports Airflow 3.0's homes of names the SDK gained later
        "include/batchpoint/airflow/compat.py": ("airflow.",),
    }
    wrong = {
        f: [n for n in names if not n.startswith(allowed + server_side.get(f, ()))]
        for f, names in used.items()
    }
    assert {f: n for f, n in wrong.items() if n} == {}
    assert any(used.values())


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("BATCHPOINT_CHECKPOINT_INTERVAL", "every tuesday"),
        ("BATCHPOINT_CHECKPOINT_INTERVAL", "upstream"),  # the demo reads no pipeline
        ("BATCHPOINT_CHECKPOINT_INTERVALS", '{"nobody": "5m"}'),
        ("BATCHPOINT_CHECKPOINT_TIMEOUT", "-5"),
        ("BATCHPOINT_ROOT", "/no/scheme"),
        ("BATCHPOINT_PIPELINE_REF", "no.such.module:pipeline"),
        ("BATCHPOINT_SPARK_SUBMIT", "/nonexistent/spark-submit"),
        ("BATCHPOINT_AUDIT", "maybe"),
        ("BATCHPOINT_SPARK_MODE", "connect"),  # with no BATCHPOINT_SPARK_REMOTE
        ("BATCHPOINT_SPARK_REMOTE", "spark:15002"),
    ],
)
def test_a_bad_setting_fails_the_import_naming_it(variable, value, monkeypatch, tmp_path):

    monkeypatch.setenv("BATCHPOINT_ROOT", tmp_path.as_uri())
    monkeypatch.setenv("BATCHPOINT_PIPELINE_REF", "demo.payments:pipeline")
    monkeypatch.setenv("BATCHPOINT_SPARK_MODE", "submit")
    monkeypatch.setenv(variable, value)
    assert_one_import_error_naming(variable)


def assert_one_import_error_naming(*variables: str) -> str:
    """The DAG folder parses to no DAG and one import error whose last line is the DAG
    entry's ConfigError naming `variables`; returns that line."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS), safe_mode=False)
    assert bag.dag_ids == []
    (error,) = bag.import_errors.values()
    last_line = error.strip().splitlines()[-1]
    assert last_line.startswith("batchpoint.errors.ConfigError: batchpoint DAGs not loaded: ")
    for variable in variables:
        assert variable in last_line
    # raised by the DAG entry itself, not a walk through the factory's frames
    frames = [line for line in error.splitlines() if "include/batchpoint/" in line]
    assert all("include/batchpoint/airflow/dags.py" in line for line in frames), frames
    return last_line


@pytest.mark.parametrize(
    "missing",
    [
        ("BATCHPOINT_PIPELINE_REF",),
        ("BATCHPOINT_ROOT",),
        ("BATCHPOINT_PIPELINE_REF", "BATCHPOINT_ROOT"),
    ],
)
def test_without_a_pipeline_or_a_root_no_dag_is_built(missing, monkeypatch, tmp_path):
    # Each container of a deployment would otherwise build the demo pipeline on a store
    # of its own (file://<its cwd>/.batchpoint).
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BATCHPOINT_ROOT", (tmp_path / "root").as_uri())
    monkeypatch.setenv("BATCHPOINT_PIPELINE_REF", "demo.payments:pipeline")
    monkeypatch.setenv("BATCHPOINT_SPARK_MODE", "submit")
    for variable in missing:
        monkeypatch.delenv(variable)
    line = assert_one_import_error_naming(*missing)
    assert f": {' and '.join(missing)} not set;" in line  # exactly those
    assert list(tmp_path.iterdir()) == []  # nothing made, in the cwd or anywhere
