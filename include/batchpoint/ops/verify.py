"""Verify a checkpoint or a savepoint folder: its files only (fast, no pipeline code),
or the quality gate's full report (integrity, then the suites and checks). Read-only
unless asked to quarantine."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from batchpoint.errors import BatchpointError, CheckpointNotFound, ConfigError, RecordError
from batchpoint.ops.inspect import missing_but_held
from batchpoint.ops.maintenance import table_findings
from batchpoint.ops.savepoints import discarded
from batchpoint.protocol.checkpoint import CheckpointStatus
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
        if (why := nothing_to(c, checkpoint_id, "verify")) is not None:
            raise BatchpointError(why)
        # The outcome record may be unreadable or, for one the control record holds,
        # missing (damage verify_files reports); else it must exist.
        if not c.has_outcome(checkpoint_id) and missing_but_held(c, checkpoint_id) is None:
            known = c.checkpoint_ids()
            shown = ", ".join(map(str, known[-10:])) if known else "none"
            raise CheckpointNotFound(
                f"pipeline '{c.pipeline}' has no checkpoint {checkpoint_id} (checkpoints: {shown})"
            )
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


def nothing_to(c: PipelineHistory, checkpoint_id: int, verb: str) -> str | None:
    """Why checkpoint `checkpoint_id` has nothing to `verb` (verify, read): still pending,
    aborted, or discarded, as one line that says what to do; None for any other (an id
    never taken, damaged records: the caller's to say). `verify` and `state show` both
    ask it before any work, so that they refuse a checkpoint in the same words."""
    what = f"checkpoint {checkpoint_id} of pipeline '{c.pipeline}'"
    if not c.has_outcome(checkpoint_id):
        # A completed one whose outcome record is gone is damage, not a pending one.
        if c.get_pending(checkpoint_id) is None or missing_but_held(c, checkpoint_id) is not None:
            return None
        return f"{what} is still pending: {verb} it once it has completed"
    if (why := _aborted(c, checkpoint_id)) is not None:
        return (
            f"{what} was aborted ({why}): it never completed, so it has no files or state "
            f"to {verb}; name a completed checkpoint (batchpoint checkpoints list)"
        )
    if (gone := discarded(c, checkpoint_id)) is not None:
        return f"{gone}: nothing to {verb}"
    return None


def _aborted(c: PipelineHistory, checkpoint_id: int) -> str | None:
    """The reason an aborted checkpoint gives, or None: not aborted, or its outcome
    record cannot be read (a finding verify reports, not a mistake in the command)."""
    try:
        outcome = c.get_outcome(checkpoint_id)
    except RecordError:
        return None
    if outcome is None or outcome.status is not CheckpointStatus.ABORTED:
        return None
    code = outcome.reason.code if outcome.reason else "aborted"
    message = outcome.message or (outcome.reason.message if outcome.reason else "")
    return f"{code}: {message}" if message else code


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
    except CheckpointNotFound:
        lost = _lost_outcome(coordinator, checkpoint_id)
        if lost is None:
            raise
        files, problems = 0, [lost]
    return FileCheck(name, files, [str(p) for p in problems], checkpoint_id)


def _lost_outcome(c: PipelineHistory, checkpoint_id: int | None) -> str | None:
    """Why a checkpoint the control record holds has no outcome record (damage: its
    files cannot be named), or None when it is not that."""
    if checkpoint_id is None or c.has_outcome(checkpoint_id):
        return None
    missing = missing_but_held(c, checkpoint_id)
    return None if missing is None else missing.failure_message


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
