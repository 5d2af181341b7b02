"""Validation of a checkpoint's state: each state is read as a Spark DataFrame by
executors (keyed_io.read_keyed), its rows are counted against the metadata, then its
declared Great Expectations suite and batchpoint checks run on it.

States are found and matched by uid (identity.py): a checkpoint written before a deploy
that renamed an operator or a state is judged by what the code declares on that state
now. A declared state the checkpoint does not hold, and a state it holds that the code
no longer declares, are reported as not judged, with why.

Great Expectations runs each suite through a ValidationDefinition on a Spark data source
(gx_checkpoint.py): its Spark execution engine computes every metric as a Spark job, so
the state is never collected to the driver; only the metrics (counts, a few unexpected
values) come back. GX is imported inside functions, never when batchpoint is imported.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from batchpoint.errors import (
    BucketNotFound,
    ConfigError,
    StorageAccessDenied,
    StorageUnavailable,
)
from batchpoint.protocol.checkpoint import CompletedCheckpoint, FileHandle
from batchpoint.quality.checks import CheckResult, StateTarget, count_rows
from batchpoint.quality.findings import Check, Finding
from batchpoint.quality.gx_checkpoint import GxProject, GxValidator
from batchpoint.quality.identity import (
    UNDECLARED,
    DeclaredState,
    HeldState,
    declared_states,
    match_states,
    max_parallelism_of,
)
from batchpoint.quality.report import StateSkip, describe_expectation, observed_text
from batchpoint.quality.suites import (
    LoadedSuite,
    PipelineQuality,
    StateQuality,
    bound_quality,
    is_skipped,
    state_id,
    state_skipped,
)
from batchpoint.runtime.api import Pipeline
from batchpoint.storage import StoreRef

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def findings_from_result(key: str, suite: str, result: dict[str, Any]) -> list[Finding]:
    """One finding per failed expectation, in words an operator can act on."""
    return [
        Finding(
            key,
            f"{Check.SUITE}:{suite}",
            f"{describe_expectation(item)} failed: {observed_text(item)}",
        )
        for item in result.get("results", [])
        if not item.get("success")
    ]


@dataclass
class StateValidation:
    """What the suites and checks found on one state."""

    uid: str  # operator uid/state uid
    label: str  # operator/state, the code's names
    findings: list[Finding] = field(default_factory=list)
    gx_results: dict[str, Any] = field(default_factory=dict)  # suite name -> result JSON
    checks: dict[str, Any] = field(default_factory=dict)  # check name -> details
    skipped: list[str] = field(default_factory=list)


@dataclass
class ValidationRun:
    states: list[StateValidation] = field(default_factory=list)
    not_judged: list[StateSkip] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        return [f for s in self.states for f in s.findings]


class StateValidator:
    """Runs a pipeline's declared quality on the states of a checkpoint."""

    def __init__(
        self,
        spark: SparkSession,
        store_ref: StoreRef,
        pipeline: Pipeline,
        quality: PipelineQuality,
        *,
        skip: Collection[str] = (),
        detailed: bool = False,
        gx_project: GxProject | None = None,
    ) -> None:
        self.spark = spark
        self.store_ref = store_ref
        self.pipeline = pipeline
        self.quality = quality
        self.skip = frozenset(skip)
        self.gx = GxValidator(detailed=detailed, project=gx_project)
        self.declared = declared_states(pipeline)
        self.bound = bound_quality(pipeline, quality)
        self._suites: dict[int, LoadedSuite | None] = {}

    def load_suites(self) -> None:
        """Build every declared suite now, so a bad declaration fails the gate as a
        configuration error before any candidate is judged (and quarantined) by it:
        GX would report an expectation on a misspelt column as a failure of every one."""
        for declared in self.quality.states:
            self._suite(declared)

    def _suite(self, declared: StateQuality) -> LoadedSuite | None:
        if id(declared) not in self._suites:
            self._suites[id(declared)] = load_suite(
                self.pipeline, self.quality, declared, self.skip
            )
        return self._suites[id(declared)]

    def validate(self, completed: CompletedCheckpoint) -> ValidationRun:
        run = ValidationRun()
        self.gx.candidate(self.pipeline.name, completed.checkpoint_id)
        match = match_states(completed, self.declared)
        for held in match.held:
            if held.declared is None:
                run.not_judged.append(StateSkip(held.id.key, held.label, UNDECLARED))
            elif self._judges(held.declared):
                bound = self.bound.get(held.id, [])
                run.states.append(self._validate_state(completed, held, held.declared, bound))
        run.not_judged += [
            StateSkip(new.declared.id.key, new.declared.label, new.reason)
            for new in match.new
            if self._judges(new.declared) and not state_skipped(self.skip, new.declared)
        ]
        return run

    def _judges(self, declared: DeclaredState) -> bool:
        """Whether the gate reads this state: something is declared on it, or rows are
        counted."""
        return declared.id in self.bound or self.quality.count_rows

    def _validate_state(
        self,
        completed: CompletedCheckpoint,
        held: HeldState,
        code: DeclaredState,
        declared: Sequence[StateQuality],
    ) -> StateValidation:
        outcome = StateValidation(held.id.key, code.label)
        if state_skipped(self.skip, code):
            outcome.skipped.append(code.label)
            return outcome
        max_par, _ = max_parallelism_of(held)
        try:
            with self._state_frame(code, held.handles) as df:
                target = StateTarget(
                    self.spark,
                    self.store_ref,
                    self.pipeline,
                    completed,
                    code.operator,
                    code.state,
                    held.handles,
                    max_par or code.max_parallelism,
                    df,
                    held.id,
                )
                self._record(outcome, Check.ROW_COUNT, count_rows(target))
                for item in declared:
                    self._run_declared(outcome, target, item)
        except Exception as exc:  # unreadable state fails the candidate, not the gate
            if _is_outage(exc):
                raise  # the store is unreachable: no verdict on the state, no quarantine
            outcome.findings.append(Finding(code.label, Check.READ, _first_line(exc)))
        # What a check of the user's found names the state by its label: add its uid.
        outcome.findings = [
            f if f.uid is not None else dataclasses.replace(f, uid=outcome.uid)
            for f in outcome.findings
        ]
        return outcome

    def _run_declared(
        self, outcome: StateValidation, target: StateTarget, declared: StateQuality
    ) -> None:
        suite = self._suite(declared)
        if suite is not None:
            result = self.gx.validate(target.state_id.key, target.df, suite.suite, label=target.key)
            outcome.gx_results[suite.name] = result
            outcome.findings += findings_from_result(target.key, suite.name, result)
        elif declared.suite is not None:
            outcome.skipped.append(self.quality.suite_name(declared) or declared.key)
        for check in declared.checks:
            if is_skipped(self.skip, check.name):
                outcome.skipped.append(check.name)
                continue
            try:
                self._record(outcome, check.name, check.run(target))
            except Exception as exc:  # a check that cannot run on this state fails it
                outcome.findings.append(
                    Finding(target.key, f"{Check.SAMPLE}:{check.name}", _first_line(exc))
                )

    @staticmethod
    def _record(outcome: StateValidation, name: str, result: CheckResult) -> None:
        outcome.findings += result.findings
        outcome.checks[name] = result.details

    @contextmanager
    def _state_frame(
        self, code: DeclaredState, handles: Sequence[FileHandle]
    ) -> Iterator[DataFrame]:
        from pyspark import StorageLevel

        from batchpoint.spark import keyed_io

        schema = self.pipeline.operators[code.operator].states[code.state]
        df = keyed_io.read_keyed(
            self.spark,
            self.store_ref,
            list(handles),
            schema=schema,
            what=f"state '{code.state}' of '{code.operator}'",
        )
        # Every metric is a pass over the state: read the files once, spill if large.
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            yield df
        finally:
            df.unpersist()


def load_suite(
    pipeline: Pipeline, quality: PipelineQuality, declared: StateQuality, skip: Collection[str]
) -> LoadedSuite | None:
    """The declared suite, built and checked against its state's columns; None when it
    is skipped or there is none. Needs Great Expectations, not Spark."""
    uid = state_id(pipeline, declared).key
    if is_skipped(skip, declared.key, uid, quality.suite_name(declared)):
        return None
    loaded = quality.load(declared)
    if loaded is not None:
        schema = pipeline.operators[declared.operator].states[declared.state]
        _check_columns(loaded, set(schema.names))
    return loaded


_COLUMN_KWARGS = ("column", "column_A", "column_B", "column_list")


def _check_columns(loaded: LoadedSuite, columns: set[str]) -> None:
    for expectation in loaded.suite.expectations:
        kwargs = expectation.configuration.kwargs
        named = []
        for kwarg in _COLUMN_KWARGS:
            value = kwargs.get(kwarg)
            named += value if isinstance(value, list) else [value] if value else []
        unknown = [c for c in named if c not in columns]
        if unknown:
            raise ConfigError(
                f"quality suite '{loaded.name}' for {loaded.key}: "
                f"{expectation.expectation_type} names column(s) {unknown}, which the state "
                f"does not have (columns: {sorted(columns)})"
            )


#: Errors that say the store could not be reached, as opposed to what is in it.
_OUTAGES = (StorageUnavailable, StorageAccessDenied, BucketNotFound)


def _is_outage(exc: BaseException) -> bool:
    # Raised in a Spark task, they reach the driver only as text inside a Spark error.
    return isinstance(exc, _OUTAGES) or any(e.__name__ in str(exc) for e in _OUTAGES)


def _first_line(exc: BaseException) -> str:
    """Spark wraps a task's exception in pages of JVM trace: keep the Python error."""
    text = str(exc)
    for line in text.splitlines():
        stripped = line.strip()
        if re.match(r"^[A-Za-z_.]*(Error|Exception|Corrupt|Mismatch)\b.*:", stripped):
            return stripped[:500]
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(exc).__name__}: {first}"[:500]
