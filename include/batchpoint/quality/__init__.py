"""The data-quality gate: integrity checks and Great Expectations suites on checkpoint
state, quarantine of the checkpoints that fail, gated restores; the audits themselves are
`batchpoint.ops.audit`.

No Airflow here, and neither Spark nor Great Expectations is imported until a gate
validates state: importing this package is cheap.
"""

from batchpoint.quality.checks import CheckResult, RecomputeSample, StateCheck, StateTarget
from batchpoint.quality.findings import Check, Finding
from batchpoint.quality.gate import QualityGate, QualityGateRefused
from batchpoint.quality.gated_restore import gated_restore
from batchpoint.quality.identity import StateId
from batchpoint.quality.integrity import IntegrityReport, check_checkpoint, check_completed
from batchpoint.quality.quarantine import QuarantineRecord, QuarantineStore, release
from batchpoint.quality.report import CandidateReport, GateMode, GateReport, StateSkip
from batchpoint.quality.suites import (
    PipelineQuality,
    StateQuality,
    SuiteRef,
    audit_enabled,
    declare_quality,
    quality_of,
    skippable_names,
)

__all__ = [
    "CandidateReport",
    "Check",
    "CheckResult",
    "Finding",
    "GateMode",
    "GateReport",
    "IntegrityReport",
    "PipelineQuality",
    "QualityGate",
    "QualityGateRefused",
    "QuarantineRecord",
    "QuarantineStore",
    "RecomputeSample",
    "StateCheck",
    "StateId",
    "StateQuality",
    "StateSkip",
    "StateTarget",
    "SuiteRef",
    "audit_enabled",
    "check_checkpoint",
    "check_completed",
    "declare_quality",
    "gated_restore",
    "quality_of",
    "release",
    "skippable_names",
]
