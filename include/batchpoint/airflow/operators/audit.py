"""The audit task of an audited checkpoint: the quality gate run on the checkpoint's
acked state and outputs, which completes the checkpoint and publishes its sinks if the
suites pass and aborts it if they fail (batchpoint.ops.audit)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import Any

from airflow.sdk import Context

from batchpoint.airflow import metrics
from batchpoint.airflow.compat import AirflowException, AirflowFailException
from batchpoint.airflow.links import CHECKPOINT_LINKS
from batchpoint.airflow.operators.base import BatchpointOperator
from batchpoint.airflow.spark_connection import spark_settings
from batchpoint.errors import ConfigError
from batchpoint.ops.audit import audit_then_finalize
from batchpoint.protocol.checkpoint import CheckpointStatus
from batchpoint.quality.audit import audit_gate
from batchpoint.quality.gate import QualityGate
from batchpoint.settings import Settings, SparkMode
from batchpoint.storage.redaction import redact_uri


class AuditCheckpointOperator(BatchpointOperator):
    """Write-audit-publish: every ack is in; validate the pending checkpoint's state with
    the pipeline's quality gate (integrity, then its declared suites and checks), then
    finalize with the verdict. Spark: with `spark_remote` (connect mode) a Spark Connect
    session on that server, else a session started in this task on `spark_master`. A
    process that already runs a classic session (a test's, under dag.test) keeps using
    it: one Python process cannot hold both kinds. Passing, the
    checkpoint completes and its sinks publish; failing, it is aborted with reason
    "quality gate" and its report stored beside it, nothing is published, and this task
    fails (no retry: the state will not change) with the report's summary."""

    operator_extra_links = CHECKPOINT_LINKS

    template_fields = ("spark_master", "spark_remote")
    ui_color = "#d6ecff"

    def __init__(
        self,
        *,
        spark_master: str,
        spark_conf: Mapping[str, str] | None = None,
        spark_remote: str | None = None,
        spark_mode: SparkMode | str | None = None,
        spark_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        """`spark_mode` None: connect if `spark_remote` is given, else submit; the
        endpoint of the `spark_conn_id` connection, if it exists, wins over both."""
        super().__init__(**kwargs)
        self.spark_master = spark_master
        self.spark_conf = dict(spark_conf or {})
        self.spark_remote = spark_remote
        self.spark_mode = SparkMode(spark_mode or ("connect" if spark_remote else "submit"))
        self.spark_conn_id = spark_conn_id

    def _gate(self, driver: Any, settings: Settings) -> AbstractContextManager[QualityGate]:
        from batchpoint.spark.connect import classic_spark_running

        given = replace(
            settings,
            spark_master=self.spark_master,
            spark_remote=self.spark_remote or settings.spark_remote,
        )
        spark = spark_settings(given, self.spark_mode, self.spark_conn_id)
        connect = self.spark_mode is SparkMode.CONNECT and spark.spark_remote
        if connect and not classic_spark_running():
            return _connect_gate(driver.pipeline, spark, self.spark_conf, self.log)
        return audit_gate(
            driver.pipeline,
            settings.store_ref,
            spark.spark_master,
            spark_conf=self.spark_conf,
            log=self.log.info,
        )

    def execute(self, context: Context) -> dict[str, Any]:
        checkpoint_id = self.require_checkpoint_id(context)
        settings = self.settings()
        driver = self.driver(settings)
        try:
            with self._gate(driver, settings) as gate:
                audit = audit_then_finalize(driver, checkpoint_id, gate)
        except ConfigError as exc:  # a suite that cannot be built: no verdict to give
            raise AirflowFailException(str(exc)) from None
        outcome = audit.outcome
        if outcome is None:
            # Acks missing (not after wait_for_acks), or a passing audit whose base
            # checkpoint is still pending: a retry audits again once it settled.
            raise AirflowException(f"{audit.render()}\ncheckpoint {checkpoint_id} not decided")
        if outcome.status is CheckpointStatus.ABORTED:
            if audit.report is not None and not audit.report.passed:
                metrics.gate_rejected(outcome.pending.pipeline, 1)
            reason = outcome.reason.code if outcome.reason else "-"
            raise AirflowFailException(
                f"checkpoint {checkpoint_id} aborted ({reason}): {outcome.message}\n"
                + audit.render()
            )
        self.log.info("%s", audit.render())
        return {
            "checkpoint_id": checkpoint_id,
            "status": outcome.status.value,
            "audited": audit.report is not None,
            "report": driver.coordinator.reports.quality_report_key(checkpoint_id),
            "published": audit.published,
        }


@contextmanager
def _connect_gate(
    pipeline: Any, settings: Settings, conf: Mapping[str, str], log: Any
) -> Iterator[QualityGate]:
    """The audit's gate on the pipeline's session of the Spark Connect server (the one
    its operator jobs use: no Python workers of a session of its own pile up there)."""
    from batchpoint.spark.connect import connect_session, pipeline_session_id

    remote = str(settings.spark_remote)
    spark = connect_session(
        remote,
        "batchpoint-audit",
        session_id=pipeline_session_id(pipeline.name, remote),
        conf=conf,
    )
    log.info("audit on the Spark Connect server at %s", redact_uri(remote))
    yield QualityGate(pipeline, settings.store_ref, spark=spark, log=log.info)
