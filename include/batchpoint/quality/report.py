"""What the quality gate decided, as data (stored as versioned JSON beside each
checkpoint and inside quarantine records) and as text (for the task log and the CLI).

A report keys each state's results by its uid (`operator uid/state uid`) and labels it
with the code's names (`states`); a report stored before uids keyed them by name and
has no labels: each key is its own label, as uids were the names then."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from batchpoint import codec
from batchpoint.codec import to_iso
from batchpoint.quality.findings import Check, Finding

#: The checks that judge a checkpoint's records and files, not its state's content.
INTEGRITY_CHECKS = frozenset(
    {Check.METADATA, Check.FILE, Check.KEY_GROUPS, Check.SOURCE_OFFSETS, Check.SINK_MANIFEST}
)


class GateMode(enum.StrEnum):
    RESTORE = "restore"  # choosing a checkpoint to restore
    AUDIT = "audit"  # a checkpoint whose acks are in, before it may complete


def describe_expectation(item: Mapping[str, Any]) -> str:
    """One expectation of a GX result, as `type(kwargs) on column 'c'`."""
    config = item.get("expectation_config") or {}
    kwargs = {k: v for k, v in (config.get("kwargs") or {}).items() if k != "batch_id"}
    column = kwargs.pop("column", None)
    args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    described = f"{config.get('type', 'expectation')}({args})"
    return described + (f" on column '{column}'" if column else "")


def observed_text(item: Mapping[str, Any]) -> str:
    """What GX saw for one expectation: unexpected values, an observed value, or the
    error it raised; empty when the result has no details (a passing quick pass)."""
    info = item.get("exception_info") or {}
    if info.get("raised_exception"):
        return f"it raised {info.get('exception_message')}"
    result = item.get("result") or {}
    if "unexpected_count" in result:
        examples = result.get("partial_unexpected_list") or []
        shown = f" (e.g. {examples[:5]!r})" if examples else ""
        total = result.get("element_count")
        of = f" of {total}" if total is not None else ""
        return f"{result['unexpected_count']}{of} values unexpected{shown}"
    if "observed_value" in result:
        return f"observed {result['observed_value']!r}"
    return json.dumps(result)[:200] if result else ""


@dataclass(frozen=True)
class StateSkip(codec.Value):
    """A state the gate did not judge in a candidate, and why: new since it, or held by
    it but no longer declared by the code."""

    uid: str  # operator uid/state uid
    label: str  # operator/state as the code names it (the checkpoint, if undeclared)
    reason: str

    def __str__(self) -> str:
        uid = "" if self.uid == self.label else f" (uid {self.uid})"
        return f"{self.label}{uid}: {self.reason}"


@dataclass(frozen=True)
class ResultRow:
    """One line of a report's table: an expectation of a suite, or a batchpoint check."""

    state: str  # operator/state, the state's label
    source: str  # `suite <name>` or `check <name>`
    item: str  # the expectation, or what the check compares
    passed: bool
    observed: str


def _seconds(value: float) -> float:
    return round(value, 3)


@dataclass
class CandidateReport(codec.Record):
    """The verdict on one checkpoint or savepoint."""

    KIND = "quality-report"
    VERSION = 1
    DERIVED = {"passed": "passed"}  # written for readers of the JSON, never read back

    pipeline: str
    checkpoint_id: int
    checkpoint_type: str = codec.field(missing="checkpoint")
    mode: GateMode = codec.field(missing=GateMode.RESTORE)
    evaluated_at: float = codec.time()
    seconds: float = codec.field(default=0.0, prepare=_seconds)
    findings: list[Finding] = field(default_factory=list)
    # state uid -> suite -> GX's result JSON; state uid -> check -> its details
    gx_results: dict[str, dict[str, Any]] = field(default_factory=dict)
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # suites, checks, states not run, by request
    suites_run: bool = False  # False when integrity failed first (state not worth reading)
    quarantined: bool = False
    # The Data Docs index of its results in the gate run that judged it (gx_checkpoint.py),
    # if built: its own site, or the user's GX project's site.
    data_docs: str | None = codec.field(default=None, omit=None, missing=None)
    # state uid -> its label (`operator/state` as the code names it), for each state judged
    states: dict[str, str] = codec.field(default_factory=dict, omit={})
    # the states it held or the code declares that were not judged, each with why
    not_judged: list[StateSkip] = codec.field(default_factory=list, omit=[])

    @property
    def passed(self) -> bool:
        return not self.findings

    def label(self, state: str) -> str:
        """The label of the state keyed `state` (a key of gx_results or checks)."""
        return self.states.get(state, state)

    @property
    def integrity_findings(self) -> list[Finding]:
        return [f for f in self.findings if f.check in INTEGRITY_CHECKS]

    @property
    def state_findings(self) -> list[Finding]:
        return [f for f in self.findings if f.check not in INTEGRITY_CHECKS]

    def result_rows(self) -> list[ResultRow]:
        """Every expectation and check that ran, passed or not, with what it observed."""
        rows = []
        for state, suites in sorted(self.gx_results.items()):
            for name, result in sorted(suites.items()):
                rows += [
                    ResultRow(
                        self.label(state),
                        f"suite {name}",
                        describe_expectation(item),
                        bool(item.get("success")),
                        observed_text(item),
                    )
                    for item in result.get("results", [])
                ]
        failed = {(f.uid or f.object, f.check) for f in self.findings}
        for state, checks in sorted(self.checks.items()):
            for name, details in sorted(checks.items()):
                check = name if name == Check.ROW_COUNT else f"{Check.SAMPLE}:{name}"
                rows.append(
                    ResultRow(
                        self.label(state),
                        f"check {name}",
                        _check_item(name, details),
                        (state, check) not in failed,
                        _check_observed(details),
                    )
                )
        return rows

    def verdict(self) -> str:
        if self.passed:
            return "passed"
        return "FAILED, quarantined" if self.quarantined else "FAILED"

    def render(self, indent: str = "  ") -> list[str]:
        head = (
            f"{indent}{self.checkpoint_type} {self.checkpoint_id}: {self.verdict()} "
            f"({self.seconds:.1f}s)"
        )
        lines = [head]
        for finding in self.findings:
            lines.append(f"{indent}    - {finding}")
        if self.passed:
            lines.append(f"{indent}    integrity ok; " + self._suite_summary())
        elif not self.suites_run:
            lines.append(f"{indent}    suites not run: integrity failed first")
        if self.skipped:
            lines.append(f"{indent}    skipped on request: {', '.join(self.skipped)}")
        lines += [f"{indent}    not judged: {skip}" for skip in self.not_judged]
        return lines

    def _suite_summary(self) -> str:
        parts = []
        for state, suites in sorted(self.gx_results.items()):
            for name, result in sorted(suites.items()):
                stats = result.get("statistics") or {}
                parts.append(
                    f"{self.label(state)} {name} {stats.get('successful_expectations', '?')}/"
                    f"{stats.get('evaluated_expectations', '?')}"
                )
        for state, checks in sorted(self.checks.items()):
            for name, details in sorted(checks.items()):
                if "keys_compared" in details:
                    parts.append(f"{self.label(state)} {name} {details['keys_compared']} keys")
                elif "rows" in details:
                    parts.append(f"{self.label(state)} {details['rows']} rows")
        if parts:
            return "; ".join(parts)
        return "every suite skipped" if self.skipped else "no suites declared"


def _check_item(name: str, details: Mapping[str, Any]) -> str:
    if name == Check.ROW_COUNT:
        return "rows in the files = rows in the metadata"
    if "source" in details:
        return f"sampled keys = recomputed from source '{details['source']}'"
    return name


def _check_observed(details: Mapping[str, Any]) -> str:
    if "recorded_rows" in details:
        return f"{details.get('rows')} rows, {details['recorded_rows']} recorded"
    if "keys_compared" in details:
        return (
            f"{details['keys_compared']} keys compared, {details.get('keys_differing', 0)} differ"
        )
    return json.dumps(details, default=str)[:200]


@dataclass
class GateReport:
    pipeline: str
    mode: GateMode
    started_at: float
    dry_run: bool = False
    candidates: list[CandidateReport] = field(default_factory=list)
    quarantined_skipped: list[int] = field(default_factory=list)  # never offered
    not_reached: list[int] = field(default_factory=list)  # beyond max_candidates
    chosen: int | None = None

    @property
    def passed(self) -> bool:
        return self.chosen is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "mode": self.mode.value,
            "started_at": to_iso(self.started_at),
            "dry_run": self.dry_run,
            "chosen": self.chosen,
            "candidates": [c.to_body() for c in self.candidates],
            "quarantined_skipped": self.quarantined_skipped,
            "not_reached": self.not_reached,
        }

    def refusal(self) -> str:
        """Why no candidate may be restored, naming each one."""
        reasons = [
            f"checkpoint {c.checkpoint_id}: "
            + "; ".join(str(f) for f in c.findings[:3])
            + (f" (and {len(c.findings) - 3} more)" if len(c.findings) > 3 else "")
            for c in self.candidates
        ]
        reasons += self._passed_over(
            "quarantined earlier (release to reconsider)", "not examined (beyond max candidates)"
        )
        if not self.candidates:
            reasons.append("no retained checkpoint or savepoint to examine")
        why = " | ".join(reasons)
        return f"pipeline '{self.pipeline}': no checkpoint passed the quality gate. {why}"

    def render(self) -> str:
        """The text summary for the task log and the CLI."""
        dry = " (dry run: nothing written, nothing restored)" if self.dry_run else ""
        if self.mode is GateMode.AUDIT:
            what = "audit passed" if self.passed else "audit FAILED"
        elif self.chosen is not None:
            what = f"restore checkpoint {self.chosen}"
        else:
            what = "REFUSED: no candidate passed"
        lines = [f"quality gate, pipeline '{self.pipeline}' ({self.mode.value}): {what}{dry}"]
        for candidate in self.candidates:
            lines += candidate.render()
        lines += self._passed_over(
            "  skipped, quarantined earlier", "  not examined (max candidates)"
        )
        return "\n".join(lines)

    def _passed_over(self, quarantined: str, not_reached: str) -> list[str]:
        """The candidates not judged, each group of ids after its label."""
        groups = [(quarantined, self.quarantined_skipped), (not_reached, self.not_reached)]
        return [f"{label}: {', '.join(map(str, ids))}" for label, ids in groups if ids]
