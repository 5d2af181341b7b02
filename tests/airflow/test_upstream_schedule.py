"""Data-aware checkpoints (issue 40): a pipeline that reads other pipelines' sinks can have
its checkpoint DAG scheduled on those sinks' Assets instead of a timer. Rendered here
without running anything; the events the upstream's finalize emits: test_assets.py; the
DAG file under Airflow's parser: test_dagbag.py."""

from __future__ import annotations

import pytest
from airflow.sdk import AssetAll, AssetAny

from batchpoint.airflow.assets import (
    batchpoint_asset,
    batchpoint_sink_asset,
    cleanup_alias,
    sinks_alias,
)
from batchpoint.airflow.config import AirflowDeployment
from batchpoint.airflow.dag_factory import build_pipeline_dags, load_dags
from batchpoint.errors import ConfigError
from batchpoint.runtime.api import Pipeline
from demo.payments import build_pipeline

pytestmark = pytest.mark.airflow

CHAIN = "support.chained:ledger_pipeline,support.chained:reports_pipeline"
ROWS = "account STRING NOT NULL, total BIGINT"


def deployment(**values: str) -> AirflowDeployment:
    return AirflowDeployment.from_env(
        {
            "BATCHPOINT_ROOT": "file:///tmp/bp-upstream-schedule",
            "BATCHPOINT_SPARK_REMOTE": "sc://spark-connect:15002",
            **values,
        }
    )


def upstream(sink_uid: str | None = None) -> Pipeline:
    p = Pipeline("up")
    p.source("events", root="in", schema=ROWS, key=["account"])
    p.sink("totals", inputs=["events"], key=["account"], uid=sink_uid)
    return p


def downstream(sink: str = "totals") -> Pipeline:
    p = Pipeline("down")
    p.source("totals", upstream="up", sink=sink, schema=ROWS, key=["account"])
    p.sink("copy", inputs=["totals"], key=["account"])
    return p


def test_upstream_schedules_the_checkpoint_dag_on_every_sink_its_sources_read():
    dags = load_dags(
        deployment(
            BATCHPOINT_PIPELINE_REF=CHAIN,
            BATCHPOINT_CHECKPOINT_INTERVALS='{"reports": "upstream"}',
        )
    )
    reports = dags["reports_checkpoint"]
    assert type(reports.timetable).__name__ == "AssetTriggeredTimetable"
    # any of them: one upstream checkpoint publishes both, either one is new data
    assert reports.timetable.asset_condition == AssetAny(
        batchpoint_sink_asset("ledger", "totals_out"),
        batchpoint_sink_asset("ledger", "movements"),
    )
    assert "after each publish of any of `x-batchpoint://ledger/sinks/totals_out`" in (
        reports.doc_md
    )
    ledger = dags["ledger_checkpoint"]
    assert type(ledger.timetable).__name__ == "DeltaTriggerTimetable"  # the default, 300 s
    # whose finalize emits them, through the alias of the sinks it published
    assert ledger.get_task("finalize").outlets == [
        batchpoint_asset("ledger"),
        sinks_alias("ledger"),
    ]
    assert ledger.get_task("cleanup").outlets == [cleanup_alias("ledger")]
    # the manual DAGs stay manual
    assert type(dags["reports_savepoint"].timetable).__name__ == "NullTimetable"


def test_a_sink_named_by_name_is_the_asset_of_its_uid_when_the_upstream_is_deployed():
    renamed = upstream(sink_uid="totals-v1")  # renamed once, its uid kept
    dags = build_pipeline_dags(
        downstream(), "x:down", deployment(), schedule="upstream", deployed={"up": renamed}
    )
    asset = dags["down_checkpoint"].timetable.asset_condition
    assert asset == batchpoint_sink_asset("up", "totals-v1")
    assert asset.uri == "x-batchpoint://up/sinks/totals-v1"
    # deployed elsewhere: the sink as the source names it
    elsewhere = build_pipeline_dags(
        downstream("totals-v1"), "x:down", deployment(), schedule="upstream"
    )
    assert elsewhere["down_checkpoint"].timetable.asset_condition == asset
    with pytest.raises(
        ConfigError, match=r"pipeline 'up' has no sink 'gone' \(its sinks: totals\)"
    ):
        build_pipeline_dags(
            downstream("gone"),
            "x:down",
            deployment(),
            schedule="upstream",
            deployed={"up": upstream()},
        )


def test_upstream_for_a_pipeline_that_reads_no_pipeline_is_refused_naming_it():
    with pytest.raises(ConfigError, match=r"^schedule=upstream: pipeline 'payments' .* reads none"):
        build_pipeline_dags(
            build_pipeline(), "demo.payments:pipeline", deployment(), schedule="upstream"
        )
    # the deployment-wide setting reaches every pipeline: the first that reads none fails
    with pytest.raises(
        ConfigError, match=r"^BATCHPOINT_CHECKPOINT_INTERVAL=upstream: pipeline 'ledger'"
    ):
        load_dags(
            deployment(BATCHPOINT_PIPELINE_REF=CHAIN, BATCHPOINT_CHECKPOINT_INTERVAL="upstream")
        )


def test_a_per_pipeline_schedule_must_name_a_deployed_pipeline():
    with pytest.raises(
        ConfigError, match=r'^BATCHPOINT_CHECKPOINT_INTERVALS\["ledger"\]=upstream: pipeline'
    ):
        load_dags(
            deployment(
                BATCHPOINT_PIPELINE_REF=CHAIN,
                BATCHPOINT_CHECKPOINT_INTERVALS='{"ledger": "upstream", "reports": "upstream"}',
            )
        )
    with pytest.raises(
        ConfigError,
        match=r"BATCHPOINT_CHECKPOINT_INTERVALS names 'report', not a pipeline of "
        r"BATCHPOINT_PIPELINE_REF \(ledger, reports\)",
    ):
        load_dags(
            deployment(
                BATCHPOINT_PIPELINE_REF=CHAIN,
                BATCHPOINT_CHECKPOINT_INTERVALS='{"report": "upstream"}',
            )
        )


def test_the_factory_takes_assets_of_ones_own_and_the_settings_values():
    alerts = batchpoint_sink_asset("payments", "alerts")
    dags = build_pipeline_dags(downstream(), "x:down", deployment(), schedule=[alerts])
    assert dags["down_checkpoint"].timetable.asset_condition == AssetAll(alerts)
    assert (
        "on the assets `x-batchpoint://payments/sinks/alerts`, as" in dags["down_checkpoint"].doc_md
    )
    minutes = build_pipeline_dags(downstream(), "x:down", deployment(), schedule="5m")
    assert minutes["down_checkpoint"].timetable.delta.total_seconds() == 300
    manual = build_pipeline_dags(downstream(), "x:down", deployment(), schedule=None)
    assert type(manual["down_checkpoint"].timetable).__name__ == "NullTimetable"
