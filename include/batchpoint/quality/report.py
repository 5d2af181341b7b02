"""What the quality gate decided, as data (stored as versioned JSON beside each
checkpoint and inside quarantine records) and as text (for the task log and the CLI)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from batchpoint.protocol import records
from batchpoint.protocol.records import from_iso, to_iso
from batchpoint.quality.findings import Finding


class GateMode(enum.StrEnum):
    RESTORE = "restore"  # choosing a checkpoint to restore
    AUDIT = "audit"  # a checkpoint whose acks are in, before it may complete


@dataclass
class CandidateReport:
    """The verdict on one checkpoint or savepoint."""

    KIND = "quality-report"
    VERSION = 1

    pipeline: str
    checkpoint_id: int
    checkpoint_type: str
    mode: GateMode
    evaluated_at: float
    seconds: float = 0.0
    findings: list[Finding] = field(default_factory=list)
    gx_results: dict[str, dict[str, Any]] = field(default_factory=dict)  # state -> suite -> JSON
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)  # state -> check -> details
    skipped: list[str] = field(default_factory=list)  # suites and checks not run, by request
    suites_run: bool = False  # False when integrity failed first (state not worth reading)
    quarantined: bool = False

    @property
    def passed(self) -> bool:
        return not self.findings

    def to_body(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "checkpoint_id": self.checkpoint_id,
            "checkpoint_type": self.checkpoint_type,
            "mode": self.mode.value,
            "evaluated_at": to_iso(self.evaluated_at),
            "seconds": round(self.seconds, 3),
            "passed": self.passed,
            "findings": [f.to_json() for f in self.findings],
            "gx_results": self.gx_results,
            "checks": self.checks,
            "skipped": list(self.skipped),
            "suites_run": self.suites_run,
            "quarantined": self.quarantined,
        }

    def encode(self) -> bytes:
        return records.encode(self.KIND, self.VERSION, self.to_body())

    @classmethod
    def from_body(cls, key: str, body: Mapping[str, Any]) -> CandidateReport:
        return cls(
            pipeline=records.field(key, body, "pipeline", str),
            checkpoint_id=records.field(key, body, "checkpoint_id", int),
            checkpoint_type=str(body.get("checkpoint_type", "checkpoint")),
            mode=GateMode(body.get("mode", GateMode.RESTORE.value)),
            evaluated_at=from_iso(key, body.get("evaluated_at")),
            seconds=float(body.get("seconds", 0.0)),
            findings=[Finding.from_json(f) for f in body.get("findings", [])],
            gx_results=dict(body.get("gx_results") or {}),
            checks=dict(body.get("checks") or {}),
            skipped=list(body.get("skipped") or []),
            suites_run=bool(body.get("suites_run", False)),
            quarantined=bool(body.get("quarantined", False)),
        )

    @classmethod
    def decode(cls, key: str, data: bytes) -> CandidateReport:
        _, body = records.decode(key, data, cls.KIND, (cls.VERSION,))
        return cls.from_body(key, body)

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
        return lines

    def _suite_summary(self) -> str:
        parts = []
        for state, suites in sorted(self.gx_results.items()):
            for name, result in sorted(suites.items()):
                stats = result.get("statistics") or {}
                parts.append(
                    f"{state} {name} {stats.get('successful_expectations', '?')}/"
                    f"{stats.get('evaluated_expectations', '?')}"
                )
        for state, checks in sorted(self.checks.items()):
            for name, details in sorted(checks.items()):
                if "keys_compared" in details:
                    parts.append(f"{state} {name} {details['keys_compared']} keys")
                elif "rows" in details:
                    parts.append(f"{state} {details['rows']} rows")
        return "; ".join(parts) if parts else "no suites declared"


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
        if self.quarantined_skipped:
            ids = ", ".join(map(str, self.quarantined_skipped))
            reasons.append(f"quarantined earlier (release to reconsider): {ids}")
        if self.not_reached:
            reasons.append(
                f"not examined (beyond max candidates): {', '.join(map(str, self.not_reached))}"
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
        if self.quarantined_skipped:
            ids = ", ".join(map(str, self.quarantined_skipped))
            lines.append(f"  skipped, quarantined earlier: {ids}")
        if self.not_reached:
            lines.append(
                f"  not examined (max candidates): {', '.join(map(str, self.not_reached))}"
            )
        return "\n".join(lines)
