"""OpenLineage: the checkpoint DAG's operator tasks and finalize report what they read
and wrote through the OpenLineage provider's operator hooks. The events are captured with
the provider's own file transport while the demo's checkpoint DAG runs under dag.test()
on SeaweedFS, each dataset's name is checked against what the run left on storage, and
the facet builder is checked on both stores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from batchpoint.sources.barrier import SourceBarrier
from demo.payments import SOURCE_ROOT, build_pipeline
from demo.payments_data import write_epoch_files

pytestmark = [pytest.mark.airflow]

Events = Callable[[], list[dict[str, Any]]]
SCHEMAS = (
    Path(__file__).resolve().parents[2] / "docs" / "openlineage" / "batchpoint-facets.schema.json"
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
    assert facet["_schemaURL"].startswith("urn:batchpoint:openlineage:CheckpointRunFacet")
    assert (facet["pipeline"], facet["checkpointId"], facet["checkpointType"]) == (
        "payments",
        1,
        "checkpoint",
    )
    (table_out,) = [d for d in finalize["outputs"] if (d["namespace"], d["name"]) == table]
    (symlink,) = table_out["facets"]["symlinks"]["identifiers"]
    assert (symlink["name"], symlink["type"]) == ("payments.balances", "TABLE")

    # each name is where the run's data is: the sinks' manifests, the table's metadata
    for _, name in sinks:
        assert bp.store.exists(_key(bp.root, name) + "/manifest.json"), name
    assert list(bp.store.list(_key(bp.root, table[1]) + "/metadata/"))

    # an operator task: its own inputs and outputs, and its checkpoint
    dedup = _event(events, "COMPLETE", "operators.dedup")
    assert _named(dedup["inputs"]) == {source}
    assert dedup["outputs"] == []
    facet = dedup["run"]["facets"]["batchpoint_checkpoint"]
    assert (facet["operator"], facet["checkpointId"]) == ("dedup", 1)
    sink_task = _event(events, "COMPLETE", "operators.balances_table")
    assert sink_task["inputs"] == []
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
    checkpoint = {
        "checkpoint_id": 7,
        "type": "savepoint",
        "base_checkpoint_id": 5,
        "barrier": {
            "events": {"2024-01-02": {"offset": 3, "last": "c.jsonl"}, "2024-01-01": 4},
            "ledger": {"snapshots": {"offset": 2, "last": "8812345"}},
        },
    }
    lineage = checkpoint_lineage(pipeline, root, operator=None, checkpoint=checkpoint)

    inputs = {(d.namespace, d.name): d for d in lineage.inputs}
    assert set(inputs) == {
        (namespace, f"{path}/{SOURCE_ROOT}"),
        (namespace, f"{path}/tables/finance/ledger"),
        ("s3://other-bucket", "in/payments"),
    }
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
    assert facet._schemaURL.startswith("urn:batchpoint:")

    # one operator: only the sources it reads, no output but its own sink's
    dedup = checkpoint_lineage(pipeline, root, operator="dedup", checkpoint=None)
    assert [(d.namespace, d.name) for d in dedup.inputs] == [(namespace, f"{path}/{SOURCE_ROOT}")]
    assert dedup.outputs == []
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

    from batchpoint.airflow.lineage import CheckpointRunFacet, SourceBarrierInputFacet

    schemas = json.loads(SCHEMAS.read_text())["$defs"]
    facets = [
        CheckpointRunFacet(pipeline="payments", checkpointId=3, operator="dedup"),
        SourceBarrierInputFacet(partitions={"2024-01-01": 4}),
    ]
    for facet in facets:
        (declared,) = [d for d in schemas.values() if d["$id"] == facet._schemaURL]
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
