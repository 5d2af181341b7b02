"""Operators of the batchpoint DAGs, each a thin translator: it checks its arguments,
calls one use case of `batchpoint.ops` and turns the result into Airflow's vocabulary
(XCom, skip, fail without retry). By DAG: `checkpoint` (trigger, the Spark jobs,
finalize, cleanup) with `audit` (an audited checkpoint's gate), `savepoint` (its
trigger, export, pause) and `restore`."""

from batchpoint.airflow.operators.audit import AuditCheckpointOperator
from batchpoint.airflow.operators.base import BatchpointOperator
from batchpoint.airflow.operators.checkpoint import (
    CheckpointCleanupOperator,
    FinalizeCheckpointOperator,
    SparkOperatorJob,
    TriggerCheckpointOperator,
)
from batchpoint.airflow.operators.restore import RestoreCheckOperator, RestoreOperator
from batchpoint.airflow.operators.savepoint import (
    ExportSavepointOperator,
    PausePipelineOperator,
    TriggerSavepointOperator,
)

__all__ = [
    "AuditCheckpointOperator",
    "BatchpointOperator",
    "CheckpointCleanupOperator",
    "ExportSavepointOperator",
    "FinalizeCheckpointOperator",
    "PausePipelineOperator",
    "RestoreCheckOperator",
    "RestoreOperator",
    "SparkOperatorJob",
    "TriggerCheckpointOperator",
    "TriggerSavepointOperator",
]
