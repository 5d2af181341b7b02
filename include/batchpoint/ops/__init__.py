"""The use cases, one function per verb, shared by both front ends: the `batchpoint`
command (batchpoint.cli) and the Airflow operators (batchpoint.airflow) only translate
arguments and results (rendering; XCom, skip and fail).

Plain arguments in, dataclasses out; no argparse, no Airflow. Layering: ops imports
quality/, runtime/, protocol/ and storage/, none of which imports ops.
"""

from batchpoint.ops.audit import (
    AuditResult,
    audit_then_finalize,
    audited_properties,
    trigger_audited,
)
from batchpoint.ops.epoch import Finalized, expire, finalize
from batchpoint.ops.epoch_executor import EpochExecutor, EpochResult, SavepointExport
from batchpoint.ops.epoch_plan import (
    EpochPlan,
    EpochSettings,
    EpochTask,
    EpochTaskId,
    TaskKind,
    epoch_tasks,
    plan_epoch,
)
from batchpoint.ops.gates import (
    GateChoice,
    choose_restore_gate,
    gate_from_env,
    gate_reference,
    judging_gate,
    load_gate,
)
from batchpoint.ops.inspect import (
    CheckpointDetail,
    CheckpointHistory,
    PipelineStats,
    list_checkpoints,
    pipeline_stats,
    show_checkpoint,
)
from batchpoint.ops.local_epoch import (
    LocalEpochRunner,
    run_audited_epoch,
    run_savepoint_epoch,
    take_savepoint,
)
from batchpoint.ops.maintenance import (
    ResetResult,
    gc,
    quarantined,
    release_quarantine,
    reset,
)
from batchpoint.ops.pipelines import (
    UnknownPipeline,
    open_pipeline,
    pipeline_code,
    pipeline_names,
    require_pipeline,
)
from batchpoint.ops.restore import RestoreRun, apply_restore, restore
from batchpoint.ops.runs import (
    RunSettlement,
    attempt_id,
    decline_operator,
    discard_checkpoint_data,
    settle_run,
    trigger_for_run,
)
from batchpoint.ops.savepoints import ExportResult, export, import_folder
from batchpoint.ops.verify import (
    FileCheck,
    Verification,
    verify_files,
    verify_quality,
    verify_target,
)
from batchpoint.runtime.loader import load_object, load_pipeline

__all__ = [
    "AuditResult",
    "CheckpointDetail",
    "CheckpointHistory",
    "EpochExecutor",
    "EpochPlan",
    "EpochResult",
    "EpochSettings",
    "EpochTask",
    "EpochTaskId",
    "ExportResult",
    "FileCheck",
    "Finalized",
    "GateChoice",
    "LocalEpochRunner",
    "PipelineStats",
    "ResetResult",
    "RestoreRun",
    "RunSettlement",
    "SavepointExport",
    "TaskKind",
    "UnknownPipeline",
    "Verification",
    "apply_restore",
    "attempt_id",
    "audit_then_finalize",
    "audited_properties",
    "choose_restore_gate",
    "decline_operator",
    "discard_checkpoint_data",
    "epoch_tasks",
    "expire",
    "export",
    "finalize",
    "gate_from_env",
    "gate_reference",
    "gc",
    "import_folder",
    "judging_gate",
    "list_checkpoints",
    "load_gate",
    "load_object",
    "load_pipeline",
    "open_pipeline",
    "pipeline_code",
    "pipeline_names",
    "pipeline_stats",
    "plan_epoch",
    "quarantined",
    "release_quarantine",
    "require_pipeline",
    "reset",
    "restore",
    "run_audited_epoch",
    "run_savepoint_epoch",
    "settle_run",
    "show_checkpoint",
    "take_savepoint",
    "trigger_audited",
    "trigger_for_run",
    "verify_files",
    "verify_quality",
    "verify_target",
]
