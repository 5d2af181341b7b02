"""The JSON API's response models (FastAPI `response_model`s), from which the app's
OpenAPI schema (GET /batchpoint/api/openapi.json) describes every field it answers.

Where a route's JSON is a dataclass as is (`dataclasses.asdict`), its model is made from
the dataclass's fields, so the schema follows the dataclass; where the JSON reshapes one
(enums by value, derived fields), the model says it field by field. Every model forbids
unknown keys: a field added to the JSON and not here fails the route (and its test)
instead of vanishing from the answer unannounced, and so does a value of another type.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, create_model

from batchpoint.ops.lineage_values import Derivation, DownstreamRead, ReadState, UpstreamRead
from batchpoint.ops.overview import PipelineOverview
from batchpoint.ops.restore_history import RestoreEvent
from batchpoint.protocol.checkpoint import CheckpointStatus, CheckpointType
from batchpoint.protocol.config import CheckpointConfig
from batchpoint.protocol.history_status import HistoryStatus
from batchpoint.protocol.stats import Summary, TaskStats

# Strict: a value of the wrong type fails the route rather than being coerced into the
# promised one (a count that became "5" is a bug to see, not to hide).
_STRICT = ConfigDict(extra="forbid", strict=True)


def _model_of(cls: type, **nested: Any) -> type[BaseModel]:
    """A pydantic model with the dataclass's fields and types; `nested`: the type of a
    field that holds another dataclass, as its model (a strict one too)."""
    hints = typing.get_type_hints(cls)
    fields: dict[str, Any] = {f.name: (hints[f.name], ...) for f in dataclasses.fields(cls)}
    fields.update({name: (hint, ...) for name, hint in nested.items()})
    return create_model(cls.__name__, __config__=_STRICT, **fields)


CheckpointConfigModel = _model_of(CheckpointConfig)
TaskStatsModel = _model_of(TaskStats)
SummaryModel = _model_of(Summary)
RestoreModel = _model_of(RestoreEvent)
OverviewModel = _model_of(PipelineOverview, latest_restore=RestoreModel | None)
# The JSON holds enums by value, and a strict model takes a value only as its own type.
CheckpointKind = Literal[tuple(t.value for t in CheckpointType)]  # type: ignore[valid-type]
Status = Literal[tuple(s.label for s in HistoryStatus)]  # type: ignore[valid-type]
Outcome = Literal[tuple(s.value for s in CheckpointStatus)]  # type: ignore[valid-type]
UpstreamReadModel = _model_of(
    UpstreamRead,
    state=Literal[tuple(s.value for s in ReadState)],  # type: ignore[valid-type]
)
DownstreamReadModel = _model_of(
    DownstreamRead,
    derivation=Literal[tuple(d.value for d in Derivation)],  # type: ignore[valid-type]
)


class _Strict(BaseModel):
    model_config = _STRICT


class CheckpointRow(_Strict):
    """One checkpoint of the history (`CheckpointStats.to_json`)."""

    checkpoint_id: int
    type: CheckpointKind
    #: What it is now (protocol/history_status.py): head, retained, discarded, ...
    status: Status
    outcome: Outcome  # what its records say: PENDING, COMPLETED, ABORTED, UNREADABLE
    trigger_time: float | None  # None: never recorded
    end_time: float | None
    duration_s: float | None
    state_size: int
    full_state_size: int
    rows: int
    acknowledged: int
    expected: int
    base_checkpoint_id: int | None
    failure_reason: str
    failure_message: str


class HistoryRow(CheckpointRow):
    quarantined: bool
    #: The restores that went back to this checkpoint, newest first (usually none).
    restores: list[RestoreModel]  # type: ignore[valid-type]


class DagIds(_Strict):
    checkpoint: str
    savepoint: str
    restore: str


class PipelineEntry(_Strict):
    """A pipeline on the index: where it is stored, its status, config and DAGs."""

    pipeline: str
    root: str
    head: int | None
    overview: OverviewModel  # type: ignore[valid-type]
    config: CheckpointConfigModel  # type: ignore[valid-type]
    dags: DagIds


class CheckpointsPage(_Strict):
    """A page of a pipeline's history, newest first; `older` is the `before` of the next."""

    pipeline: str
    checkpoints: list[HistoryRow]
    older: int | None
    summary: SummaryModel  # type: ignore[valid-type]
    overview: OverviewModel  # type: ignore[valid-type]
    config: CheckpointConfigModel  # type: ignore[valid-type]


class FindingModel(_Strict):
    object: str
    check: str
    problem: str
    uid: str | None = None  # `operator uid/state uid` of a finding on a state


class StateSkipModel(_Strict):
    """A state the gate did not judge, and why (`report.StateSkip`)."""

    uid: str
    label: str
    reason: str


class QualityReportModel(_Strict):
    """The quality gate's verdict on the checkpoint (`CandidateReport.to_body`), with its
    text as `lines`."""

    pipeline: str
    checkpoint_id: int
    checkpoint_type: str
    mode: str
    evaluated_at: str  # ISO-8601
    seconds: float
    findings: list[FindingModel]
    gx_results: dict[str, dict[str, Any]]  # state uid -> suite -> GX's own result JSON
    checks: dict[str, dict[str, Any]]  # state uid -> check -> its details
    skipped: list[str]
    suites_run: bool
    quarantined: bool
    passed: bool
    lines: list[str]
    data_docs: str | None = None  # the Data Docs of its results in the gate run that judged it
    states: dict[str, str] = {}  # state uid -> its label, `operator/state`
    not_judged: list[StateSkipModel] = []


class FileRow(_Strict):
    task: str
    stream: str
    path: str
    size: int
    rows: int
    key_groups: list[int] | None
    origin: str


class LineageModel(_Strict):
    """What the checkpoint read of other pipelines, transitively (`UpstreamRead`), and
    the retained checkpoints of other pipelines that read it (`DownstreamRead`): only
    rows about pipelines the user may read (ui_lineage.py)."""

    upstream: list[UpstreamReadModel]  # type: ignore[valid-type]
    downstream: list[DownstreamReadModel]  # type: ignore[valid-type]
    notes: list[str]


class CheckpointDetailModel(CheckpointRow):
    """One checkpoint in full: its tasks, quality report, quarantine, files, lineage."""

    status_meaning: str
    #: Its tasks' storage requests by kind, summed; None when no ack counted them.
    storage_requests: dict[str, int] | None
    restore_generation: int
    barrier: dict[str, Any]  # source -> its barrier (offsets, splits)
    scheduler_run_id: str | None  # the Airflow run that triggered it, if one did
    tasks: list[TaskStatsModel]  # type: ignore[valid-type]
    quality_report: QualityReportModel | None
    quarantined_at: float | None
    quarantine: str | None
    files: list[FileRow]
    lineage: LineageModel | None = None  # the UI route adds it; absent from ops alone
    #: What could not be read for the page (a damaged or newer-release quality report):
    #: a finding each, beside the rest (invariant 11).
    findings: list[str] = []
