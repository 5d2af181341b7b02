"""What the demo deploys: the versions of `payments` per format of its balances table
(`./dev demo --table-format iceberg|delta`), `reports` beside each, and the deployment's
BATCHPOINT_* settings.

The versions are the good one, the bad deploy that doubles every balance
(payments_buggy) and the deploy that renames `balances` with its state kept
(payments_v2). In each, the sink `balances_table` publishes `payments.balances` in the
format chosen: an Iceberg table in the deployment's catalog (BATCHPOINT_TABLE_CATALOG),
or a path-based Delta table, <root>/delta/payments/balances. `reports` reads the sink's
manifest, whichever the format.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from batchpoint.settings import Settings
from batchpoint.spark.fast_start import submit_args
from demo.airflow_env import python_path
from devstack.seaweed import SeaweedServer

FORMATS = ("iceberg", "delta")


@dataclass(frozen=True)
class PaymentsVersions:
    table_format: str
    good: str  # BATCHPOINT_PIPELINE_REF of each version (module:attribute)
    buggy: str
    evolved: str


VERSIONS = {
    "iceberg": PaymentsVersions(
        "iceberg",
        "demo.payments:table_pipeline",
        "demo.payments_buggy:table_pipeline",
        "demo.payments_v2:table_pipeline",
    ),
    "delta": PaymentsVersions(
        "delta",
        "demo.payments:delta_table_pipeline",
        "demo.payments_buggy:delta_table_pipeline",
        "demo.payments_v2:delta_table_pipeline",
    ),
}
GATE_REF = "demo.payments_quality:restore_gate"
#: The second pipeline, deployed beside each version of payments.
REPORTS_REF = "demo.reports:pipeline"


def deployed(payments_ref: str) -> str:
    """BATCHPOINT_PIPELINE_REF: this version of payments, and reports."""
    return f"{payments_ref},{REPORTS_REF}"


def deployment_env(
    s3: SeaweedServer,
    workdir: Path,
    spark_remote: str | None = None,
    versions: PaymentsVersions = VERSIONS["iceberg"],
) -> dict[str, str]:
    """BATCHPOINT_* of the demo deployment: payments and reports, manual checkpoint runs
    (the demo is the scheduler; reports' DAG is scheduled on payments' sinks, which a
    real scheduler would follow), jobs as clients of the Spark Connect server
    `spark_remote` (None: spark-submit jobs on local Spark), the payments quality gate,
    payments' balances a table in the format of `versions`; the project root on
    PYTHONPATH, for the processes that import the pipeline."""
    settings = Settings(f"s3://{s3.bucket}/demo", s3.storage_options(), "local[2]")
    if spark_remote:
        spark = {"BATCHPOINT_SPARK_MODE": "connect", "BATCHPOINT_SPARK_REMOTE": spark_remote}
    else:
        spark = {
            "BATCHPOINT_SPARK_MODE": "submit",
            "BATCHPOINT_SPARK_SUBMIT": str(Path(sys.executable).parent / "spark-submit"),
            "BATCHPOINT_SPARK_SUBMIT_ARGS": submit_args(),
        }
    tables = {}
    if versions.table_format == "iceberg":
        # The Iceberg catalog of the balances table: an embedded SQLite file (a
        # deployment names its Postgres here; the table's files are on S3 either way).
        # A Delta table needs none: its log is in its own folder.
        tables["BATCHPOINT_TABLE_CATALOG"] = f"sqlite:///{workdir / 'iceberg-catalog.db'}"
    return {
        **settings.as_env(),
        **spark,
        **tables,
        "BATCHPOINT_PIPELINE_REF": deployed(versions.good),
        "BATCHPOINT_QUALITY_GATE": GATE_REF,
        "BATCHPOINT_CHECKPOINT_INTERVAL": "none",
        "BATCHPOINT_CHECKPOINT_INTERVALS": json.dumps({"reports": "upstream"}),
        "BATCHPOINT_CHECKPOINT_TIMEOUT": "1800",
        # dag.test() runs one task at a time: a deferred sensor would run its trigger
        # inline before the operator tasks, so the sensor reschedules instead. When the
        # last operator task ends before its next look is due, dag.test() idles until
        # it is: a short interval keeps that off every epoch's wall time.
        "BATCHPOINT_ACK_SENSOR_MODE": "reschedule",
        "BATCHPOINT_ACK_POLL_INTERVAL": "0.3",
        "BATCHPOINT_TASK_RETRIES": "1",
        "BATCHPOINT_TASK_RETRY_DELAY": "1",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": python_path(os.environ.get("PYTHONPATH")),
    }
