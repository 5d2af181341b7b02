"""OpenLineage: the checkpoint DAG's operator tasks and finalize report what they read
and wrote through the OpenLineage provider's operator hooks. The events are captured with
the provider's own file transport while the demo's checkpoint DAG runs under dag.test()
(on a local store with the fake spark-submit, whose graph is checked to connect the
sources to the sinks through every operator; on SeaweedFS with real Spark jobs, where
each dataset's name is checked against what the run left on storage), and the facet
builder is checked on both stores."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from batchpoint.sources.barrier import SourceBarrier
from demo.payments import SOURCE_ROOT, build_pipeline
from demo.payments_data import PAYMENTS_SCHEMA, write_epoch_files

pytestmark = [pytest.mark.airflow]

Events = Callable[[], list[dict[str, Any]]]
SCHEMAS = (
    Path(__file__).resolve().parents[2] / "docs" / "openlineage" / "batchpoint-facets.schema.json"
)
FAKE_SPARK_SUBMIT = Path(__file__).resolve().parent / "fake_spark" / "spark-submit"
#: A facet schema of OpenLineage's published spec: the core document's definitions, or
#: a facet's own document (its definition named as the file is).
SPEC_URL = re.compile(
    r"https://openlineage\.io/spec/(2-\d+-\d+/OpenLineage\.json#/\$defs/\w+"
    r"|facets/1-\d+-\d+/(?P<file>\w+)\.json#/\$defs/(?P<defn>\w+))"
)


def _clear_provider_config() -> None:
    """The provider reads its configuration once per process (functools.cache)."""
    from airflow.providers.openlineage import conf

    for value in vars(conf).values():
        if callable(getattr(value, "cache_clear", None)):
            value.cache_clear()


@pytest.fixture
def lineage_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Events]:
    """The provider's file transport, and its listener among the task runner's: the
    plugin registers it when the process starts with a transport configured, and this
    process started without one."""
    from airflow.providers.openlineage.plugins.listener import OpenLineageListener
    from airflow.sdk.listener import get_listener_manager

    log = tmp_path / "openlineage.jsonl"
    transport = {"type": "file", "log_file_path": str(log), "append": True}
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps(transport))
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__NAMESPACE", "batchpoint-tests")
    # Emitted from a thread of the task's process, not a fork of it: a fork of this
    # process (its storage clients' threads and locks) may hang until the timeout.
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD", "True")
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT", "120")
    _clear_provider_config()
    manager = get_listener_manager()
    # One listener, on this test's transport: the plugin's own (registered if this
    # process loaded plugins with a transport configured) steps aside meanwhile.
    others = [p for p in manager.pm.get_plugins() if isinstance(p, OpenLineageListener)]
    for other in others:
        manager.pm.unregister(other)
    listener = OpenLineageListener()
    manager.add_listener(listener)

    def events() -> list[dict[str, Any]]:
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]

    yield events
    manager.pm.unregister(listener)
    for other in others:
        manager.add_listener(other)
    monkeypatch.undo()
    _clear_provider_config()


def _named(datasets: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(d["namespace"], d["name"]) for d in datasets}


def _event(events: list[dict[str, Any]], kind: str, task: str) -> dict[str, Any]:
    found = [
        e
        for e in events
        if e["eventType"] == kind and e["job"]["name"] == f"payments_checkpoint.{task}"
    ]
    assert len(found) == 1, [(e["eventType"], e["job"]["name"]) for e in events]
    return found[0]


def _key(root: str, name: str) -> str:
    """The store key of a dataset name under the S3 root `root`."""
    prefix = urlparse(root).path.strip("/")
    assert name.startswith(prefix + "/"), (name, prefix)
    return name.removeprefix(prefix + "/")


@pytest.fixture
def local_demo(airflow_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The demo's DAGs on a local store with one epoch of input; the operator jobs are
    the fake spark-submit, acking files named as the real job's streams."""
    from batchpoint.storage import StoreRef

    for name in [n for n in os.environ if n.startswith("BATCHPOINT_")]:
        monkeypatch.delenv(name)
    ref = StoreRef.of((tmp_path / "store").as_uri())
    settings = {
        "ROOT": ref.uri,
        "PIPELINE_REF": "demo.payments:pipeline",
        "SPARK_MODE": "submit",
        "SPARK_SUBMIT": str(FAKE_SPARK_SUBMIT),
        "SPARK_MASTER": "local[1]",
        "ACK_SENSOR_MODE": "reschedule",
        "ACK_POLL_INTERVAL": "0.3",
        "TASK_RETRIES": "0",
        "CHECKPOINT_TIMEOUT": "120",
        "CHECKPOINT_INTERVAL": "none",
    }
    for name, value in settings.items():
        monkeypatch.setenv(f"BATCHPOINT_{name}", value)
    monkeypatch.setenv("FAKE_JOB_STREAMS", "1")
    write_epoch_files(ref.open(), SOURCE_ROOT, 0, accounts=5, events_per_epoch=20)
    return ref


def _graph(events: list[dict[str, Any]]) -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    """Jobs and datasets as nodes, each input an edge into its job and each output an
    edge out of it (directed: node -> the nodes it feeds)."""
    edges: dict[tuple[str, ...], set[tuple[str, ...]]] = defaultdict(set)
    for event in events:
        job = ("job", event["job"]["name"])
        for d in event["inputs"]:
            edges[("dataset", d["namespace"], d["name"])].add(job)
        for d in event["outputs"]:
            edges[job].add(("dataset", d["namespace"], d["name"]))
    return edges


def _reach(edges: dict[Any, set[Any]], start: set[Any]) -> set[Any]:
    seen, todo = set(start), list(start)
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _components(edges: dict[Any, set[Any]]) -> list[set[Any]]:
    both: dict[Any, set[Any]] = defaultdict(set)
    for node, targets in edges.items():
        for target in targets:
            both[node].add(target)
            both[target].add(node)
    left, out = set(both), []
    while left:
        part = _reach(both, {left.pop()})
        left -= part
        out.append(part)
    return out


def _schema_urls(facets: dict[str, Any]) -> list[str]:
    return [f["_schemaURL"] for f in facets.values()]


def test_the_demos_events_form_one_graph_from_its_sources_through_each_operator_to_its_sinks(
    local_demo, lineage_events
):
    from batchpoint.airflow.config import AirflowDeployment
    from batchpoint.airflow.dag_factory import load_dags
    from batchpoint.protocol.coordinator import CheckpointCoordinator

    run = load_dags(AirflowDeployment.from_env())["payments_checkpoint"].test()
    assert run.state == "success", {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    done = [e for e in lineage_events() if e["eventType"] == "COMPLETE"]
    reporting = {e["job"]["name"]: e for e in done if e.get("inputs") or e.get("outputs")}
    tasks = ["dedup", "balances", "balances_table", "alerts"]
    jobs = [f"payments_checkpoint.operators.{t}" for t in tasks]
    assert set(reporting) == {*jobs, "payments_checkpoint.finalize"}
    root = local_demo.uri.removeprefix("file://")
    pipeline_dir = f"{root}/pipelines/payments"
    sources = {("dataset", "file", f"{root}/{SOURCE_ROOT}")}
    sinks = {("dataset", "file", f"{pipeline_dir}/sinks/{s}") for s in ("balances_table", "alerts")}

    # the operators alone connect: each reads and writes, one component, every sink
    # reached from the source through every operator (finalize joins nothing new)
    operators = [reporting[j] for j in jobs]
    assert all(e["inputs"] and e["outputs"] for e in operators)
    graph = _graph(operators)
    assert len(_components(graph)) == 1
    reached = _reach(graph, sources)
    assert sinks <= reached and {("job", j) for j in jobs} <= reached
    assert len(_components(_graph(list(reporting.values())))) == 1
    dedup = reporting[jobs[0]]
    assert {d["name"] for d in dedup["outputs"]} == {
        f"{pipeline_dir}/channels/dedup/balances",
        f"{pipeline_dir}/states/dedup/seen",
    }

    # facets: the source's declared schema; each output as of checkpoint 1, with the
    # rows and bytes its files were acked with
    (source,) = dedup["inputs"]
    assert [f["name"] for f in source["facets"]["schema"]["fields"]] == PAYMENTS_SCHEMA.names
    coordinator = CheckpointCoordinator(local_demo.open(), "payments")
    streams: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for ack in coordinator.acks(1).values():
        for handle in ack.handles:
            for name in handle.meta.get("consumers") or [handle.name]:
                streams[(ack.task.operator, name)][0] += handle.rows
                streams[(ack.task.operator, name)][1] += handle.size
    expected = {
        "channels/dedup/balances": streams[("dedup", "balances")],
        "states/dedup/seen": streams[("dedup", "state-seen")],
        "channels/balances/balances_table": streams[("balances", "balances_table")],
        "channels/balances/alerts": streams[("balances", "alerts")],
        "states/balances/balances": streams[("balances", "state-balances")],
        "sinks/balances_table": streams[("balances_table", "sink")],
        "sinks/alerts": streams[("alerts", "sink")],
    }
    outputs = {
        d["name"].removeprefix(pipeline_dir + "/"): d
        for e in [*operators, reporting["payments_checkpoint.finalize"]]
        for d in e["outputs"]
    }
    assert set(outputs) == set(expected)
    for name, (rows, size) in expected.items():
        stats = outputs[name]["outputFacets"]["outputStatistics"]
        assert (stats["rowCount"], stats["size"]) == (rows, size), name
        assert rows > 0 and outputs[name]["facets"]["version"]["datasetVersion"] == "1"
    assert "schema" in outputs["states/balances/balances"]["facets"]

    # every facet batchpoint sets names a schema of OpenLineage's published spec
    urls = [
        url
        for e in reporting.values()
        for d in [*e["inputs"], *e["outputs"]]
        for url in _schema_urls({**d["facets"], **d.get("outputFacets", {})})
    ]
    urls.append(reporting[jobs[0]]["run"]["facets"]["batchpoint_checkpoint"]["_schemaURL"])
    assert urls
    for url in urls:
        match = SPEC_URL.fullmatch(url)
        assert match and match["file"] == match["defn"], url


@pytest.mark.s3
@pytest.mark.spark
@pytest.mark.slow
def test_the_checkpoint_dags_tasks_report_sources_sinks_and_tables(
    bp, write_epoch, lineage_events, connect_server, tmp_path
):
    """The demo's pipeline with its balances as an Iceberg table, on real Spark jobs
    (the table is made from the Parquet files they stage)."""
    bp.connect(connect_server)
    bp.set(
        pipeline_ref="demo.payments:table_pipeline",
        table_catalog=f"sqlite:///{tmp_path / 'catalog.db'}",
        checkpoint_timeout=1800,
        ack_poll_interval=1,
    )
    write_epoch(0)
    run, states = bp.run("payments_checkpoint")
    assert run.state == "success", states
    events = lineage_events()
    bucket = f"s3://{urlparse(bp.root).netloc}"
    prefix = urlparse(bp.root).path.strip("/")
    source = (bucket, f"{prefix}/{SOURCE_ROOT}")
    sinks = {
        (bucket, f"{prefix}/pipelines/payments/sinks/balances_table"),
        (bucket, f"{prefix}/pipelines/payments/sinks/alerts"),
    }
    table = (bucket, f"{prefix}/tables/payments/balances")

    # finalize: every source in (with the barrier it read up to), every sink and table out
    finalize = _event(events, "COMPLETE", "finalize")
    assert _named(finalize["inputs"]) == {source}
    assert _named(finalize["outputs"]) == sinks | {table}
    pending = bp.driver().coordinator.get_outcome(1).pending
    read = finalize["inputs"][0]["facets"]["batchpoint_barrier"]["partitions"]
    assert read == SourceBarrier.coerce(pending.barrier["events"]).counts()
    assert sum(read.values()) == len(list(bp.store.list(SOURCE_ROOT + "/")))
    facet = finalize["run"]["facets"]["batchpoint_checkpoint"]
    assert SPEC_URL.fullmatch(facet["_schemaURL"]), facet["_schemaURL"]
    assert (facet["pipeline"], facet["checkpointId"], facet["checkpointType"]) == (
        "payments",
        1,
        "checkpoint",
    )
    (table_out,) = [d for d in finalize["outputs"] if (d["namespace"], d["name"]) == table]
    (symlink,) = table_out["facets"]["symlinks"]["identifiers"]
    assert (symlink["name"], symlink["type"]) == ("payments.balances", "TABLE")
    # ... as the snapshot that published the checkpoint
    from batchpoint.protocol.sink_keys import SinkRef
    from batchpoint.tables.service import sink_table
    from demo.payments import table_pipeline

    binding = table_pipeline.sinks["balances_table"].table
    (commit,) = sink_table(bp.store, "payments", SinkRef("balances_table"), binding).history()
    assert commit.checkpoint_id == 1
    assert table_out["facets"]["version"]["datasetVersion"] == str(commit.snapshot_id)

    # each name is where the run's data is: the sinks' manifests, the table's metadata
    for _, name in sinks:
        assert bp.store.exists(_key(bp.root, name) + "/manifest.json"), name
    assert list(bp.store.list(_key(bp.root, table[1]) + "/metadata/"))

    # an operator task: its own inputs and outputs (the rows the real job wrote), and
    # its checkpoint
    channel = (bucket, f"{prefix}/pipelines/payments/channels/dedup/balances")
    dedup = _event(events, "COMPLETE", "operators.dedup")
    assert _named(dedup["inputs"]) == {source}
    assert _named(dedup["outputs"]) == {
        channel,
        (bucket, f"{prefix}/pipelines/payments/states/dedup/seen"),
    }
    stats = {d["name"]: d["outputFacets"]["outputStatistics"] for d in dedup["outputs"]}
    acks = bp.driver().coordinator.acks(1).values()
    rows = sum(
        h.rows
        for a in acks
        if a.task.operator == "dedup"
        for h in a.handles
        if h.name.startswith("channel-")
    )
    assert stats[channel[1]]["rowCount"] == rows > 0
    facet = dedup["run"]["facets"]["batchpoint_checkpoint"]
    assert (facet["operator"], facet["checkpointId"]) == ("dedup", 1)
    sink_task = _event(events, "COMPLETE", "operators.balances_table")
    assert _named(sink_task["inputs"]) == {
        (bucket, f"{prefix}/pipelines/payments/channels/balances/balances_table")
    }
    assert _named(sink_task["outputs"]) == {
        (bucket, f"{prefix}/pipelines/payments/sinks/balances_table"),
        table,
    }
    # ... already known when it starts
    assert _named(_event(events, "START", "operators.dedup")["inputs"]) == {source}


@pytest.mark.parametrize(
    ("root", "namespace", "path"),
    [
        ("file:///data/bp", "file", "/data/bp"),
        ("s3://landing/bp/prod", "s3://landing", "bp/prod"),
    ],
)
def test_the_facet_builder_names_datasets_as_openlineage_does(root, namespace, path):
    from batchpoint.airflow.lineage import checkpoint_lineage

    pipeline = build_pipeline(balances_table="payments.balances")
    pipeline.source(
        "ledger",
        table="finance.ledger",
        schema="account_id STRING, amount DOUBLE",
    )
    pipeline.source(
        "landing",
        root="s3://other-bucket/in/payments/",
        schema="account_id STRING",
    )
    pipeline.source("fees", table="finance.fees", table_format="delta", schema="account_id STRING")
    checkpoint = {
        "checkpoint_id": 7,
        "type": "savepoint",
        "base_checkpoint_id": 5,
        "barrier": {
            "events": {"2024-01-02": {"offset": 3, "last": "c.jsonl"}, "2024-01-01": 4},
            "ledger": {"snapshots": {"offset": 2, "last": "8812345"}},
            "fees": {"versions": {"offset": 4, "last": "3"}},
        },
    }
    lineage = checkpoint_lineage(pipeline, root, operator=None, checkpoint=checkpoint)

    inputs = {(d.namespace, d.name): d for d in lineage.inputs}
    assert set(inputs) == {
        (namespace, f"{path}/{SOURCE_ROOT}"),
        (namespace, f"{path}/tables/finance/ledger"),
        (namespace, f"{path}/delta/finance/fees"),
        ("s3://other-bucket", "in/payments"),
    }
    assert inputs[(namespace, f"{path}/delta/finance/fees")].facets["version"].datasetVersion == "3"
    files = inputs[(namespace, f"{path}/{SOURCE_ROOT}")]
    assert files.facets["batchpoint_barrier"].partitions == {"2024-01-01": 4, "2024-01-02": 3}
    ledger = inputs[(namespace, f"{path}/tables/finance/ledger")]
    assert ledger.facets["version"].datasetVersion == "8812345"
    assert ledger.facets["symlinks"].identifiers[0].name == "finance.ledger"
    assert {(d.namespace, d.name) for d in lineage.outputs} == {
        (namespace, f"{path}/pipelines/payments/sinks/balances_table"),
        (namespace, f"{path}/pipelines/payments/sinks/alerts"),
        (namespace, f"{path}/tables/payments/balances"),
    }
    facet = lineage.run_facets["batchpoint_checkpoint"]
    assert (facet.checkpointId, facet.checkpointType, facet.baseCheckpointId) == (7, "savepoint", 5)
    versions = {d.name: d.facets.get("version") for d in lineage.outputs}
    assert versions[f"{path}/pipelines/payments/sinks/alerts"].datasetVersion == "7"
    assert versions[f"{path}/tables/payments/balances"] is None  # no snapshot known
    published = checkpoint_lineage(
        pipeline, root, operator=None, checkpoint=checkpoint, table_snapshots={"balances_table": 42}
    )
    versions = {(d.name, d.facets["version"].datasetVersion) for d in published.outputs}
    assert (f"{path}/tables/payments/balances", "42") in versions  # the table's snapshot
    assert SPEC_URL.fullmatch(facet._schemaURL), facet._schemaURL

    # one operator: the sources it reads; its channel to its consumer and its state,
    # without statistics while its acks are not known
    dedup = checkpoint_lineage(pipeline, root, operator="dedup", checkpoint=None)
    assert [(d.namespace, d.name) for d in dedup.inputs] == [(namespace, f"{path}/{SOURCE_ROOT}")]
    assert [(d.namespace, d.name) for d in dedup.outputs] == [
        (namespace, f"{path}/pipelines/payments/channels/dedup/balances"),
        (namespace, f"{path}/pipelines/payments/states/dedup/seen"),
    ]
    assert all(not d.outputFacets for d in dedup.outputs)
    assert dedup.outputs[1].facets["schema"].fields[0].name == "event_id"
    assert dedup.run_facets["batchpoint_checkpoint"].operator == "dedup"


def test_the_demo_input_is_where_a_local_stores_source_dataset_points(tmp_path):
    """On a local store the name is the folder the source's files are in."""
    from batchpoint.airflow.lineage import checkpoint_lineage
    from batchpoint.storage import StoreRef

    ref = StoreRef.of((tmp_path / "store").as_uri())
    written = write_epoch_files(ref.open(), SOURCE_ROOT, 0, accounts=3, events_per_epoch=10)
    lineage = checkpoint_lineage(build_pipeline(), ref.uri, operator="dedup", checkpoint=None)
    (source,) = lineage.inputs
    assert source.namespace == "file"
    found = {f"{SOURCE_ROOT}/{p.relative_to(source.name)}" for p in Path(source.name).rglob("*")}
    assert written and set(written) <= found


def test_the_custom_facets_are_what_their_published_schemas_say():
    import attr
    import jsonschema
    from openlineage.client.serde import Serde

    from batchpoint.airflow.lineage_facets import CheckpointRunFacet, SourceBarrierInputFacet

    schemas = json.loads(SCHEMAS.read_text())["$defs"]
    facets = [
        CheckpointRunFacet(pipeline="payments", checkpointId=3, operator="dedup"),
        SourceBarrierInputFacet(partitions={"2024-01-01": 4}),
    ]
    for facet in facets:
        declared = schemas[type(facet).__name__]
        # what the facet extends is what its _schemaURL names: OpenLineage's spec
        assert declared["allOf"][0]["$ref"] == facet._schemaURL
        own = declared["allOf"][1]
        jsonschema.validate(json.loads(Serde.to_json(facet)), own)
        fields = {f.name for f in attr.fields(type(facet)) if not f.name.startswith("_")}
        assert set(own["properties"]) == fields, type(facet).__name__


def test_the_operators_need_no_openlineage_provider():
    """Lineage is imported inside the hooks only: without OpenLineage (its client, and
    the provider's extractors; the provider's package itself stays importable, as Airflow
    discovers every installed provider) the operator modules import and the DAGs build."""
    blocked = (
        "import sys\nfor name in ('openlineage', 'airflow.providers.openlineage.extractors'):\n"
    )
    blocked += "    sys.modules[name] = None\n"
    code = blocked + (
        "from batchpoint.airflow.operators.checkpoint import FinalizeCheckpointOperator\n"
        "from batchpoint.airflow.dag_factory import build_pipeline_dags\n"
        "from batchpoint.airflow.config import AirflowDeployment\n"
        "from demo.payments import pipeline\n"
        "ref = 'demo.payments:pipeline'\n"
        "dags = build_pipeline_dags(pipeline, ref, AirflowDeployment.from_env())\n"
        "task = dags['payments_checkpoint'].get_task('finalize')\n"
        "assert callable(task.get_openlineage_facets_on_complete)\n"
        "try:\n"
        "    task.get_openlineage_facets_on_start()\n"
        "except ImportError:\n"
        "    print('lineage needs the provider')\n"
    )
    env = {
        **os.environ,
        "BATCHPOINT_ROOT": "file:///tmp/bp-lineage",
        "BATCHPOINT_SPARK_MODE": "local",
    }
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("lineage needs the provider"), done.stdout


@pytest.mark.parametrize(("root", "namespace", "path"), [("s3://lake/bp", "s3://lake", "bp")])
def test_a_pipeline_source_is_its_upstream_sinks_own_dataset(root, namespace, path):
    """A downstream's input is the dataset the upstream's finalize reports as output,
    versioned by the upstream checkpoint read up to: the edge between the two jobs."""
    from batchpoint.airflow.lineage import checkpoint_lineage
    from support.chained import ledger_pipeline, reports_pipeline

    checkpoint = {
        "checkpoint_id": 4,
        "type": "checkpoint",
        "base_checkpoint_id": 3,
        "barrier": {
            "balances": {"ledger/totals_out": {"offset": 9, "generation": 1}},
            "moves": {"ledger/movements": {"offset": 0}},
        },
    }
    reports = checkpoint_lineage(reports_pipeline(), root, operator=None, checkpoint=checkpoint)
    ledger = checkpoint_lineage(ledger_pipeline(), root, operator=None, checkpoint=None)
    inputs = {(d.namespace, d.name): d for d in reports.inputs}
    sinks = {(d.namespace, d.name) for d in ledger.outputs}
    assert set(inputs) == {
        (namespace, f"{path}/pipelines/ledger/sinks/totals_out"),
        (namespace, f"{path}/pipelines/ledger/sinks/movements"),
    }
    assert set(inputs) <= sinks  # the same datasets the ledger writes
    totals = inputs[(namespace, f"{path}/pipelines/ledger/sinks/totals_out")]
    assert totals.facets["version"].datasetVersion == "9"
    moves = inputs[(namespace, f"{path}/pipelines/ledger/sinks/movements")]
    assert "version" not in moves.facets  # nothing published yet when it read


def test_a_delta_table_sink_is_its_path_versioned_by_the_delta_version():
    from batchpoint.airflow.lineage import checkpoint_lineage

    pipeline = build_pipeline(balances_table="payments.balances", table_format="delta")
    checkpoint = {"checkpoint_id": 7, "type": "checkpoint", "base_checkpoint_id": 5, "barrier": {}}
    lineage = checkpoint_lineage(
        pipeline, "s3://landing/bp", operator=None, checkpoint=checkpoint,
        table_snapshots={"balances_table": 12},
    )  # fmt: skip
    outputs = {d.name: d for d in lineage.outputs}
    table = outputs["bp/delta/payments/balances"]
    assert table.namespace == "s3://landing"
    assert table.facets["version"].datasetVersion == "12"  # the Delta version
    assert "symlinks" not in table.facets  # a path, in no catalog
    assert "bp/tables/payments/balances" not in outputs
