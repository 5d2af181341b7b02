"""Verify a checkpoint or a savepoint folder: its files only (fast, no pipeline code),
or the quality gate's full report (integrity, then the suites and checks). Read-only
unless asked to quarantine."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from batchpoint.errors import BatchpointError, CheckpointNotFound, ConfigError, RecordError
from batchpoint.ops.maintenance import table_findings
from batchpoint.ops.savepoints import discarded
from batchpoint.protocol.pipeline_ports import PipelineHistory
from batchpoint.protocol.savepoints import (
    SavepointLocation,
    SavepointPathRefused,
    check_savepoint,
    confined,
    located_checkpoint,
    read_savepoint,
    read_savepoint_of,
)
from batchpoint.quality.gate import QualityGate
from batchpoint.quality.report import CandidateReport
from batchpoint.storage.base import ObjectStore

Target = int | SavepointLocation


def verify_target(
    coordinator: PipelineHistory,
    text: str | None,
    store_options: Mapping[str, str] | None = None,
    savepoint_roots: Sequence[str] | None = None,
) -> Target:
    """The checkpoint id (settled) or savepoint folder given; the head when none.
    Whatever was typed wrong is a BatchpointError, not a report. A savepoint folder is
    read only under the savepoint roots (None: the storage root's savepoints/)."""
    text = (text or "").strip()
    c = coordinator
    if text.lower() in ("", "head", "latest"):
        head = c.head.get().checkpoint_id
        if head is None:
            lost = c.lost_control()
            raise BatchpointError(
                lost or f"pipeline '{c.pipeline}' has no completed checkpoint yet"
            )
        return head
    if text.lstrip("+-").isdigit():
        checkpoint_id = int(text)
        if checkpoint_id < 1:
            raise ConfigError(f"checkpoint {text}: checkpoint ids start at 1")
        # The outcome record may be unreadable (that is a finding); it must exist.
        if not c.has_outcome(checkpoint_id):
            if c.get_pending(checkpoint_id) is not None:
                raise BatchpointError(
                    f"checkpoint {checkpoint_id} of pipeline '{c.pipeline}' is still pending: "
                    "verify it once it has completed"
                )
            known = c.checkpoint_ids()
            shown = ", ".join(map(str, known[-10:])) if known else "none"
            raise CheckpointNotFound(
                f"pipeline '{c.pipeline}' has no checkpoint {checkpoint_id} (checkpoints: {shown})"
            )
        if (gone := discarded(c, checkpoint_id)) is not None:
            raise BatchpointError(f"{gone}: nothing to verify")
        return checkpoint_id
    location = c.savepoints.locate(text, store_options)
    roots = c.savepoints.default_roots() if savepoint_roots is None else savepoint_roots
    try:
        return confined(location, roots)
    except SavepointPathRefused as exc:
        if "/" in text:
            raise
        raise SavepointPathRefused(
            f"'{text}' is not a checkpoint (an id, head or latest), and as a savepoint "
            f"folder: {exc}"
        ) from None


@dataclass
class FileCheck:
    target: str
    files: int
    problems: list[str]
    checkpoint_id: int | None = None

    @property
    def passed(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"target": self.target, "files": self.files}
        out["problems"] = self.problems
        if self.checkpoint_id is not None:
            out["checkpoint_id"] = self.checkpoint_id
        return out


def verify_files(
    coordinator: PipelineHistory, target: Target, *, checksums: bool = True
) -> FileCheck:
    """Every referenced file exists with its size (and checksum). A record of the
    target that cannot be read is its problem, not a mistake in the command: the check
    fails as for a missing file."""
    if isinstance(target, int):
        name, checkpoint_id = f"checkpoint {target}", target
    else:
        name, checkpoint_id = f"savepoint {target.uri}", None
    try:
        files, problems = _checked_files(coordinator, target, checksums)
    except RecordError as exc:  # corrupt, or of a version this release cannot read
        files, problems = 0, [exc]
    return FileCheck(name, files, [str(p) for p in problems], checkpoint_id)


def _checked_files(
    coordinator: PipelineHistory, target: Target, checksums: bool
) -> tuple[int, Sequence[object]]:
    """How many files the target references, and their problems."""
    if isinstance(target, int):
        completed = coordinator.completed.get(target)
        problems = coordinator.completed.check_files(completed, checksums=checksums)
        return len(completed.durable_handles), problems
    metadata = read_savepoint(target)
    return len(metadata.handles), check_savepoint(target, metadata, checksums=checksums)


def table_lag(coordinator: PipelineHistory, store: ObjectStore) -> list[str]:
    """The pipeline's table sinks that lag their manifests or cannot be read. Reported
    beside every verification, they do not fail it: `verify` judges a checkpoint's files
    and state, and a table behind them is the pipeline's to catch up (the next publish
    or restore syncs it; GC keeps what its snapshots read meanwhile)."""
    return [str(f) for f in table_findings(coordinator, store)]


@dataclass
class Verification:
    target: str
    report: CandidateReport

    @property
    def passed(self) -> bool:
        return self.report.passed

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, **self.report.to_body()}


def verify_quality(
    gate: QualityGate,
    target: Target,
    *,
    quarantine: bool = False,
    progress: Callable[[str], None] = lambda _line: None,
) -> Verification:
    """The gate's full report on the target; with `quarantine`, stored beside a
    checkpoint, which is quarantined if it failed."""
    if isinstance(target, int):
        what = f"checkpoint {target} of pipeline '{gate.pipeline.name}'"
        progress(f"verifying {what}")
        gate.prepare()  # a broken suite is a setup error, not a failed checkpoint
        report = gate.evaluate(target)
        if quarantine:
            gate.record(report)
        return Verification(what, report)
    metadata = read_savepoint_of(gate.pipeline.name, target)
    what = f"savepoint {target.uri} (checkpoint {metadata.checkpoint_id})"
    progress(f"verifying {what}")
    report = gate.evaluate_savepoint(located_checkpoint(target, metadata), target.store)
    if quarantine:
        progress("not quarantined: a savepoint folder is quarantined once imported")
    return Verification(what, report)
